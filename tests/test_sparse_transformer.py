"""Sparse Transformer (Child et al. 2019) mixer against a dense masked reference."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.sparse_transformer  # noqa: F401  (registers "sparse_transformer")
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.mixers.sparse_transformer import SparseTransformerAttention
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

BLOCK, C = 4, 2


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


def _inputs(length, seed):
  """helpers.padded_inputs (a full row, trailing padding, a hole at 2) with row 1 so short that
  no summary position (j % BLOCK >= BLOCK - C) is real."""
  x, mask, rng = helpers.padded_inputs(length, 12, seed)
  mask[1, BLOCK - C:] = False
  return x, jnp.asarray(mask), rng


@functools.lru_cache(maxsize=None)
def _params():
  """One parameter set serves every case: its shapes depend on neither length nor pattern."""
  x, mask, _ = _inputs(8, seed=0)
  return _run(lambda x: _mixer().init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)


def _mixer(**kw):
  settings = dict(num_heads=3, qkv_dim=12, block_size=BLOCK, c=C)
  settings.update(kw)
  return SparseTransformerAttention(**settings)


PATTERNS = [("fixed", "heads", 0), ("strided", "heads", 0),
            ("fixed", "interleave", 0),  # even layers are A1 whatever the pattern
            ("fixed", "interleave", 1), ("strided", "interleave", 1),
            ("fixed", "merged", 0), ("strided", "merged", 0)]


def _lengths():
  """Every pattern at 11 (a last block cut short); 16 (whole blocks) for both patterns of the
  per-head combination by default, for every pattern `-m slow` (with 8): the block arithmetic
  of whole blocks is the same code for every combination."""
  for length in (8, 11, 16):
    for case in PATTERNS:
      default = length == 11 or (length == 16 and case[1] == "heads")
      yield pytest.param(length, *case, marks=() if default else pytest.mark.slow)


@pytest.mark.parametrize("length,pattern,combine,layer_index", _lengths())
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
    allowed_BxHxLxL = allowed[None] & mask[:, None, None, :]
    ref, ref_pullback = jax.vjp(lambda p, x: helpers.projected_attention(p, x, allowed_BxHxLxL),
                                params, x)
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


@pytest.mark.parametrize("pattern,combine", [("strided", "heads"), ("fixed", "merged"),
                                             ("strided", "merged")])
def test_other_code_paths_are_subquadratic_and_use_dropout(pattern, combine):
  """The contract runs the default (fixed, heads); strided and merged attention are other
  code: no array with two length axes (forward and backward), and dropout drawn from its rng."""
  mixer = _mixer(pattern=pattern, combine=combine, block_size=8, c=2, dropout_rate=0.5)
  train = lambda p, x, mask, seed: mixer.apply(p, x, mask, deterministic=False,
                                               rngs={"dropout": jax.random.PRNGKey(seed)})
  length = 64  # 8 blocks of 8
  ones = jnp.ones((1, length, 12), jnp.float32), jnp.ones((1, length), bool)
  grad = jax.grad(lambda p, x, mask: jnp.sum(train(p, x, mask, 0)), (0, 1))
  assert not helpers.length_squared_shapes(grad, _params(), *ones, length=length)
  x, mask, _ = _inputs(11, seed=7)
  noisy = _run(lambda p: [train(p, x, mask, seed) for seed in (0, 1)], _params())
  assert np.all(np.isfinite(noisy[0])) and not np.allclose(noisy[0], noisy[1])


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
