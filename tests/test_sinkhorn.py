"""Sinkhorn attention (Tay et al. 2020) against independent numpy references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lra.models.mixers.sinkhorn  # noqa: F401  (registers "sinkhorn")
from lra.models import registry
from lra.models.mixers.sinkhorn import SinkhornAttention, sinkhorn, sorted_block_attention
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run


def test_sinkhorn_is_doubly_stochastic():
  log_alpha = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 5, 5)) * 3, jnp.float32)
  p = np.asarray(_run(lambda a: sinkhorn(a, 50), log_alpha))
  assert np.all(p >= 0)
  np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-4)
  np.testing.assert_allclose(p.sum(-2), 1.0, atol=1e-4)


def _reference(q, k, v, mask, perm_BxHxN):
  """Query block n of head h: one dense softmax over [own keys ; keys of block perm[n]]."""
  q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
  batch, num_blocks, block, heads, dim = q.shape
  out = np.zeros(q.shape)
  for b in range(batch):
    for h in range(heads):
      for n in range(num_blocks):
        m = perm_BxHxN[b, h, n]
        keys = np.concatenate([k[b, n, :, h], k[b, m, :, h]])
        values = np.concatenate([v[b, n, :, h], v[b, m, :, h]])
        ok = np.concatenate([mask[b, n], mask[b, m]])
        if not ok.any():
          continue  # no real key: the mixer gives zeros (padded values are zeroed)
        scores = q[b, n, :, h] @ keys[ok].T / np.sqrt(dim)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        out[b, n, :, h] = (e / e.sum(-1, keepdims=True)) @ values[ok]
  return out


def test_hard_permutation_is_block_permuted_local_attention():
  rng = np.random.default_rng(1)
  batch, num_blocks, block, heads, dim = 2, 4, 3, 2, 4
  q, k, v = (jnp.asarray(rng.normal(size=(batch, num_blocks, block, heads, dim)), jnp.float32)
             for _ in range(3))
  mask = rng.random((batch, num_blocks, block)) < 0.7
  mask[0, 3] = False  # one fully padded block
  mask[1, 2] = False
  mask[0, 0, 0] = mask[1, 1, 1] = True
  perms = np.stack([np.stack([rng.permutation(num_blocks) for _ in range(heads)])
                    for _ in range(batch)])
  others = np.roll(perms, 1, axis=-1)  # every block gets a different partner
  one_hot = lambda p: jnp.asarray(np.eye(num_blocks)[p], jnp.float32)  # P[n, p[n]] = 1
  fn = helpers.compile_once(lambda p: sorted_block_attention(q, k, v, jnp.asarray(mask), p),
                            one_hot(perms))
  out, out_other = np.asarray(fn(one_hot(perms))), np.asarray(fn(one_hot(others)))
  np.testing.assert_allclose(out, _reference(q, k, v, mask, perms), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out_other, _reference(q, k, v, mask, others), rtol=1e-5,
                             atol=1e-5)
  # The permutation is really applied: another partner gives another output.
  assert np.abs(out - out_other).max() > 1e-2


def _paper_sinkhorn_attention(q, k, v, log_alpha, iterations, temperature):
  """Tay et al. 2020 written out in numpy (float64) with no padding: P = Sinkhorn(R / tau) by
  alternating row and column normalisation of exp(R / tau); the sorted blocks are
  K_s = P K_blocks, V_s = P V_blocks (P as it comes, rows not renormalised), and each query
  block takes one softmax over its own block's keys and its sorted block's keys."""
  q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
  batch, num_blocks, block, heads, dim = q.shape
  p = np.exp(np.asarray(log_alpha, np.float64) / temperature)
  for _ in range(iterations):
    p = p / p.sum(-1, keepdims=True)
    p = p / p.sum(-2, keepdims=True)
  out = np.zeros(q.shape)
  for b in range(batch):
    for h in range(heads):
      k_sorted = np.einsum("nm,mqd->nqd", p[b, h], k[b, :, :, h])
      v_sorted = np.einsum("nm,mqd->nqd", p[b, h], v[b, :, :, h])
      for n in range(num_blocks):
        keys = np.concatenate([k[b, n, :, h], k_sorted[n]])
        values = np.concatenate([v[b, n, :, h], v_sorted[n]])
        scores = q[b, n, :, h] @ keys.T / np.sqrt(dim)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        out[b, n, :, h] = (e / e.sum(-1, keepdims=True)) @ values
  return out, p


def test_without_padding_equals_the_papers_definition():
  """A soft P whose rows do not sum to 1 (5 iterations end on a column step): the padding
  term must leave the sorted keys' logits untouched."""
  rng = np.random.default_rng(3)
  batch, num_blocks, block, heads, dim = 2, 4, 3, 2, 4
  q, k, v = (jnp.asarray(rng.normal(size=(batch, num_blocks, block, heads, dim)), jnp.float32)
             for _ in range(3))
  log_alpha = jnp.asarray(rng.normal(size=(batch, heads, num_blocks, num_blocks)) * 2,
                          jnp.float32)
  mask = jnp.ones((batch, num_blocks, block), bool)
  out = _run(lambda a: sorted_block_attention(q, k, v, mask, sinkhorn(a / 0.75, 5)), log_alpha)
  ref, p = _paper_sinkhorn_attention(q, k, v, log_alpha, 5, 0.75)
  assert np.abs(p.sum(-1) - 1).max() > 1e-3  # the case the old weighting got wrong
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_sorting_mixes_blocks_and_learns():
  """Block 0 hears block 2 only through the sorted (soft-permuted) keys; the sorting network
  gets a gradient; gumbel noise is drawn from the dropout rng."""
  length, block = 11, 4  # not a multiple of the block
  x, mask, _ = helpers.padded_inputs(length, 8, seed=2)
  mixer = SinkhornAttention(num_heads=2, qkv_dim=8, block_size=block)
  noisy = SinkhornAttention(num_heads=2, qkv_dim=8, block_size=block, gumbel=True)
  far = x.at[:, 9].add(3.0)  # block 2; row 0 keeps it real

  def run(x, far):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: mixer.apply(p, x, mask, deterministic=True)
    real_sum = lambda p: jnp.sum(jnp.where(mask[..., None], apply(p, x), 0.0) ** 2)
    gumbel = [noisy.apply(params, x, mask, deterministic=False,
                          rngs={"dropout": jax.random.PRNGKey(s)}) for s in (0, 1)]
    return params, apply(params, x), apply(params, far), jax.grad(real_sum)(params), gumbel

  params, out, out_far, grads, gumbel = _run(run, x, far)
  assert params["params"]["sort_kernel"].shape == (2, 4, 3)  # heads x head_dim x 3 blocks
  assert np.abs(np.asarray(out_far)[0, :4] - np.asarray(out)[0, :4]).max() > 1e-4
  assert np.abs(grads["params"]["sort_kernel"]).max() > 0  # the sorting net learns
  assert np.all(np.isfinite(gumbel[0])) and not np.allclose(gumbel[0], gumbel[1])


def test_settings():
  assert registry.default_settings("sinkhorn") == dict(
      block_size=50, sinkhorn_iterations=5, temperature=0.75, gumbel=False)
  for bad in (dict(block_size=0), dict(sinkhorn_iterations=0), dict(temperature=0.0)):
    with pytest.raises(SettingError, match=next(iter(bad))):
      SinkhornAttention(num_heads=2, qkv_dim=8, **bad)
