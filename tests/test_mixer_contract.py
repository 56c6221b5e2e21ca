"""The contract every registered token mixer meets (README, "Adding a model"), checked once for all.

Parametrised over registry.names() plus named variants, with the tiny settings of
tests/helpers.py (a mixer without an entry runs with its defaults): a new mixer is tested here
with no edit. Each variant compiles one program that holds every check's computation; the
checks then run on its results and a failure lists every broken check with its numbers.
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

from lra import models
from lra.models import registry
from lra.models.settings import SettingError
from tests import helpers

HEADS, QKV, WIDTH = 2, 8, 8
LENGTH, SHORT = 13, 5  # not a multiple of the tiny blocks (4 or 3); row 1 real up to SHORT
SQUARE_LENGTH = 37  # for the shape walk: no other dimension (batch, width, blocks) is 37
DROPOUT = 0.3

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
    "mega-chunk": ("mega", dict(chunk_size=4), {}),
}
ENCODER_VARIANTS = {
    "reformer-reversible": ("reformer", {}, dict(reversible=True)),
}

# Mixers whose real outputs depend, by design, on the padded LENGTH (never on the padded
# content, which every mixer must ignore): for them trailing padding is not truncation.
LENGTH_DEPENDENT = {
    # "the DFT runs over all L positions (frequencies 2 pi k / L), and a shorter padding
    # gives a different transform of the same real tokens" (models/fnet.py).
    "fnet",
    # "They do depend on the padded LENGTH (it sets the segment boundaries), as in the
    # paper": the m landmarks are means over m segments of the padded sequence
    # (models/nystromformer.py).
    "nystromformer",
    # "The sorting network has N outputs, so it is built for the number of blocks seen at
    # init: apply the model at the padded length it was initialised with" (models/sinkhorn.py);
    # the truncated input cannot even be applied (sort_kernel's shape is per block count).
    "sinkhorn",
}
# (BigBird's pattern also depends on the number of blocks, but with the tiny settings the
# truncated row sees every real key either way, so it passes and is not exempt.)


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  """Every program here runs once or twice on tiny shapes: XLA's expensive passes (also of
  the op-by-op compiles of the no-jit run) cost more than they save."""
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", False)


def _mixer_variants():
  plain = {name: (name, {}, {}) for name in registry.names()}
  return {**plain, **VARIANTS}


def _split(variant):
  name, settings, encoder = {**_mixer_variants(), **ENCODER_VARIANTS}[variant]
  return name, {**helpers.tiny_settings(name), **settings}, encoder


class _Harness(nn.Module):
  """The mixer as the encoder builds it (registry.make with the encoder's fields), its shared
  module (registry.make_shared, e.g. Linformer's layer-shared E) made in this scope."""
  mixer: str
  settings: dict
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    shared = registry.make_shared(self.mixer, self.settings, num_heads=HEADS, qkv_dim=QKV,
                                  dtype=self.dtype)
    module = registry.make(self.mixer, self.settings, num_heads=HEADS, qkv_dim=QKV,
                           dropout_rate=_dropout(self.mixer), dtype=self.dtype, layer_index=1,
                           shared=shared, name="mixer")
    return module(x_BxLxD, mask_BxL, deterministic=deterministic)


def _takes_dropout(name: str) -> bool:
  return registry.get(name).ATTENTION_DROPOUT


def _dropout(name: str) -> float:
  return DROPOUT if _takes_dropout(name) else 0.0


def _inputs(length: int, seed: int):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(4, length, WIDTH)), jnp.float32)
  mask = helpers.contract_mask(length, min(SHORT, length))
  return x, jnp.asarray(mask), helpers.noise_where_padded(x, mask, rng)


