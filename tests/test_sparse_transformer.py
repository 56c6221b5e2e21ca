"""Sparse Transformer (Child et al. 2019) mixer against a dense masked reference."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
import models.sparse_transformer  # noqa: F401  (registers "sparse_transformer")
from models import registry, transformer
from models.sparse_transformer import SparseTransformerAttention
from models.settings import SettingError
from tests.jaxpr_shapes import array_shapes

BLOCK, C = 4, 2


def _run(fn, *args):
  """Compiles fn once and runs it. Every graph here runs once, so a cheap compile (XLA's backend
  optimisation off) beats both op-by-op dispatch and a fully optimised build on a busy CPU."""
  return jax.jit(fn).lower(*args).compile({"xla_backend_optimization_level": 0})(*args)


def _pattern_masks(length, block, c):
  """The dense LxL boolean masks A1, strided A2 and fixed A2, straight from the definitions."""
  i, j = np.arange(length)[:, None], np.arange(length)[None, :]
  same_block = (i // block) == (j // block)
  same_column = (i - j) % block == 0
  summary = np.broadcast_to(j % block >= block - c, (length, length))
  return same_block, {"strided": same_column, "fixed": summary}


def _head_masks(length, num_heads, pattern, combine, layer_index, block=BLOCK, c=C):
  """HxLxL: which keys each head's queries may see."""
  a1, a2 = _pattern_masks(length, block, c)
  a2 = a2[pattern]
  if combine == "merged":
    return np.stack([a1 | a2] * num_heads)
  if combine == "interleave":
    return np.stack([a1 if layer_index % 2 == 0 else a2] * num_heads)
  near = num_heads - num_heads // 2
  return np.stack([a1] * near + [a2] * (num_heads - near))


def _reference(params, x_BxLxD, mask_BxL, allowed_HxLxL):
  """Plain softmax over the allowed, non-padded keys, all heads at once; no key -> zeros."""
  p = params["params"]
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  wo, bo = p["OutputProjection_0"]["out"]["kernel"], p["OutputProjection_0"]["out"]["bias"]
  q, k, v = (jnp.einsum("bld,dhk->bhlk", x_BxLxD, w) for w in (wq, wk, wv))
  scores = q @ jnp.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
  ok = jnp.asarray(allowed_HxLxL)[None] & mask_BxL[:, None, None, :]
  top = jnp.max(jnp.where(ok, scores, -jnp.inf), -1, keepdims=True)
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  # Disallowed scores are replaced before exp so neither they nor their gradients overflow.
  e = jnp.where(ok, jnp.exp(jnp.where(ok, scores, top) - top), 0.0)
  total = jnp.sum(e, -1, keepdims=True)
  heads = (e / jnp.where(total > 0, total, 1.0)) @ v
  return jnp.einsum("bhlk,hkd->bld", heads, wo) + bo[None, None, :]


def _inputs(length, seed, batch=3, dim=12):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, length, dim)), jnp.float32)
  # One full row, one so short that no summary position is real, one random length.
  lengths = np.array([length, 2, rng.integers(1, length + 1)])
  mask = jnp.asarray(np.arange(length)[None, :] < lengths[:, None])
  return x, mask, rng


@functools.lru_cache(maxsize=None)
def _params():
  """One parameter set serves every case: its shapes depend on neither length nor pattern."""
  x, mask, _ = _inputs(8, seed=0)
  return _run(lambda x: _mixer().init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)


def _mixer(**kw):
  settings = dict(num_heads=3, qkv_dim=12, block_size=BLOCK, c=C)
  settings.update(kw)
  return SparseTransformerAttention(**settings)


@pytest.mark.parametrize("length", [8, 11, 16])
@pytest.mark.parametrize("pattern,combine,layer_index", [
    ("fixed", "heads", 0), ("strided", "heads", 0),
    ("fixed", "interleave", 0),  # even layers are A1 whatever the pattern
    ("fixed", "interleave", 1), ("strided", "interleave", 1),
    ("fixed", "merged", 0), ("strided", "merged", 0)])
