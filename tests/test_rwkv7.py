"""RWKV-7 (Peng et al. 2025): the layer against fla's RWKV7Attention written out below from its
equations in float64 numpy (its V x K state, S <- S diag(w) + (S alpha) beta^T + v k^T, no
code of models/), causal and bidirectional, on rows with leading, inner and trailing padding
(each row's real tokens run alone: the shift skips padding); the initialisation against the
numbers fla's _initialize_weights gives (transcribed: fla-org/flash-linear-attention at
bc3b101d, run in PyTorch); the state count against Zoology's corrected one; the defaults.
What the family shares (chunked == recurrent at the layer, padding equals truncation, the
declared state) is tests/test_recurrent_family.py's; the comparison with fla's own naive
recurrence and the layer's forward run in PyTorch is in docs/models.md."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.blocks.token_shift import previous_real
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once

WIDTH, HEADS = 8, 2


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def _lora(p, name, x, act):
  h = x @ p[name]["down"]["kernel"]
  h = {"tanh": np.tanh, "sigmoid": _sigmoid, None: lambda z: z}[act](h)
  return h @ p[name]["up"]["kernel"] + p[name]["up"].get("bias", 0.0)


def _fla_layer(p, x_TxD, heads, bidirectional):
  """fla's RWKV7Attention (layer 0, fuse_norm False) on one row's real tokens, float64."""
  length, width = x_TxD.shape
  key = width // heads
  heads_of = lambda z: z.reshape(z.shape[:-1] + (heads, key))
  delta = np.concatenate([np.zeros((1, width)), x_TxD[:-1]]) - x_TxD  # ZeroPad2d - x
  xc = {c: x_TxD + delta * p[f"x_{c}"] for c in "rwkvag"}
  r, k, v = (heads_of(xc[c] @ p[f"{c}_proj"]["kernel"]) for c in "rkv")
  w = heads_of(np.exp(-0.6065306597126334 * _sigmoid(_lora(p, "w_lora", xc["w"], "tanh"))))
  a = heads_of(_sigmoid(_lora(p, "a_lora", xc["a"], None)))
  g = heads_of(_lora(p, "g_lora", xc["g"], "sigmoid"))
  kk = k * heads_of(p["k_k"])
  kk = kk / np.maximum(np.linalg.norm(kk, axis=-1, keepdims=True), 1e-12)  # F.normalize
  k = k * (1 + (a - 1) * heads_of(p["k_a"]))
  alpha, beta = -kk, kk * a

  def loop(order):
    S, o = np.zeros((heads, key, key)), np.zeros((length, heads, key))  # V x K per head
    for t in order:
      S = (S * w[t][:, None, :] + (S @ alpha[t][..., None]) * beta[t][:, None, :]
           + v[t][:, :, None] * k[t][:, None, :])
      o[t] = (S @ r[t][..., None])[..., 0]
    return o

  o = loop(range(length))
  if bidirectional:
    o = 0.5 * (o + loop(range(length - 1, -1, -1)))
  mean, var = o.mean(-1, keepdims=True), o.var(-1, keepdims=True)
  o = ((o - mean) / np.sqrt(var + key * 1e-5) * heads_of(p["g_norm_weight"])
       + heads_of(p["g_norm_bias"]))
  o = o + np.sum(r * k * p["r_k"], -1, keepdims=True) * v
  return (o * g).reshape(length, width) @ p["o_proj"]["kernel"]


def test_layer_matches_fla_written_out_on_padded_rows():
  """Both directions (recurrent form: the cheaper compile; the chunked form computes the same
  function, tests/test_recurrent_family.py), perturbed weights, rows with padding before,
  inside and after the real tokens: the real outputs are fla's on the real tokens alone."""
  rng = np.random.default_rng(0)
  length = 11
  x = rng.normal(size=(2, length, WIDTH)).astype(np.float32)
  mask = np.ones((2, length), bool)
  mask[1, :2] = mask[1, 5] = mask[1, 9:] = False
  mixers = [registry.make("rwkv7", dict(form="recurrent", bidirectional=b), num_heads=HEADS,
                          layer_index=1, num_layers=3) for b in (False, True)]

  def program(x):
    variables = helpers.perturb(mixers[1].init(jax.random.PRNGKey(1), x, jnp.asarray(mask),
                                               deterministic=True), seed=2, scale=0.2)
    return variables, [m.apply(variables, x, jnp.asarray(mask), deterministic=True)
                       for m in mixers]

  variables, outs = run_once(program, jnp.asarray(x))
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), variables["params"])
  for bidirectional, out in zip((False, True), outs):
    for row in range(2):
      real = np.flatnonzero(mask[row])
      want = _fla_layer(p, x[row, real].astype(np.float64), HEADS, bidirectional)
      assert np.abs(want).max() > 0.1
      np.testing.assert_allclose(np.asarray(out)[row, real], want, rtol=1e-4, atol=1e-5)


# fla's RWKV7Attention(hidden_size=8, head_dim=4, layer_idx=1, num_hidden_layers=3) after its
# _initialize_weights (fla at bc3b101d, PyTorch 2.13): its per-channel tables, float32.
FLA_INIT = {
    "x_r": [1.0, 0.24214172, 0.16876209, 0.12258679, 0.08827752, 0.06074393, 0.03763127,
            0.01764661],
    "x_w": [1.0, 0.71282542, 0.56472468, 0.44483924, 0.34024602, 0.24572796, 0.15853363,
            0.07699335],
    "x_k": [1.0, 0.62107086, 0.47635293, 0.3672756, 0.2763654, 0.1969474, 0.12562996,
            0.06041282],
    "k_k": [0.76, 0.74571425, 0.73142856, 0.71714282, 0.70285714, 0.68857139, 0.67428571, 0.66],
    "w_bias": [-8.0, -5.60132837, -4.60254908, -1.70793486, -5.82376909, -2.51693106,
               -0.68461633, 3.0],
    "a_bias": [-0.69, -0.36619049, -0.24238095, 0.08142859, -0.46142858, -0.13761905,
               -0.01380952, 0.31],
}
# fla's ranks (decay, a, gate) when none is given, at (hidden_size, head_dim).
FLA_RANKS = {(32, 16): (32, 32, 32), (128, 64): (32, 32, 64), (1024, 64): (64, 64, 160),
             (2048, 64): (128, 128, 224), (512, 128): (128, 128, 128), (96, 24): (32, 32, 64)}


