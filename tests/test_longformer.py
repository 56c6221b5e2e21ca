"""Longformer attention against an independent dense-mask reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
import models.longformer  # noqa: F401  (registers "longformer")
from models import registry, transformer
from models.longformer import LongformerAttention
from models.settings import SettingError
from tests.jaxpr_shapes import array_shapes

HEADS, QKV, DIM = 2, 8, 12


def _random_mask(rng, batch, length):
  lengths = rng.integers(1, length + 1, size=batch)
  lengths[0] = length  # one row without padding
  return np.arange(length)[None, :] < lengths[:, None]


def _dense_pattern(length, window, dilation, global_positions):
  """LxL booleans: |i-j| <= d*w/2 with i = j mod d, plus global rows and columns."""
  i, j = np.arange(length)[:, None], np.arange(length)[None, :]
  band = ((j - i) % dilation == 0) & (np.abs(j - i) <= dilation * (window // 2))
  glob = np.isin(np.arange(length), global_positions)
  return band | glob[None, :] | glob[:, None]


def _masked_softmax_attention(q_BxLxK, k_BxLxK, v_BxLxK, allowed_BxLxL):
  """softmax over the allowed keys only; a row with none gives 0 (only padded queries)."""
  scores = q_BxLxK @ jnp.swapaxes(k_BxLxK, 1, 2) / np.sqrt(q_BxLxK.shape[-1])
  e = jnp.where(allowed_BxLxL, jnp.exp(jnp.where(allowed_BxLxL, scores, 0.0)), 0.0)
  total = jnp.sum(e, -1, keepdims=True)
  return (e / jnp.where(total > 0, total, 1.0)) @ v_BxLxK


def _reference(params, x_BxLxD, mask_BxL, *, window, dilation, global_positions, separate):
  """Head by head: the dense pattern AND the key mask; global rows use Q_g, K_g, V_g over all
  keys when `separate` (as in the paper), else the local projections over all keys."""
  p = params["params"]
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  wo, bo = p["OutputProjection_0"]["out"]["kernel"], p["OutputProjection_0"]["out"]["bias"]
  length = x_BxLxD.shape[1]
  glob = np.isin(np.arange(length), global_positions)
  heads = []
  for h in range(wq.shape[1]):
    d = dilation[h] if len(dilation) > 1 else dilation[0]
    allowed = _dense_pattern(length, window, d, global_positions)[None] & mask_BxL[:, None, :]
    out = _masked_softmax_attention(x_BxLxD @ wq[:, h], x_BxLxD @ wk[:, h], x_BxLxD @ wv[:, h],
                                    allowed)
    if separate and glob.any():
      gq, gk, gv = (p[n]["kernel"][:, h] for n in ("query_global", "key_global", "value_global"))
      all_keys = jnp.broadcast_to(mask_BxL[:, None, :], allowed.shape)
      rows = _masked_softmax_attention(x_BxLxD @ gq, x_BxLxD @ gk, x_BxLxD @ gv, all_keys)
      out = jnp.where(glob[None, :, None], rows, out)
    heads.append(out)
  return sum(heads[h] @ wo[h] for h in range(len(heads))) + bo[None, None, :]


def _setup(length, seed=0, batch=3):
  rng = np.random.default_rng(seed + length)
  x = jnp.asarray(rng.normal(size=(batch, length, DIM)), jnp.float32)
  mask = jnp.asarray(_random_mask(rng, batch, length))
  cotangent = jnp.asarray(rng.normal(size=(batch, length, DIM)), jnp.float32)
  return x, mask, cotangent


def _init(mixer, x, mask, seed=0):
  return jax.jit(lambda x, mask: mixer.init(jax.random.PRNGKey(seed), x, mask,
                                            deterministic=True))(x, mask)


def _apply(mixer, params, x, mask):
  return jax.jit(lambda p, x, mask: mixer.apply(p, x, mask, deterministic=True))(params, x, mask)


def _out_and_grads(fn, params, x, cotangent):
  """fn(params, x) and the gradients (params, x) of sum(fn * cotangent), in one compilation;
  the cotangent is zero at padded queries, whose outputs nothing uses."""
  def run(params, x):
    out, vjp = jax.vjp(fn, params, x)
    return out, vjp(cotangent)
  return jax.jit(run)(params, x)


CASES = [
    # length, window, dilation, global positions, separate global projections, layer, growth
    (6, 4, (1,), (), True, 0, 1.0),
    (9, 4, (1, 2), (), True, 0, 1.0),
    (16, 4, (1,), (0,), True, 0, 1.0),
    (6, 4, (1,), (0,), False, 0, 1.0),
    (9, 4, (1, 2), (0, 4), False, 0, 1.0),
    (9, 4, (1, 2), (0, 4), True, 0, 1.0),
    (16, 4, (3, 2), (0, 3, 4, 15), True, 0, 1.0),
    (9, 4, (1,), (0,), True, 1, 1.5),  # layer 1: window 4 * 1.5 = 6
    (16, 2, (1, 2), (0,), False, 1, 2.0),  # layer 1: window 4
]


@pytest.mark.parametrize("length,window,dilation,global_positions,separate,layer,growth", CASES)
def test_matches_dense_reference(length, window, dilation, global_positions, separate, layer,
                                 growth):
  x, mask, cotangent = _setup(length)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=window, dilation=dilation,
                              global_positions=global_positions,
                              separate_global_projections=separate, layer_index=layer,
                              window_growth=growth)
  params = _init(mixer, x, mask)
  assert ("query_global" in params["params"]) == (separate and bool(global_positions))
  layer_window = models.longformer.layer_window(window, growth, layer)
  ref_fn = lambda p, x: _reference(p, x, mask, window=layer_window, dilation=dilation,
                                   global_positions=global_positions, separate=separate)
  fn = lambda p, x: mixer.apply(p, x, mask, deterministic=True)
  out, grads = _out_and_grads(fn, params, x, cotangent * mask[:, :, None])
  ref, ref_grads = _out_and_grads(ref_fn, params, x, cotangent * mask[:, :, None])
  real = mask[:, :, None]
  np.testing.assert_allclose(jnp.where(real, out, 0), jnp.where(real, ref, 0),
                             rtol=1e-5, atol=1e-5)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-4)


def test_layer_window_growth():
  assert models.longformer.layer_window(512, 1.0, 3) == 512
  assert models.longformer.layer_window(4, 1.5, 1) == 6
  assert models.longformer.layer_window(4, 2.0, 2) == 16
  assert models.longformer.layer_window(4, 0.5, 1) == 2
  assert models.longformer.layer_window(4, 0.1, 3) == 2  # clipped to at least 2


@pytest.mark.parametrize("length", [5, 9])
def test_whole_sequence_window_is_full_attention(length):
  x, mask, _ = _setup(length)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=2 * length,
                              global_positions=())
  params = _init(mixer, x, mask, seed=1)
  full = transformer.FullAttention(num_heads=HEADS, qkv_dim=QKV)
  np.testing.assert_allclose(_apply(mixer, params, x, mask), _apply(full, params, x, mask),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dilation,global_positions", [((1,), ()), ((1, 2), (0, 2))])
def test_padding_does_not_leak(dilation, global_positions):
  x, mask, _ = _setup(11, seed=3)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=4, dilation=dilation,
                              global_positions=global_positions)
  params = _init(mixer, x, mask, seed=2)
  noise = jnp.asarray(np.random.default_rng(9).normal(size=x.shape) * 5, jnp.float32)
  real = mask[:, :, None]
  # Both calls share one compilation: same shapes.
  out = _apply(mixer, params, x, mask)
  out_noisy = _apply(mixer, params, jnp.where(real, x, noise), mask)
  np.testing.assert_allclose(jnp.where(real, out_noisy, 0), jnp.where(real, out, 0),
                             rtol=1e-5, atol=1e-5)


def test_no_length_by_length_intermediate():
  length = 64
  x, mask, _ = _setup(length, batch=1)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=4, dilation=(1, 2),
                              global_positions=(0, 7))
  params = jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask,
                                             deterministic=True))
  grad = jax.grad(lambda p: jnp.sum(mixer.apply(p, x, mask, deterministic=True)))
  jaxpr = jax.make_jaxpr(grad)(params).jaxpr
  for shape in array_shapes(jaxpr):
    assert sum(s >= length for s in shape) <= 1, shape


def test_dropout_needs_rng_and_changes_output():
  x, mask, _ = _setup(9)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=4, dilation=(1, 2),
                              dropout_rate=0.5)
  params = _init(mixer, x, mask)
  kept = _apply(mixer, params, x, mask)
  dropped = jax.jit(lambda p: mixer.apply(p, x, mask, deterministic=False,
                                          rngs={"dropout": jax.random.PRNGKey(1)}))(params)
  assert dropped.shape == kept.shape and not np.allclose(dropped, kept)


def test_bad_settings_are_errors():
  x, mask, _ = _setup(6)
  for kw, match in [(dict(dilation=(1, 2, 3)), "dilation"), (dict(window=5), "even")]:
    with pytest.raises(SettingError, match=match):
      LongformerAttention(num_heads=HEADS, qkv_dim=QKV, **kw)
  with pytest.raises(SettingError, match="global_positions"):  # at build time, with max_len
    models.build(dict(name="longformer", num_heads=HEADS, qkv_dim=QKV, use_cls=False,
                      attention=dict(global_positions=(6,))),
                 vocab_size=5, num_classes=2, max_len=6, pair=False)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, global_positions=(6,))
  with pytest.raises(ValueError, match="global_positions"):  # an input shorter than that
    jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True))


def test_registered_with_defaults_and_builds():
  assert registry.default_settings("longformer") == dict(
      window=512, dilation=(1,), global_positions=(0,), separate_global_projections=True,
      window_growth=1.0)
  model = models.build(dict(name="longformer", emb_dim=16, num_heads=2, qkv_dim=16,
                            mlp_dim=32, num_layers=2, dropout_rate=0.1,
                            attention_dropout_rate=0.1,
                            attention=dict(window=4, dilation=[1, 2], window_growth=2.0)),
                       vocab_size=20, num_classes=5, max_len=24, pair=False)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 20, size=(4, 24)))
  params = jax.jit(lambda t: model.init(jax.random.PRNGKey(0), t))(tokens)
  # Training mode (dropout on) covers the shapes of the deterministic path too.
  logits = jax.jit(lambda p, t: model.apply(p, t, deterministic=False,
                                            rngs={"dropout": jax.random.PRNGKey(1)}))(
                                                params, tokens)
  assert logits.shape == (4, 5) and bool(jnp.all(jnp.isfinite(logits)))