def test_matches_dense_reference_and_ignores_padding(length, pattern, combine, layer_index):
  x, mask, rng = _inputs(length, seed=length)
  mixer = _mixer(pattern=pattern, combine=combine, layer_index=layer_index)
  params = _params()
  allowed = _head_masks(length, 3, pattern, combine, layer_index)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  noise = jnp.where(mask[..., None], x, jnp.asarray(rng.normal(size=x.shape) * 100, x.dtype))

  def run(params, x, noise):
    apply = lambda p, x: mixer.apply(p, x, mask, deterministic=True)
    out, pullback = jax.vjp(apply, params, x)
    ref, ref_pullback = jax.vjp(lambda p, x: _reference(p, x, mask, allowed), params, x)
    return out, ref, pullback(cotangent), ref_pullback(cotangent), apply(params, noise)

  out, ref, grads, ref_grads, out_noise = _run(run, params, x, noise)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
  # Whatever sits at padded positions changes no real output.
  np.testing.assert_allclose(jnp.where(mask[..., None], out_noise, 0.0),
                             jnp.where(mask[..., None], out, 0.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pattern", ["fixed", "strided"])
@pytest.mark.parametrize("block", [11, 16])
def test_merged_with_one_block_is_full_attention(pattern, block):
  x, mask, _ = _inputs(11, seed=3)
  mixer = _mixer(pattern=pattern, combine="merged", block_size=block, c=2)
  full = transformer.FullAttention(num_heads=3, qkv_dim=12)
  both = lambda p, x: tuple(m.apply(p, x, mask, deterministic=True) for m in (mixer, full))
  out, full_out = _run(both, _params(), x)
  np.testing.assert_allclose(out, full_out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pattern", ["fixed", "strided"])
@pytest.mark.parametrize("combine", ["heads", "merged"])
def test_no_length_by_length_array(pattern, combine):
  length = 64  # 8 blocks of 8
  x = jnp.ones((1, length, 12), jnp.float32)
  mask = jnp.ones((1, length), bool)
  mixer = _mixer(pattern=pattern, combine=combine, block_size=8, c=2)
  jaxpr = jax.make_jaxpr(
      lambda p, x: mixer.apply(p, x, mask, deterministic=True))(_params(), x).jaxpr
  shapes = list(array_shapes(jaxpr))
  assert shapes and not [s for s in shapes if s.count(length) >= 2]


def test_attention_dropout_uses_the_dropout_rng():
  x, mask, _ = _inputs(11, seed=7)
  for combine in ("heads", "merged"):
    mixer = _mixer(combine=combine, dropout_rate=0.5)

    def three(p, x):
      still = mixer.apply(p, x, mask, deterministic=True)
      return [still] + [mixer.apply(p, x, mask, deterministic=False,
                                    rngs={"dropout": jax.random.PRNGKey(s)}) for s in (0, 1)]

    still, *noisy = _run(three, _params(), x)
    assert noisy[0].shape == still.shape
    assert not np.allclose(noisy[0], still) and not np.allclose(noisy[0], noisy[1])


def test_bad_settings_name_the_valid_values():
  with pytest.raises(SettingError, match="'heads', 'interleave', 'merged'"):
    _mixer(combine="nope")
  with pytest.raises(SettingError, match="'fixed', 'strided'"):
    _mixer(pattern="nope")
  with pytest.raises(SettingError, match="c=5"):
    _mixer(c=5)
  with pytest.raises(SettingError, match="block_size"):
    _mixer(block_size=0)
  with pytest.raises(SettingError, match="num_heads >= 2"):  # at construction, not tracing
    _mixer(num_heads=1, qkv_dim=4)
  with pytest.raises(SettingError, match="combine='nope' is not valid"):
    models.build(dict(name="sparse_transformer", num_heads=2, attention=dict(combine="nope")),
                 vocab_size=20, num_classes=5, max_len=24, pair=False)


def test_defaults_are_lras():
  assert registry.default_settings("sparse_transformer") == dict(
      pattern="fixed", combine="heads", block_size=50, c=10)


@pytest.mark.parametrize("combine", ["heads", "interleave"])
def test_build_init_apply(combine):
  model = models.build(
      dict(name="sparse_transformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32,
           num_layers=2, dropout_rate=0.0, attention_dropout_rate=0.0,
           attention=dict(block_size=4, c=2, combine=combine)),
      vocab_size=20, num_classes=5, max_len=24, pair=False)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 20, size=(2, 21)))
  logits = _run(lambda t: model.apply(model.init(jax.random.PRNGKey(0), t), t), tokens)
  assert logits.shape == (2, 5) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits))
