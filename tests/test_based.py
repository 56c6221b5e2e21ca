"""Based (Arora et al. 2024): the Taylor feature map's kernel; each kind of layer (Taylor linear
attention, sliding-window softmax attention, BaseConv) against a dense reference written here
from the equations (L x L weights; outputs and the gradients of parameters and input), causal
and not, on rows with trailing padding and a hole; padding = truncation across chunks; the
kinds cycled by layer index in the encoder; the contract for the kinds and the causal form the
shared contract test (layer 1 of the default: non-causal linear attention) does not reach; the
state sizes, Zoology's initialisation and the settings."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models, testing
from lra.models import registry
from lra.models.mixers.based import Based
from lra.models.ops.taylor_attention import taylor_features
from lra.rules import SettingError
from tests import helpers

WIDTH, HEADS, LENGTH, F, WINDOW = 8, 2, 13, 4, 3  # V = 8 / 2 = 4 per head


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with testing.cheap_compiles():
    yield


def test_taylor_features_give_the_second_order_kernel():
  """phi(q).phi(k) = 1 + s + s^2 / 2 with the authors' s = q.k / sqrt(f), f = 6 here (no
  scale-free 1 + q.k + (q.k)^2 / 2), over 1 + f + f^2 features."""
  rng = np.random.default_rng(0)
  q, k = (rng.normal(size=(3, 5, 2, 6)).astype(np.float32) for _ in range(2))
  phi_q, phi_k = np.asarray(taylor_features(q)), np.asarray(taylor_features(k))
  assert phi_q.shape == (3, 5, 2, 1 + 6 + 36)
  s = np.sum(q.astype(np.float64) * k, -1) / np.sqrt(6)
  np.testing.assert_allclose(np.sum(phi_q * phi_k, -1), 1 + s + s * s / 2, rtol=1e-5, atol=1e-5)
  assert np.abs(s).max() > 1.0  # the quadratic term matters


def _mixer(kind, causal, **settings):
  return Based(num_heads=HEADS, qkv_dim=WIDTH, layers=(kind,), feature_dim=F, window=WINDOW,
               chunk_size=4, causal=causal, num_layers=2, **settings)


def _allowed(mask, causal, window=None):
  """BxLxL: query i may read key j (real, j <= i when causal, |i - j| <= window)."""
  i, j = np.arange(LENGTH)[:, None], np.arange(LENGTH)[None, :]
  band = (j <= i) if causal else np.ones((LENGTH, LENGTH), bool)
  if window is not None:
    band = band & (j >= i - window) & (j <= i + window)
  return jnp.asarray(band[None] & np.asarray(mask)[:, None, :])


def _linear_reference(p, x, mask, causal):
  """y_i = sum_j a_ij v_j / (sum_j a_ij + 1e-12), a_ij = 1 + s + s^2 / 2, s = q_i.k_j / sqrt(f),
  over the allowed keys: the kernel as a dense L x L matrix."""
  x = jnp.where(mask[..., None], x, 0.0)
  q, k, v = (jnp.einsum("bld,dhk->blhk", x, p[n]["kernel"]) for n in ("proj_q", "proj_k",
                                                                        "proj_v"))
  s = jnp.einsum("blhf,bmhf->bhlm", q, k) / np.sqrt(F)
  a = (1 + s + s * s / 2) * _allowed(mask, causal)[:, None]
  y = jnp.einsum("bhlm,bmhv->blhv", a, v) / (jnp.moveaxis(a.sum(-1), 1, 2)[..., None] + 1e-12)
  return jnp.einsum("blhv,hvd->bld", y, p["proj_o"]["kernel"]) * mask[..., None]


def _window_reference(p, x, mask, causal):
  """Softmax attention (with the projections' biases) over the keys within WINDOW of the query
  (before it only, when causal), as a dense L x L pattern."""
  x = jnp.where(mask[..., None], x, 0.0)
  q, k, v = (jnp.einsum("bld,dhk->blhk", x, p[n]["kernel"]) + p[n]["bias"][None, None]
             for n in ("query", "key", "value"))
  y = helpers.masked_softmax_attention(q, k, v, _allowed(mask, causal, WINDOW)[:, None])
  out = p["out_proj"]
  return (jnp.einsum("blhv,hvd->bld", y, out["kernel"]) + out["bias"][None, None]) * mask[..., None]


def _conv_reference(p, x, mask, causal):
  """conv(u) * (u W + b) + u, conv[t] = b + sum_j w[j] u[t - 2 + j] (zeros before the start)."""
  del causal  # BaseConv is causal either way
  p = p["base_conv"]
  u = jnp.where(mask[..., None], x, 0.0)
  w, b = p["conv_weight"], p["conv_bias"]
  conv = jnp.stack([b[None] + sum(w[j][None] * u[:, t - 2 + j] for j in range(3)
                                  if t - 2 + j >= 0) for t in range(LENGTH)], axis=1)
  proj = u @ p["projection"]["kernel"] + p["projection"]["bias"][None, None]
  return (conv * proj + u) * mask[..., None]


REFERENCES = {"linear": _linear_reference, "window": _window_reference, "conv": _conv_reference}


@pytest.mark.parametrize("kind, causal", [("linear", False), ("linear", True),
                                          ("window", False), ("window", True), ("conv", False)])
def test_each_kind_matches_its_dense_reference(kind, causal):
  """Outputs and gradients (parameters and input) equal the reference; the causal linear
  attention runs by chunks of 4 over 13 positions (4 chunks, the last partial), the window
  layer by blocks of 3; rows: full, trailing padding after 4, a hole at 2."""
  x, mask, rng = helpers.padded_inputs(LENGTH, WIDTH, seed=1)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32) * mask[..., None]
  mixer = _mixer(kind, causal)
  make = lambda x: helpers.perturb(mixer.init(jax.random.PRNGKey(0), x, jnp.asarray(mask),
                                              deterministic=True), scale=0.5)
  reference = lambda p, x: REFERENCES[kind](p["params"], x, mask, causal)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, make, reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
  assert np.abs(np.asarray(ref)).max() > 0.1
  assert np.abs(np.asarray(ref_grads[1])).max() > 0.01  # input gradients that matter


def test_padding_is_truncation_across_chunks():
  """A row padded after 6 of 13 positions (mid-chunk) gives the outputs of the 6 tokens alone,
  for the causal linear attention (chunks of 4) and the non-causal window (blocks of 3, keys
  on both sides); padded content changes nothing."""
  x, _, rng = helpers.padded_inputs(LENGTH, WIDTH, seed=2)
  mask = jnp.asarray(helpers.trailing_mask([6, LENGTH, 6], LENGTH))
  noisy = testing.noise_where_padded(x, mask, rng)
  mixers = [_mixer("linear", True), _mixer("window", False)]

  def run(x, noisy):
    outs = []
    for m in mixers:
      p = helpers.perturb(m.init(jax.random.PRNGKey(0), x, mask, deterministic=True), scale=0.5)
      apply = lambda x, mask: m.apply(p, x, mask, deterministic=True)
      outs.append((apply(x, mask)[0, :6], apply(noisy, mask)[0, :6],
                   apply(x[:1, :6], mask[:1, :6])[0]))
    return outs

  for padded, noised, truncated in testing.run_once(run, x, noisy):
    np.testing.assert_allclose(padded, truncated, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(noised, padded, rtol=1e-5, atol=1e-6)


def test_the_encoder_cycles_the_kinds_by_layer():
  """Layer l of the encoder is layers[l % 3]: BaseConv, linear attention, window, BaseConv."""
  model = models.build(helpers.tiny_model("based", num_layers=4), vocab_size=10,
                       num_classes=2, max_len=12, pair=False)
  tokens = jnp.ones((1, 12), jnp.int32)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens))["params"]
  mixers = [params["encoder"][f"block_{i}"]["mixer"] for i in range(4)]
  assert [sorted(m) for m in mixers] == [
      ["base_conv"], ["proj_k", "proj_o", "proj_q", "proj_v"],
      ["key", "out_proj", "query", "value"], ["base_conv"]]
  assert mixers[1]["proj_q"]["kernel"].shape == (16, 2, 4)  # f = 4 (tiny) per head
  assert mixers[1]["proj_v"]["kernel"].shape == (16, 2, 8)  # qkv_dim / heads


KINDS = [("linear", True), ("window", False), ("window", True), ("conv", False)]


def _kind_settings(kind, causal):
  """Each kind as layer 1 of a two-kind cycle."""
  layers = ("conv", kind) if kind != "conv" else ("linear", "conv")
  return {**helpers.tiny_settings("based"), "layers": layers, "causal": causal}


@pytest.mark.parametrize("kind, causal", [
    *KINDS[:2], *(pytest.param(*k, marks=pytest.mark.slow) for k in KINDS[2:])])
def test_contract_of_every_kind(kind, causal):
  """The shared contract (shape, padding, truncation, gradients, bf16, one token, no L x L
  array) for each kind (the causal window and BaseConv, whose code paths the other two and the
  dense references share, in the slow set); the jit check below."""
  testing.check_mixer("based", _kind_settings(kind, causal), label=f"based-{kind}-causal{causal}",
                      op_by_op=False)


@pytest.mark.slow  # op by op: one compile per primitive, as long as the rest of the contract
@pytest.mark.parametrize("kind, causal", KINDS)
def test_every_kind_op_by_op_equals_jit(kind, causal):
  testing.check_op_by_op("based", _kind_settings(kind, causal),
                         label=f"based-{kind}-causal{causal}")


def test_state_size_per_layer_and_zoology_initialisation():
  width, heads, f = 64, 4, 16
  mixer = lambda i, **kw: Based(num_heads=heads, qkv_dim=width, layer_index=i, **kw)
  # Zoology's Based.state_size: H V P + H P, P = 1 + f + f (f + 1) / 2 (= 153 at f 16).
  assert mixer(1).carried_state(width, 256) == heads * 16 * 153 + heads * 153
  assert mixer(0).carried_state(width, 256) == 2 * width  # the conv's last 2 inputs
  assert mixer(2).carried_state(width, 256) == 2 * 2 * 64 * width  # keys, values; both sides
  assert mixer(2, causal=True).carried_state(width, 256) == 2 * 64 * width
  assert mixer(2, causal=True).carried_state(width, 32) == 2 * 32 * width
  layer = Based(num_heads=heads, qkv_dim=width, layers=("linear", "window"), num_layers=2)
  x, mask = jnp.zeros((1, 5, width)), jnp.ones((1, 5), bool)
  linear, window = (jax.jit(lambda: layer.clone(layer_index=i).init(
      jax.random.PRNGKey(i), x, mask, deterministic=True))()["params"] for i in (0, 1))
  for kernel in [linear[n]["kernel"] for n in linear] + [window["query"]["kernel"]]:
    assert abs(np.std(kernel) - 0.02) < 0.003  # N(0, 0.02) as Zoology's _init_weights
  assert linear["proj_q"]["kernel"].shape == (width, heads, f)
  assert abs(np.std(window["out_proj"]["kernel"]) - 0.01) < 0.0015  # / sqrt(2 num_layers)
  assert not np.any(window["query"]["bias"]) and not np.any(window["out_proj"]["bias"])


def test_settings_and_errors():
  assert registry.default_settings("based") == dict(
      layers=("conv", "linear", "window"), feature_dim=16, window=64, causal=False,
      conv_kernel=3, chunk_size=64)
  assert registry.encoder_settings("based") == dict(positions="none")
  assert Based(layers="linear", layer_index=5).kind == "linear"
  for bad in [("conv", "attention"), (), "Linear"]:
    with pytest.raises(SettingError, match=r"config.model.attention.layers=.* tuple of 'conv'"):
      Based(layers=bad)
  with pytest.raises(SettingError, match="feature_dim=5 .*even"):
    Based(num_heads=1, qkv_dim=8, feature_dim=5, rotary=True)
  # A window layer that reaches every position is full attention: said at build.
  assert Based(num_layers=3, window=64).idle_at(65) == [
      "window=64 reaches every one of the 65 positions: the window layers are full softmax "
      "attention"]
  assert Based(num_layers=3, window=64).idle_at(66) == []
  assert Based(num_layers=2, window=64).idle_at(20) == []  # conv, linear: no window layer
