"""Local (block) attention against an independent dense reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.local  # registers "local" even before models/__init__ imports it
from lra.models import registry
from lra.models.mixers import transformer
from tests.helpers import projected_attention, random_mask


def _pattern_LxL(length, block, overlap):
  """The local pattern as a dense boolean matrix: which key j query i may see."""
  block_of_L = np.arange(length) // block
  reach = 1 if overlap else 0
  return np.abs(block_of_L[:, None] - block_of_L[None, :]) <= reach


def _reference(params, x_BxLxD, mask_BxL, block, overlap):
  """Masked softmax attention over the local pattern; zero at padded queries."""
  allowed_BxHxLxL = (jnp.asarray(_pattern_LxL(x_BxLxD.shape[1], block, overlap))[None, None]
                     & mask_BxL[:, None, None, :])
  return jnp.where(mask_BxL[:, :, None], projected_attention(params, x_BxLxD, allowed_BxHxLxL),
                   0.0)


def _setup(length, block, overlap, seed=0, heads=2, dim=8):
  rng = np.random.default_rng(seed + 100 * length + block)
  x = jnp.asarray(rng.normal(size=(3, length, dim)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, length, full_first=False, hole=True))
  mixer = models.mixers.local.LocalAttention(num_heads=heads, qkv_dim=dim, block_size=block,
                                      overlap=overlap)
  # Compiled once: on a busy CPU op-by-op dispatch of the blocked code costs more than jit.
  params = jax.jit(lambda key, x: mixer.init(key, x, mask, deterministic=True))(
      jax.random.PRNGKey(seed), x)
  return rng, x, mask, mixer, params


def _apply(mixer, params, x, mask):
  return jax.jit(lambda p, x, m: mixer.apply(p, x, m, deterministic=True))(params, x, mask)


# The shortest and the longest non-multiple of the block by default; the others `-m slow`.
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("length", [1, pytest.param(4, marks=pytest.mark.slow),
                                    pytest.param(7, marks=pytest.mark.slow), 13,
                                    pytest.param(16, marks=pytest.mark.slow)])
def test_matches_dense_reference(length, overlap):
  block = 4
  rng, x, mask, mixer, params = _setup(length, block, overlap)
  real = lambda y: jnp.where(mask[:, :, None], y, 0.0)
  weights = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

  @jax.jit
  def both(params, x):
    # Gradients of a random projection of the real outputs, w.r.t. params and inputs.
    loss = lambda p, x: jnp.sum(real(mixer.apply(p, x, mask, deterministic=True)) * weights)
    ref_loss = lambda p, x: jnp.sum(_reference(p, x, mask, block, overlap) * weights)
    return (real(mixer.apply(params, x, mask, deterministic=True)),
            _reference(params, x, mask, block, overlap),
            jax.grad(loss, argnums=(0, 1))(params, x),
            jax.grad(ref_loss, argnums=(0, 1))(params, x))

  out, ref, grads, ref_grads = both(params, x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(ref_grads)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-4)


def test_pattern_is_really_local():
  """Guards the reference itself: block 4, overlap off, a far token cannot move output 0."""
  _, x, _, mixer, params = _setup(13, 4, False)
  mask = jnp.ones(x.shape[:2], bool)
  out = _apply(mixer, params, x, mask)
  moved = _apply(mixer, params, x.at[:, 5].add(3.0), mask)
  np.testing.assert_allclose(moved[:, :4], out[:, :4], rtol=1e-6, atol=1e-6)
  assert not np.allclose(moved[:, 4:8], out[:, 4:8])
  # With overlap, block 0 sees block 1 (position 5) but not block 2 (position 9).
  _, _, _, mixer, params = _setup(13, 4, True)
  out = _apply(mixer, params, x, mask)
  assert not np.allclose(_apply(mixer, params, x.at[:, 5].add(3.0), mask)[:, :4], out[:, :4])
  np.testing.assert_allclose(_apply(mixer, params, x.at[:, 9].add(3.0), mask)[:, :4],
                             out[:, :4], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("block", [9, 50])
def test_one_block_is_full_attention(block, overlap):
  _, x, mask, mixer, params = _setup(9, block, overlap)
  full = transformer.FullAttention(num_heads=2, qkv_dim=8)
  np.testing.assert_allclose(_apply(mixer, params, x, mask), _apply(full, params, x, mask),
                             rtol=1e-5, atol=1e-6)


def _model(**kw):
  settings = dict(name="local", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32, num_layers=1,
                  dropout_rate=0.1, attention_dropout_rate=0.1,
                  attention=dict(block_size=4, overlap=True))
  settings.update(kw)
  return models.build(settings, vocab_size=20, num_classes=5, max_len=24, pair=False)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_trains_in_the_encoder():
  model = _model()
  rng = np.random.default_rng(0)
  tokens = np.where(random_mask(rng, 4, 22, hole=True), rng.integers(1, 20, size=(4, 22)), 0)
  tokens, labels = jnp.asarray(tokens), jnp.asarray(rng.integers(0, 5, size=4))
  params = jax.jit(model.init)(jax.random.PRNGKey(0), tokens)
  assert jax.jit(model.apply)(params, tokens).shape == (4, 5)

  def loss(p):
    logits = model.apply(p, tokens, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

  @jax.jit
  def step(p):
    value, grads = jax.value_and_grad(loss)(p)
    return value, jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, grads)

  first, params = step(params)
  for _ in range(5):
    last, params = step(params)
  assert np.isfinite(first) and last < first


def test_settings():
  """The default (tests/test_models.py tries every setting's bad values)."""
  assert registry.default_settings("local") == {"block_size": 50, "overlap": False}