def _mixer_program(harness, harness16, truncate: bool):
  """Everything the checks need, as one function of the inputs (one compile). Each call of
  the mixer inlines another copy of it into the program, so the calls are few: the clean and
  noisy rows share one batch, and vmap runs two dropout keys through one copy."""

  def program(x, mask, noisy, cotangent, x1, mask1):
    key = jax.random.PRNGKey(0)
    mask2 = jnp.concatenate([mask, mask])
    out2, params = harness.init_with_output({"params": key, "dropout": key},
                                            jnp.concatenate([x, noisy]), mask2,
                                            deterministic=True)
    r = dict(params=params, out=out2[:4], noisy=out2[4:])
    if truncate:
      r["truncated"] = harness.apply(params, x[1:2, :SHORT], mask[1:2, :SHORT],
                                     deterministic=True)

    r["dropped"] = jax.vmap(lambda k: harness.apply(
        params, x, mask, deterministic=False, rngs={"dropout": k}))(
            jax.random.split(jax.random.PRNGKey(1)))
    # Cotangents: of sum(real outputs^2), what pooling sees (row 3 is all padding), and a
    # random one on every output, so no NaN hides behind a zero cotangent. (vmap over the
    # vjp function only: vmap over a whole vjp of Nystromformer fails XLA's HLO verifier in
    # jax 0.10.2.)
    y, vjp = jax.vjp(lambda p, x: harness.apply(p, x, mask, deterministic=True), params, x)
    r["grads"] = jax.vmap(vjp)(jnp.stack([2 * jnp.where(mask[..., None], y, 0.0), cotangent]))
    r["bf16"] = harness16.apply(params, x.astype(jnp.bfloat16), mask, deterministic=True)
    r["one"] = harness.init_with_output(key, x1, mask1, deterministic=True)[0]
    return r

  return program


def _relative_error(a, b, mask):
  """max |a - b| over real positions, relative to max |b| there."""
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  keep = np.asarray(mask)[..., None]
  return float(np.max(np.abs(a - b) * keep) / max(np.max(np.abs(b) * keep), 1e-30))


class _Findings:
  """Collects every failed check (its key, what failed, the numbers), so one run reports them
  all."""

  def __init__(self, variant: str):
    self.variant, self.failed = variant, {}

  def check(self, ok, key: str, what: str):
    if not bool(ok):
      self.failed[key] = what

  def close(self, a, b, key: str, what: str, rtol=1e-5, atol=1e-5):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    err = np.abs(a - b) - rtol * np.abs(b)
    self.check(np.all(err <= atol), key, f"{what}: max |diff| {np.max(np.abs(a - b)):.3g}")

  def assert_none(self, level: str):
    assert not self.failed, f"{self.variant} breaks the {level} contract:\n  " + \
        "\n  ".join(f"[{k}] {v}" for k, v in self.failed.items())


def _finite(tree) -> bool:
  return all(np.all(np.isfinite(np.asarray(leaf, np.float32)))
             for leaf in jax.tree_util.tree_leaves(tree))


# bfloat16 keeps 8 bits of mantissa (relative step 2^-8 = 0.4%); after the projections,
# softmax or scan of a tiny mixer the real outputs stay within 5% of their float32 scale.
BF16_TOLERANCE = 0.05


@pytest.mark.parametrize("variant", sorted(_mixer_variants()))
def test_mixer_contract(variant):
  name, settings, _ = _split(variant)
  harness = _Harness(name, settings)
  harness16 = _Harness(name, settings, dtype="bfloat16")
  truncate = name not in LENGTH_DEPENDENT
  x, mask, noisy = _inputs(LENGTH, seed=0)
  cotangent = jnp.asarray(np.random.default_rng(1).normal(size=x.shape), jnp.float32)
  x1, mask1, _ = _inputs(1, seed=1)  # one token (rows: real, real, real, padding)
  r = helpers.run_once(_mixer_program(harness, harness16, truncate), x, mask, noisy,
                       cotangent, x1, mask1)
  f = _Findings(variant)

  out = r["out"]
  f.check(out.shape == x.shape and out.dtype == jnp.float32, "shape",
          f"float32 output {out.shape} {out.dtype}, want {x.shape} float32")
  f.check(_finite(out), "finite", "non-finite outputs (padded positions included)")
  real = np.asarray(mask)[..., None]
  f.close(np.where(real, r["noisy"], 0), np.where(real, out, 0), "padding",
          "real outputs change with the padded content")
  if truncate:
    f.close(r["truncated"][0], out[1, :SHORT], "truncation",
            "trailing padding differs from truncation")

  # Dropout: finite, and (where the mixer has any) seeded by its key.
  dropped = r["dropped"]
  f.check(_finite(dropped), "dropout_finite", "non-finite outputs with dropout")
  if _takes_dropout(name):
    f.check(not np.allclose(dropped[0], dropped[1]), "dropout",
            f"two dropout keys give the same output (dropout_rate={DROPOUT})")

  grads_p, grads_x = r["grads"]  # each [real-output loss, random cotangent]
  f.check(_finite(grads_p) and _finite(grads_x), "gradients",
          f"non-finite gradients (row 3 is all padding): parameters {_finite(grads_p)}, "
          f"inputs {_finite(grads_x)}")
  padded_grad = np.abs(np.asarray(grads_x[0]))[~np.asarray(mask)]
  f.check(np.all(padded_grad == 0), "padding_gradient",
          f"padded inputs get a gradient from real outputs (max {np.max(padded_grad):.3g})")
  dead = [jax.tree_util.keystr(path) for path, g in jax.tree_util.tree_flatten_with_path(
      grads_p)[0] if not np.any(np.asarray(g)[1] != 0)]  # the random cotangent's gradient
  f.check(not dead, "dead_parameters", f"parameters that get no gradient: {dead}")

  out16 = r["bf16"]
  f.check(out16.shape == x.shape and out16.dtype == jnp.bfloat16, "bf16",
          f"bfloat16 output {out16.shape} {out16.dtype}, want bfloat16")
  err16 = _relative_error(out16, out, mask)
  f.check(_finite(out16) and err16 <= BF16_TOLERANCE, "bf16",
          f"bfloat16 off float32 by {err16:.3g} of the output scale (> {BF16_TOLERANCE})")

  one = r["one"]
  f.check(one.shape == x1.shape and _finite(one), "length1", f"length 1: output {one.shape}, "
          f"finite={_finite(one)}")
  # jit and no-jit agree: the same parameters applied op by op (jitted: the init's output).
  eager = harness.apply(r["params"], x, mask, deterministic=True)
  f.close(eager, out, "jit", "no-jit differs from jit", rtol=1e-4, atol=1e-5)

  # Where the mixer claims it: no array with two sequence-length axes, forward or backward.
  module = registry.make(name, settings, num_heads=HEADS, qkv_dim=QKV,
                         dropout_rate=_dropout(name), dtype="float32", layer_index=1)
  if getattr(module, "SUBQUADRATIC", False):
    squares = _square_shapes(harness, SQUARE_LENGTH)
    f.check(not squares, "subquadratic", f"claims SUBQUADRATIC but forms {squares[:3]}")
  f.assert_none("mixer")


