"""Longformer attention against an independent dense-mask reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.longformer  # noqa: F401  (registers "longformer")
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.mixers.longformer import LongformerAttention
from lra.rules import SettingError
from tests.helpers import array_shapes, masked_softmax_attention, random_mask

HEADS, QKV, DIM = 2, 8, 12


def _dense_pattern(length, window, dilation, global_positions):
  """LxL booleans: |i-j| <= d*w/2 with i = j mod d, plus global rows and columns."""
  i, j = np.arange(length)[:, None], np.arange(length)[None, :]
  band = ((j - i) % dilation == 0) & (np.abs(j - i) <= dilation * (window // 2))
  glob = np.isin(np.arange(length), global_positions)
  return band | glob[None, :] | glob[:, None]


def _reference(params, x_BxLxD, mask_BxL, *, window, dilation, global_positions, separate):
  """Each head's dense pattern AND the key mask; global rows use Q_g, K_g, V_g over all keys
  when `separate` (as in the paper), else the local projections over all keys."""
  p = params["params"]
  project = lambda kernel: jnp.einsum("bld,dhk->blhk", x_BxLxD, kernel)
  q, k, v = (project(p["QKVProjection_0"][n]["kernel"]) for n in ("query", "key", "value"))
  length, num_heads = x_BxLxD.shape[1], q.shape[2]
  dilations = dilation if len(dilation) > 1 else dilation * num_heads
  pattern_HxLxL = np.stack([_dense_pattern(length, window, d, global_positions)
                            for d in dilations])
  heads_BxLxHxK = masked_softmax_attention(q, k, v, pattern_HxLxL[None]
                                           & mask_BxL[:, None, None, :])
  glob_L = np.isin(np.arange(length), global_positions)
  if separate and glob_L.any():
    rows = masked_softmax_attention(
        *(project(p[n]["kernel"]) for n in ("query_global", "key_global", "value_global")),
        mask_BxL[:, None, None, :])
    heads_BxLxHxK = jnp.where(glob_L[None, :, None, None], rows, heads_BxLxHxK)
  out = p["OutputProjection_0"]["out"]
  return jnp.einsum("blhk,hkd->bld", heads_BxLxHxK, out["kernel"]) + out["bias"][None, None]


def _setup(length, seed=0, batch=3):
  rng = np.random.default_rng(seed + length)
  x = jnp.asarray(rng.normal(size=(batch, length, DIM)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, batch, length))
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


# Cases 0, 2, 3 and 4 `-m slow`: each of their features (one dilation, globals with and without
# their own projections) is in a default case with more (1, 5, 6, 7, 8).
@pytest.mark.parametrize("length,window,dilation,global_positions,separate,layer,growth", [
    pytest.param(*case, marks=pytest.mark.slow) if i in (0, 2, 3, 4) else case
    for i, case in enumerate(CASES)])
def test_matches_dense_reference(length, window, dilation, global_positions, separate, layer,
                                 growth):
  x, mask, cotangent = _setup(length)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=window, dilation=dilation,
                              global_positions=global_positions,
                              separate_global_projections=separate, layer_index=layer,
                              window_growth=growth)
  params = _init(mixer, x, mask)
  assert ("query_global" in params["params"]) == (separate and bool(global_positions))
  layer_window = models.mixers.longformer.layer_window(window, growth, layer)
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
  assert models.mixers.longformer.layer_window(512, 1.0, 3) == 512
  assert models.mixers.longformer.layer_window(4, 1.5, 1) == 6
  assert models.mixers.longformer.layer_window(4, 2.0, 2) == 16
  assert models.mixers.longformer.layer_window(4, 0.5, 1) == 2
  assert models.mixers.longformer.layer_window(4, 0.1, 3) == 2  # clipped to at least 2


@pytest.mark.parametrize("length", [5, 9])
def test_whole_sequence_window_is_full_attention(length):
  x, mask, _ = _setup(length)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=2 * length,
                              global_positions=())
  params = _init(mixer, x, mask, seed=1)
  full = transformer.FullAttention(num_heads=HEADS, qkv_dim=QKV)
  np.testing.assert_allclose(_apply(mixer, params, x, mask), _apply(full, params, x, mask),
                             rtol=1e-5, atol=1e-5)


def test_dilated_heads_and_global_rows_form_no_length_squared_array():
  """The contract's shape walk runs the default (one dilation, one global position); per-head
  dilations and several global rows take other paths."""
  length = 64
  x, mask, _ = _setup(length, batch=1)
  mixer = LongformerAttention(num_heads=HEADS, qkv_dim=QKV, window=4, dilation=(1, 2),
                              global_positions=(0, 7))
  params = jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask,
                                             deterministic=True))
  grad = jax.grad(lambda p: jnp.sum(mixer.apply(p, x, mask, deterministic=True)))
  for shape in array_shapes(jax.make_jaxpr(grad)(params).jaxpr):
    assert sum(s >= length for s in shape) <= 1, shape  # padded lengths count too


def test_settings_and_errors():
  assert registry.default_settings("longformer") == dict(
      window=512, dilation=(1,), global_positions=(0,), separate_global_projections=True,
      window_growth=1.0)
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
