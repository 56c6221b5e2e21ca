"""Synthesizer mixer: each mode against logits rebuilt here from its parameters."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.synthesizer  # noqa: F401  (registers "synthesizer")
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.mixers.synthesizer import MODES, SynthesizerAttention
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

HEADS, DIM, LENGTH, SHORT = 2, 8, 7, 5
# Rows as helpers.padded_inputs makes them (trailing padding after 4 in row 1, a hole at 2 in
# row 2), and the last two positions padding in every row: a prefix of SHORT tokens keeps
# every real one.
MASK = helpers.trailing_mask([SHORT, 4, SHORT], LENGTH)
MASK[2, 2] = False


def _inputs(seed=0):
  """x (helpers.padded_inputs) and x with noise at MASK's padded positions."""
  x, _, rng = helpers.padded_inputs(LENGTH, DIM, seed)
  return x, helpers.noise_where_padded(x, MASK, rng)


def _init(mixer, x):
  """Initialises inside the caller's compiled function (one compile per test)."""
  return mixer.init(jax.random.PRNGKey(0), x, jnp.asarray(MASK), deterministic=True)


def _with_mix(params, synthetic_weight):
  """Params whose mixing softmax gives exactly (w, 1 - w) for w in {0, 1}: exp(-2e4) is 0."""
  big = 1e4 if synthetic_weight == 1 else -1e4
  p = dict(params["params"], mix_logits=jnp.tile(jnp.array([[big, -big]]), (HEADS, 1)))
  return {"params": p}


def _mlp(p, x_BxLxD, name):
  """The per-head MLP W2 relu(W1 x + b1) + b2, written out: BxHxLxO."""
  hidden = p[f"{name}_hidden"]
  h_BxHxLxK = jax.nn.relu(jnp.einsum("bld,dhk->bhlk", x_BxLxD, hidden["kernel"])
                          + hidden["bias"][None, :, None, :])
  return (jnp.einsum("bhlk,hko->bhlo", h_BxHxLxK, p[f"{name}_kernel"])
          + p[f"{name}_bias"][None, :, None, :])


def _synthetic_reference(mode, p, x_BxLxD):
  """Synthetic logits BxHxLxL from the parameters, straight from each mode's definition."""
  length = x_BxLxD.shape[1]
  if mode == "dense":
    return _mlp(p, x_BxLxD, "dense")[..., :length]
  if mode == "factorized_dense":
    a_BxHxLxA, b_BxHxLxB = _mlp(p, x_BxLxD, "factor_a"), _mlp(p, x_BxLxD, "factor_b")
    outer = b_BxHxLxB[..., :, None] * a_BxHxLxA[..., None, :]  # B_q A_p at flat q * a + p
    return outer.reshape(*outer.shape[:3], -1)[..., :length]
  if mode == "random":
    return jnp.broadcast_to(p["random_logits"][None, :, :length, :length],
                            (x_BxLxD.shape[0], HEADS, length, length))
  r = jnp.einsum("hir,hjr->hij", p["random_factor1"], p["random_factor2"])
  return jnp.broadcast_to(r[None, :, :length, :length], (x_BxLxD.shape[0], HEADS, length, length))


def _attend(p, logits_BxHxLxL, x_BxLxD, mask_BxL, value_kernel):
  """Softmax over the real keys only (padded ones dropped, not down-weighted), then projections."""
  ok = mask_BxL[:, None, None, :]
  e = jnp.where(ok, jnp.exp(logits_BxHxLxL - jnp.max(jnp.where(ok, logits_BxHxLxL, -jnp.inf),
                                                    -1, keepdims=True)), 0.0)
  weights = e / jnp.sum(e, -1, keepdims=True)
  v_BxHxLxK = jnp.einsum("bld,dhk->bhlk", x_BxLxD, value_kernel)
  out = p["OutputProjection_0"]["out"]
  y_BxLxD = jnp.einsum("bhlk,hkd->bld", weights @ v_BxHxLxK, out["kernel"])
  return y_BxLxD + out["bias"][None, None, :]


# The dense and random modes by default; their factorised forms `-m slow` (the same mixing,
# only how the logits are made differs; factorized_random is also the product, tested below).
@pytest.mark.parametrize("mode", [m if not m.startswith("factorized") else
                                  pytest.param(m, marks=pytest.mark.slow) for m in MODES])
def test_mode_mixing_truncation_and_gradients(mode):
  """Each mode's synthetic attention (mixing weight 1) against its definition, dot-product
  attention (weight 0) against the Transformer's; inputs shorter than the init length; every
  synthetic parameter learns."""
  x, _ = _inputs()
  mask = jnp.asarray(MASK)
  mixer = SynthesizerAttention(num_heads=HEADS, qkv_dim=DIM, mode=mode)
  full = transformer.FullAttention(num_heads=HEADS, qkv_dim=DIM)
  real = lambda y: jnp.where(mask[:, :, None], y, 0.0)

  def run(x):
    params = _init(mixer, x)
    apply = lambda p, x, m=mask: mixer.apply(p, x, m, deterministic=True)
    p = params["params"]
    kernel = p["QKVProjection_0"]["value"]["kernel"]
    reference = _attend(p, _synthetic_reference(mode, p, x), x, mask, kernel)
    only_qkv = {"params": {k: p[k] for k in ("QKVProjection_0", "OutputProjection_0")}}
    loss = lambda p: jnp.sum(real(apply(p, x)) * x)
    return dict(
        synthetic=(apply(_with_mix(params, 1), x), reference),
        dot=(apply(_with_mix(params, 0), x), full.apply(only_qkv, x, mask, deterministic=True)),
        short=(apply(params, x[:, :SHORT], mask[:, :SHORT]), apply(params, x)[:, :SHORT]),
        grads=jax.grad(loss)(params))

  out = _run(run, x)
  keep = np.asarray(MASK)
  for check in ("synthetic", "dot"):
    got, want = (np.asarray(a)[keep] for a in out[check])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=check)
  # Inputs shorter than the init length use the leading block of the synthetic logits.
  got, want = out["short"]
  np.testing.assert_allclose(np.asarray(got)[keep[:, :SHORT]], np.asarray(want)[keep[:, :SHORT]],
                             rtol=1e-5, atol=1e-5)
  grads = out["grads"]["params"]
  assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))
  synthetic_grads = [v for k, v in grads.items()
                     if k.split("_")[0] in ("dense", "factor", "random")]
  assert synthetic_grads and all(np.any(np.asarray(g) != 0)
                                 for g in jax.tree_util.tree_leaves(synthetic_grads))