def _square_shapes(harness, length: int) -> list:
  """Shapes with two `length` axes in init + forward + backward of the mixer at that length."""
  x = jnp.zeros((1, length, WIDTH), jnp.float32)
  mask = jnp.ones((1, length), bool)

  def train_step(x):
    params = harness.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    loss = lambda p, x: jnp.sum(harness.apply(p, x, mask, deterministic=False,
                                              rngs={"dropout": jax.random.PRNGKey(1)}))
    return jax.grad(loss, (0, 1))(params, x)

  return helpers.length_squared_shapes(train_step, x, length=length)


def test_shape_walk_sees_dense_attention():
  """The SUBQUADRATIC check can fail: it finds the dense Transformer's L x L logits."""
  assert _square_shapes(_Harness("transformer", {}), SQUARE_LENGTH)


# --- the encoder: a tiny Classifier around each mixer ---

VOCAB, CLASSES = 20, 3


def _encoder_variants():
  """Every mixer, and the variants whose wiring in the encoder differs: a module shared by the
  layers (Linformer's "layer" sharing) and reversible layers."""
  return sorted([*registry.names(), "linformer-layer", *ENCODER_VARIANTS])


@pytest.mark.parametrize("variant", _encoder_variants())
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
  f = _Findings(variant)
  logits = r["logits"]
  f.check(logits.shape == (4, CLASSES) and logits.dtype == jnp.float32, "shape",
          f"logits {logits.shape} {logits.dtype}, want (4, {CLASSES}) float32")
  f.check(_finite(logits), "finite", "non-finite logits")
  f.close(r["noisy"], logits, "padding", "logits change with the padded tokens")
  if truncate:
    f.close(r["truncated"][0], logits[1], "truncation",
            "trailing padding differs from truncation")
  if encoder:
    f.check(_finite(r["dropped"]) and not np.allclose(r["dropped"][0], r["dropped"][1]),
            "dropout", "non-finite logits, or two dropout keys give the same")
    f.check(_finite(r["grads"]), "gradients", "non-finite gradients (row 3 is all padding)")
  f.assert_none("classifier")


@pytest.mark.parametrize("name", registry.names())
def test_a_mixer_without_attention_weights_refuses_attention_dropout(name):
  """No setting is silently ignored: attention_dropout_rate > 0 either drops (checked above)
  or, where there are no attention weights, is refused at build time."""
  build = lambda rate: registry.make(name, helpers.tiny_settings(name), num_heads=HEADS,
                                     qkv_dim=QKV, dropout_rate=rate, dtype="float32",
                                     layer_index=1)
  build(0.0)
  if _takes_dropout(name):
    build(DROPOUT)
  else:
    with pytest.raises(SettingError, match="attention_dropout_rate"):
      build(DROPOUT)