def test_initialisation_is_flas():
  """The per-channel tables, k_a 1.02, r_k -0.04, the GroupNorm's ((l + 1) / N)^0.7 and 0,
  k_proj orthogonal x 0.1, the LoRA ups orthogonal x 0.1 sqrt(R / D) (R = 32 > D = 8), o_proj
  and the LoRA downs 0 (so the layer outputs 0 at init, and on the first step only o_proj
  gets a gradient). The ranks."""
  mixer = registry.make("rwkv7", {}, num_heads=HEADS, layer_index=1, num_layers=3)
  init = lambda x: mixer.init(jax.random.PRNGKey(0), x, jnp.ones((1, 3), bool),
                              deterministic=True)["params"]
  p = run_once(init, jnp.ones((1, 3, WIDTH)))
  table = dict(FLA_INIT, x_v=FLA_INIT["x_k"], x_a=FLA_INIT["x_w"], x_g=FLA_INIT["x_r"])
  got = dict(p, w_bias=p["w_lora"]["up"]["bias"], a_bias=p["a_lora"]["up"]["bias"])
  for name, want in table.items():
    np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-7, err_msg=name)
  np.testing.assert_allclose(p["k_a"], 1.02)
  np.testing.assert_allclose(p["r_k"], np.full((HEADS, 4), -0.04))
  np.testing.assert_allclose(p["g_norm_weight"], (2 / 3) ** 0.7, rtol=1e-6)
  assert not np.any(p["g_norm_bias"]) and "bias" not in p["g_lora"]["up"]
  k_proj = np.asarray(p["k_proj"]["kernel"])
  np.testing.assert_allclose(k_proj.T @ k_proj, 0.01 * np.eye(WIDTH), atol=1e-6)
  up = np.asarray(p["w_lora"]["up"]["kernel"])  # 32 x 8: orthonormal columns, x 0.2
  np.testing.assert_allclose(up.T @ up, 0.04 * np.eye(WIDTH), atol=1e-6)
  for zero in (p["o_proj"], p["w_lora"]["down"], p["a_lora"]["down"], p["g_lora"]["down"]):
    assert not np.any(np.asarray(zero["kernel"]))
  for (width, key), ranks in FLA_RANKS.items():
    got = registry.make("rwkv7", {}, num_heads=width // key).ranks(width, key)
    assert (got["w"], got["a"], got["g"]) == ranks, (width, key)


def test_the_shift_reads_the_previous_real_token():
  """0 before the first real token; after a hole, the last real token before it."""
  x = np.arange(1.0, 7.0).reshape(1, 6, 1)
  mask = np.asarray([[False, True, True, False, True, False]])
  got = np.asarray(previous_real(jnp.asarray(x), jnp.asarray(mask)))[0, :, 0]
  np.testing.assert_array_equal(got[mask[0]], [0.0, 2.0, 3.0])


def test_state_is_zoologys_corrected_count():
  """Zoology's state_size after its fix, num_heads x head_dim x head_dim (its first count,
  num_heads x d_model x d_model, was H^2 = 4 times more at d_model 128 with head_dim 64): one
  direction's, twice that with two."""
  for bidirectional in (False, True):
    mixer = registry.make("rwkv7", dict(bidirectional=bidirectional), num_heads=2)
    assert mixer.carried_state(128, 256) == (1 + bidirectional) * 2 * 64 * 64
  assert 2 * 128 * 128 == 4 * registry.make("rwkv7", {}, num_heads=2).carried_state(128, 1)


def test_defaults_heads_and_parameters():
  """The defaults (ranks from fla's formula, the authors' init); K = V = D / H, a width the
  heads do not split refused in one line; fla's parameters (no v_lora: no value residual)."""
  assert registry.default_settings("rwkv7") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", decay_low_rank_dim=0,
      a_low_rank_dim=0, gate_low_rank_dim=0, zero_init=True)
  mixer = registry.make("rwkv7", {}, num_heads=HEADS)
  assert mixer.head_sizes(WIDTH) == (HEADS, 4, 4)
  with pytest.raises(SettingError, match=r"^config.model.num_heads=3 is not valid") as error:
    registry.make("rwkv7", {}, num_heads=3).head_sizes(WIDTH)
  assert "\n" not in str(error.value)
  shapes = jax.tree_util.tree_map(jnp.shape, jax.eval_shape(
      lambda: registry.make("rwkv7", dict(gate_low_rank_dim=5), num_heads=HEADS).init(
          jax.random.PRNGKey(0), jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool),
          deterministic=True))["params"])
  assert set(shapes) == {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "k_k", "k_a", "r_k",
                         "r_proj", "k_proj", "v_proj", "o_proj", "w_lora", "a_lora", "g_lora",
                         "g_norm_weight", "g_norm_bias"}
  assert shapes["g_lora"] == {"down": {"kernel": (WIDTH, 5)}, "up": {"kernel": (5, WIDTH)}}
  assert shapes["r_k"] == (HEADS, 4) and shapes["w_lora"]["up"]["bias"] == (WIDTH,)
