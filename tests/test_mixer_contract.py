"""The contract every registered token mixer meets (README, "Adding a model"), checked once for all.

The mixer-level contract is lra.testing.check_mixer (the public helper an outside mixer's own
tests call: one implementation); it runs here over registry.names() plus named variants, with
the tiny settings of tests/helpers.py (a mixer without an entry runs with its defaults): a new
mixer is tested here with no edit. Each variant compiles one program that holds every check's
computation; the checks then run on its results and a failure lists every broken check with its
numbers. The encoder-level checks (a tiny Classifier around each mixer) are below.
Exemptions are named below with the mixer docstring's reason (LENGTH_DEPENDENT); a mixer
without attention weights says so (ATTENTION_DROPOUT = False) and must then refuse
attention dropout. A mixer's own test file keeps only what is particular to it (its reference).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models, testing
from lra.models import registry
from lra.models.common import HeadsMixer
from lra.rules import SettingError
from lra.testing import DROPOUT, HEADS, LENGTH, QKV, SHORT, Findings, finite, takes_dropout
from tests import helpers

# Named variants beyond each registered name's tiny settings: id -> (mixer, settings update,
# encoder update). Encoder-only variants (reversible layers) run in the encoder checks only.
VARIANTS = {
    "transformer-chunked": ("transformer", dict(implementation="chunked", query_chunk=4,
                                                key_chunk=3), {}),
    "linformer-kv": ("linformer", dict(sharing="kv"), {}),
    "linformer-layer": ("linformer", dict(sharing="layer"), {}),
    "bigbird-etc": ("bigbird", dict(mode="etc"), {}),
    "longformer-dilated": ("longformer", dict(dilation=(1, 2)), {}),
    "performer-relu": ("performer", dict(kernel="relu"), {}),
    "mamba-bidirectional": ("mamba", dict(bidirectional=True), {}),
    "gla-gated": ("gla", dict(bidirectional=True, combine="gated"), {}),
    "mega-chunk": ("mega", dict(chunk_size=4), {}),
}
ENCODER_VARIANTS = {
    "reformer-reversible": ("reformer", {}, dict(reversible=True)),
}

# Mixers whose real outputs depend, by design, on the padded LENGTH (never on the padded
# content, which every mixer must ignore): for them trailing padding is not truncation.
LENGTH_DEPENDENT = {
    # "the DFT runs over all L positions (frequencies 2 pi k / L), and a shorter padding
    # gives a different transform of the same real tokens" (models/mixers/fnet.py).
    "fnet",
    # "They do depend on the padded LENGTH (it sets the segment boundaries), as in the
    # paper": the m landmarks are means over m segments of the padded sequence
    # (models/mixers/nystromformer.py).
    "nystromformer",
    # "The sorting network has N outputs, so it is built for the number of blocks seen at
    # init: apply the model at the padded length it was initialised with"
    # (models/mixers/sinkhorn.py); the truncated input cannot even be applied (sort_kernel's
    # shape is per block count).
    "sinkhorn",
}
# (BigBird's pattern also depends on the number of blocks, but with the tiny settings the
# truncated row sees every real key either way, so it passes and is not exempt.)


def _mixer_variants():
  plain = {name: (name, {}, {}) for name in registry.names()}
  return {**plain, **VARIANTS}


def _split(variant):
  name, settings, encoder = {**_mixer_variants(), **ENCODER_VARIANTS}[variant]
  return name, {**helpers.tiny_settings(name), **settings}, encoder


# The named variants' contracts `-m slow` (a setting's other code path), and those of the
# recurrent members whose core kind another member's contract runs (helpers.SAME_CORE_KIND);
# every other registered mixer's own contract stays in the default suite.
@pytest.mark.parametrize("variant", [
    pytest.param(v, marks=pytest.mark.slow) if v in VARIANTS or v in helpers.SAME_CORE_KIND
    else v for v in sorted(_mixer_variants())])
def test_mixer_contract(variant):
  """All of the contract but the jit check (below, in the slow set: its op-by-op run compiles
  every primitive on its own and doubled the default tests' time of this file)."""
  name, settings, _ = _split(variant)
  testing.check_mixer(name, settings, length_dependent=name in LENGTH_DEPENDENT, label=variant,
                      op_by_op=False)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(_mixer_variants()))
def test_mixer_op_by_op_equals_jit(variant):
  name, settings, _ = _split(variant)
  testing.check_op_by_op(name, settings, label=variant)


def test_the_jit_check_sees_a_mixer_that_computes_otherwise_when_traced():
  """check_op_by_op can fail: a mixer whose output doubles under tracing."""

  class TwoFaced(HeadsMixer):
    ATTENTION_DROPOUT = False

    @nn.compact
    def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
      traced = isinstance(x_BxLxD, jax.core.Tracer)
      return nn.Dense(x_BxLxD.shape[-1])(x_BxLxD) * (2.0 if traced else 1.0)

  with pytest.raises(AssertionError, match=r"TwoFaced breaks the mixer contract:\n  \[jit\] "
                     "no-jit differs from jit"):
    testing.check_op_by_op(TwoFaced)


def test_shape_walk_sees_dense_attention():
  """The SUBQUADRATIC check can fail: it finds the dense Transformer's L x L logits."""
  assert testing.square_shapes(testing.Harness("transformer", {}))