def test_random_weights_do_not_depend_on_the_input():
  """Identity value/output projections make the output the attention matrix times x, so the
  softmax of R must reproduce it for two unrelated inputs; x at padded keys changes nothing."""
  x_a, x_b = _inputs(1)[0], _inputs(2)[1]
  mask = jnp.asarray(MASK)
  mixer = SynthesizerAttention(num_heads=HEADS, qkv_dim=DIM, mode="random",
                               mix_dot_product=False)
  eye_HxKxD = jnp.eye(DIM).reshape(HEADS, DIM // HEADS, DIM)

  def run(x_a, x_b):
    params = _init(mixer, x_a)
    params = {"params": dict(params["params"], value={"kernel": eye_HxKxD.transpose(2, 0, 1)},
                             OutputProjection_0={"out": {"kernel": eye_HxKxD,
                                                         "bias": jnp.zeros(DIM)}})}
    return params["params"]["random_logits"], [mixer.apply(params, x, mask, deterministic=True)
                                               for x in (x_a, x_b)]

  r_HxLxL, outs = _run(run, x_a, x_b)
  weights_BxHxLxL = jax.nn.softmax(jnp.where(mask[:, None, None, :], r_HxLxL[None], -jnp.inf))
  for x, out in zip((x_a, x_b), outs):
    x_BxHxLxK = x.reshape(len(x), LENGTH, HEADS, DIM // HEADS).transpose(0, 2, 1, 3)
    want = (weights_BxHxLxL @ x_BxHxLxK).transpose(0, 2, 1, 3).reshape(x.shape)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_factorized_random_is_random_with_the_product():
  x, _ = _inputs()
  mask = jnp.asarray(MASK)
  factorized = SynthesizerAttention(num_heads=HEADS, qkv_dim=DIM, mode="factorized_random",
                                    factor_rank=3)
  dense_r = SynthesizerAttention(num_heads=HEADS, qkv_dim=DIM, mode="random")

  def both(x):
    params = _init(factorized, x)
    p = dict(params["params"])
    r_HxLxL = jnp.einsum("hir,hjr->hij", p.pop("random_factor1"), p.pop("random_factor2"))
    as_random = {"params": dict(p, random_logits=r_HxLxL)}
    return (params["params"]["random_factor1"],
            factorized.apply(params, x, mask, deterministic=True),
            dense_r.apply(as_random, x, mask, deterministic=True))

  factor1, got, want = _run(both, x)
  assert factor1.shape == (HEADS, LENGTH, 3)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fixed_random_has_no_parameters_and_is_length_consistent():
  x, x_noisy = _inputs()
  mask = jnp.asarray(MASK)
  mixer = SynthesizerAttention(num_heads=HEADS, qkv_dim=DIM, trainable_random=False)
  params = jax.eval_shape(lambda x: _init(mixer, x), x)
  assert sorted(params["params"]) == ["OutputProjection_0", "QKVProjection_0", "mix_logits"]
  apply = lambda p, x, m: mixer.apply(p, x, m, deterministic=True)

  def run(x, x_noisy):
    p = _init(mixer, x)
    return apply(p, x, mask), apply(p, x_noisy, mask), apply(p, x[:, :SHORT], mask[:, :SHORT])

  full, noisy, short = _run(run, x, x_noisy)
  np.testing.assert_allclose(np.asarray(noisy)[MASK], np.asarray(full)[MASK], rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(np.asarray(short)[MASK[:, :SHORT]],
                             np.asarray(full)[:, :SHORT][MASK[:, :SHORT]], rtol=1e-5, atol=1e-5)


def _model(**attention_settings):
  settings = dict(name="synthesizer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32,
                  num_layers=2, attention=attention_settings)
  return models.build(settings, vocab_size=20, num_classes=5, max_len=10, pair=False)


@pytest.mark.parametrize("mode", ["random", "factorized_random"])
def test_random_logits_cover_the_cls_token(mode):
  """In the encoder, the trainable random logits are made for max_len + 1 positions (CLS)."""
  model = _model(mode=mode)
  # Shapes only (no compile): init is traced abstractly.
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((3, 10), jnp.int32))
  mixer_params = params["params"]["encoder"]["block_0"]["mixer"]
  assert any(11 in v.shape for v in jax.tree_util.tree_leaves(mixer_params))


def test_settings():
  assert registry.default_settings("synthesizer") == {
      "mode": "random", "mix_dot_product": True, "trainable_random": True, "factor_rank": 8}
  with pytest.raises(SettingError,
                     match="'dense', 'random', 'factorized_dense', 'factorized_random'"):
    _model(mode="convolutional")
  with pytest.raises(SettingError, match="factor_rank"):
    _model(mode="factorized_random", factor_rank=0)
  with pytest.raises(SettingError, match="mode"):
    _model(kind="random")
