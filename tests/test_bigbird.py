"""BigBird against a dense reference of the same pattern, and its pattern's properties."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers import bigbird, transformer
from lra.rules import SettingError
from tests.helpers import array_shapes, projected_attention, random_mask


def _dense_pattern(pattern, num_blocks, block, length, num_extra):
  """The block pattern as a dense (g+L)x(g+L) boolean mask, extra global tokens first."""
  is_global_N = np.zeros(num_blocks, bool)
  is_global_N[:pattern.num_front] = True
  is_global_N[num_blocks - pattern.num_back:] = True
  blocks_NxN = np.zeros((num_blocks, num_blocks), bool)
  for n in range(num_blocks):
    if is_global_N[n]:
      blocks_NxN[n, :] = True
    else:
      blocks_NxN[n, pattern.index_NxR[n][pattern.valid_NxR[n]]] = True
      blocks_NxN[n, is_global_N] = True
  tokens_LxL = np.kron(blocks_NxN, np.ones((block, block), bool))[:length, :length]
  dense = np.ones((num_extra + length, num_extra + length), bool)
  dense[num_extra:, num_extra:] = tokens_LxL
  return dense


def _reference(params, x_BxLxD, mask_BxL, allowed_TxT):
  """Masked softmax attention with the module's own parameters over the dense pattern (ETC's
  global tokens prepended to the sequence, then dropped from the output)."""
  num_extra = 0
  if "global_tokens" in params["params"]:
    tokens = params["params"]["global_tokens"]
    num_extra = tokens.shape[0]
    x_BxLxD = jnp.concatenate(
        [jnp.broadcast_to(tokens[None], (x_BxLxD.shape[0],) + tokens.shape), x_BxLxD], axis=1)
    mask_BxL = jnp.concatenate([jnp.ones((mask_BxL.shape[0], num_extra), bool), mask_BxL], 1)
  allowed_BxHxTxT = jnp.asarray(allowed_TxT)[None, None] & mask_BxL[:, None, None, :]
  return projected_attention(params, x_BxLxD, allowed_BxHxTxT)[:, num_extra:]


def _pattern_of(mixer, length):
  num_blocks = -(-length // mixer.block_size)
  etc = mixer.mode == "etc"
  pattern = bigbird.block_pattern(
      num_blocks, window_blocks=mixer.window_blocks, num_random_blocks=mixer.num_random_blocks,
      num_global_blocks=0 if etc else mixer.num_global_blocks, seed=mixer.seed,
      layer_index=mixer.layer_index)
  return pattern, num_blocks, (mixer.num_extra_global if etc else 0)


# (window, random, global blocks): the LRA shape scaled down at every length, and a thinner
# one so that 13 tokens (4 blocks) are not covered completely in ITC.
# 24 tokens (6 blocks, between 13's 4 and 32's 8) `-m slow`.
@pytest.mark.parametrize("length,mode,window,num_random,num_global", [
    pytest.param(length, mode, 3, 1, 2, marks=[pytest.mark.slow] * (length == 24))
    for length in (13, 24, 32) for mode in ("itc", "etc")] + [
    (13, "itc", 1, 1, 1), (32, "etc", 1, 2, 1)])
def test_matches_dense_reference(mode, length, window, num_random, num_global):
  rng = np.random.default_rng(length)
  x = jnp.asarray(rng.normal(size=(3, length, 12)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, length))
  mixer = bigbird.BigBirdAttention(num_heads=3, qkv_dim=12, block_size=4, window_blocks=window,
                                   num_random_blocks=num_random, num_global_blocks=num_global,
                                   mode=mode, num_extra_global=3, layer_index=1, seed=5)
  params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  pattern, num_blocks, num_extra = _pattern_of(mixer, length)
  allowed = _dense_pattern(pattern, num_blocks, 4, length, num_extra)
  if not (length == 13 and mode == "itc" and window == 3):
    assert not allowed.all()  # the pattern is really sparse here

  weights = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

  @jax.jit
  def out_and_grads(p, x):
    """Outputs and the gradients (params, inputs) of a random projection of them, both sides."""
    def losses(p, x):
      out = mixer.apply(p, x, mask, deterministic=True)
      ref = _reference(p, x, mask, allowed)
      return jnp.sum(out * weights), (out, ref)
    def ref_loss(p, x):
      return jnp.sum(_reference(p, x, mask, allowed) * weights)
    (_, (out, ref)), grads = jax.value_and_grad(losses, argnums=(0, 1), has_aux=True)(p, x)
    return out, ref, grads, jax.grad(ref_loss, argnums=(0, 1))(p, x)

  out, ref, grads, ref_grads = out_and_grads(params, x)
  assert out.shape == x.shape
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(ref_grads)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_blocks,num_global", [(1, 2), (2, 2), (7, 2), (16, 1), (16, 4),
                                                   (16, 0), (40, 2)])
def test_pattern_has_no_duplicates_and_draws_from_the_rest(num_blocks, num_global):
  window, num_random = 3, 3
  pattern = bigbird.block_pattern(num_blocks, window_blocks=window, num_random_blocks=num_random,
                                  num_global_blocks=num_global, seed=0, layer_index=0)
  front, back = pattern.num_front, pattern.num_back
  assert front + back == min(num_global, num_blocks) and front >= back
  is_global = np.zeros(num_blocks, bool)
  is_global[:front] = True
  is_global[num_blocks - back:] = True
  for n in range(num_blocks):
    row = pattern.index_NxR[n][pattern.valid_NxR[n]]
    if is_global[n]:
      assert len(row) == 0
      continue
    assert len(set(row.tolist())) == len(row)  # nothing counted twice
    assert not is_global[row].any()  # global blocks are added once, separately
    window_set = {m for m in range(n - 1, n + 2) if 0 <= m < num_blocks and not is_global[m]}
    assert window_set <= set(row.tolist())
    others = num_blocks - is_global.sum() - len(window_set)
    assert len(row) - len(window_set) == min(num_random, others)


def test_random_pattern_is_fixed_per_layer_and_seed():
  make = lambda seed, layer: bigbird.block_pattern(
      32, window_blocks=3, num_random_blocks=3, num_global_blocks=2, seed=seed,
      layer_index=layer).index_NxR
  np.testing.assert_array_equal(make(0, 0), make(0, 0))
  assert not np.array_equal(make(0, 0), make(0, 1))
  assert not np.array_equal(make(0, 0), make(1, 0))

  # The module uses it: the same layer gives the same output every call, another layer not.
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(2, 64, 8)), jnp.float32)
  mask = jnp.ones((2, 64), bool)
  layer0 = bigbird.BigBirdAttention(num_heads=2, qkv_dim=8, block_size=4)
  layer1 = bigbird.BigBirdAttention(num_heads=2, qkv_dim=8, block_size=4, layer_index=1)
  params = layer0.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  out = layer0.apply(params, x, mask, deterministic=True)
  np.testing.assert_array_equal(out, layer0.apply(params, x, mask, deterministic=True))
  assert not np.allclose(out, layer1.apply(params, x, mask, deterministic=True))


@pytest.mark.parametrize("length", [4, 9, 12])
def test_equals_full_attention_when_the_pattern_covers_everything(length):
  rng = np.random.default_rng(length)
  x = jnp.asarray(rng.normal(size=(3, length, 12)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, length))
  mixer = bigbird.BigBirdAttention(num_heads=3, qkv_dim=12, block_size=4)
  params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  full = transformer.FullAttention(num_heads=3, qkv_dim=12)
  np.testing.assert_allclose(mixer.apply(params, x, mask, deterministic=True),
                             full.apply(params, x, mask, deterministic=True),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["itc", "etc"])
def test_largest_array_is_linear_in_length(mode):
  """Training memory is O(L): (window + random + global) blocks of keys per query block, in
  both modes (the contract's shape walk covers only the default ITC mode). The bound also
  rules out any L x L array (512 * 512 > 2 * 512 * 8 * 8)."""
  length, block = 512, 8
  x = jnp.zeros((1, length, 8), jnp.float32)
  mask = jnp.ones((1, length), bool)
  mixer = bigbird.BigBirdAttention(num_heads=2, qkv_dim=8, block_size=block, mode=mode,
                                   num_extra_global=4)
  params = jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask,
                                             deterministic=True))
  grad = jax.grad(lambda p: jnp.sum(mixer.apply(p, x, mask, deterministic=True)))
  shapes = list(array_shapes(jax.make_jaxpr(grad)(params).jaxpr))
  assert max(int(np.prod(s)) for s in shapes) <= 2 * length * (3 + 3 + 2) * block


def test_settings():
  """BigBird's own checks (tests/test_models.py tries every setting's generic bad values) and
  the paper's block size as the default."""
  assert registry.default_settings("bigbird")["block_size"] == 64
  make = lambda **kw: bigbird.BigBirdAttention(num_heads=1, qkv_dim=4, **kw)
  with pytest.raises(SettingError, match="attention.window_blocks=2 .*odd"):
    make(window_blocks=2)
  with pytest.raises(SettingError, match="attention.num_extra_global=0 .*mode 'etc'"):
    make(mode="etc", num_extra_global=0)