def test_the_contract_names_the_property_a_mixer_breaks():
  """A mixer that lets padding leak, falsely claims SUBQUADRATIC and declares a setting
  without a rule fails with all three named."""

  class Leaky(HeadsMixer):
    scale: float = 1.0  # a setting declared without rules.setting: no rule
    SUBQUADRATIC = True
    ATTENTION_DROPOUT = False

    @nn.compact
    def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
      scores_BxLxL = jnp.einsum("bld,bmd->blm", x_BxLxD, x_BxLxD) / x_BxLxD.shape[-1]
      return nn.Dense(x_BxLxD.shape[-1])(jax.nn.softmax(scores_BxLxL) @ x_BxLxD)

  with pytest.raises(AssertionError) as failed:
    testing.check_mixer(Leaky)
  assert "Leaky breaks the mixer contract" in str(failed.value)
  assert "[padding] real outputs change with the padded content" in str(failed.value)
  assert "[subquadratic] claims SUBQUADRATIC" in str(failed.value)
  assert "[settings] setting(s) scale have no rule, so any value trains unchecked" \
      in str(failed.value)


# --- the encoder: a tiny Classifier around each mixer ---

VOCAB, CLASSES = 20, 3


def _encoder_variants():
  """Every mixer, and the variants whose wiring in the encoder differs: a module shared by the
  layers (Linformer's "layer" sharing) and reversible layers."""
  return sorted([*registry.names(), "linformer-layer", *ENCODER_VARIANTS])


# The encoder's code is the same around every mixer: one mixer of each kind the encoder builds
# around differently, and the encoder variants, in the default suite; every mixer `-m slow`.
_ENCODER_KINDS = helpers.one_of_each_encoder_kind()


@pytest.mark.parametrize("variant", [
    v if v in _ENCODER_KINDS or v not in registry.names()
    else pytest.param(v, marks=pytest.mark.slow) for v in _encoder_variants()])
def test_classifier_contract(variant):
  name, settings, encoder = _split(variant)
  # One layer: the mixer-level checks cover the mixer; this covers the encoder around it.
  model = models.build(helpers.tiny_model(name, attention=settings, num_layers=1, **encoder),
                       vocab_size=VOCAB, num_classes=CLASSES, max_len=LENGTH, pair=False)
  rng = np.random.default_rng(0)
  mask = helpers.contract_mask(LENGTH, SHORT)
  tokens = jnp.asarray(np.where(mask, rng.integers(1, VOCAB, mask.shape), 0), jnp.int32)
  noisy = jnp.asarray(np.where(mask, tokens, rng.integers(1, VOCAB, mask.shape)), jnp.int32)
  mask = jnp.asarray(mask)
  # Truncation through the plain encoder is the mixer's (checked above); encoder variants
  # (reversible layers) run their own code and are checked here.
  truncate = bool(encoder) and name not in LENGTH_DEPENDENT

  def program(tokens, noisy):
    # Clean and noisy rows in one batch, initialised and applied by one copy of the model.
    both, params = model.init_with_output(jax.random.PRNGKey(0), jnp.concatenate(
        [tokens, noisy]), jnp.concatenate([mask, mask]))
    r = dict(logits=both[:4], noisy=both[4:])
    if truncate:
      r["truncated"] = model.apply(params, tokens[1:2, :SHORT], mask[1:2, :SHORT])
    if encoder:  # encoder-level variants (reversible layers): their own backward pass

      def loss(p, key):
        logits = model.apply(p, tokens, mask, deterministic=False, rngs={"dropout": key})
        return jnp.sum(logits ** 2), logits

      (_, r["dropped"]), r["grads"] = jax.vmap(jax.value_and_grad(loss, has_aux=True),
                                               (None, 0))(params, jax.random.split(
                                                   jax.random.PRNGKey(1)))
    return r

  r = helpers.run_once(program, tokens, noisy)
  f = Findings(variant)
  logits = r["logits"]
  f.check(logits.shape == (4, CLASSES) and logits.dtype == jnp.float32, "shape",
          f"logits {logits.shape} {logits.dtype}, want (4, {CLASSES}) float32")
  f.check(finite(logits), "finite", "non-finite logits")
  f.close(r["noisy"], logits, "padding", "logits change with the padded tokens")
  if truncate:
    f.close(r["truncated"][0], logits[1], "truncation",
            "trailing padding differs from truncation")
  if encoder:
    f.check(finite(r["dropped"]) and not np.allclose(r["dropped"][0], r["dropped"][1]),
            "dropout", "non-finite logits, or two dropout keys give the same")
    f.check(finite(r["grads"]), "gradients", "non-finite gradients (row 3 is all padding)")
  f.assert_none("classifier")


@pytest.mark.parametrize("name", registry.names())
def test_a_mixer_without_attention_weights_refuses_attention_dropout(name):
  """No setting is silently ignored: attention_dropout_rate > 0 either drops (checked above)
  or, where there are no attention weights, is refused at build time."""
  build = lambda rate: registry.make(name, helpers.tiny_settings(name), num_heads=HEADS,
                                     qkv_dim=QKV, dropout_rate=rate, dtype="float32",
                                     layer_index=1)
  build(0.0)
  if takes_dropout(name):
    build(DROPOUT)
  else:
    with pytest.raises(SettingError, match="attention_dropout_rate"):
      build(DROPOUT)
