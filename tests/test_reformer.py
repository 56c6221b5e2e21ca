"""Reformer LSH attention (Kitaev et al. 2020) against independent dense references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.reformer  # noqa: F401  (registers "reformer")
from lra.models import registry
from lra.models.mixers.reformer import (ReformerAttention, hash_buckets, lsh_attention,
                                        random_rotations)
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run


def _mask(length):
  """4xL: helpers.contract_mask (full, trailing padding of 5, a hole at 2) with two more holes
  in row 2 (4 and 5: adjacent), and row 3 a single real token (it has only itself to see)."""
  mask = helpers.contract_mask(length, length - 5)
  mask[2, [4, 5]] = False
  mask[3, 0] = True
  return mask


def _window_mask(bucket_L, real_L, chunk, across):
  """One round's key sets by brute force, LxL: sort real tokens by (bucket, position), cut
  into chunks; i sees j if j is real, in i's chunk or the one before, and (unless `across`)
  in i's bucket. Padded tokens sort last, so they never shift a real token's slot."""
  length = len(bucket_L)
  order = sorted(range(length), key=lambda t: (0 if real_L[t] else 1, bucket_L[t], t))
  chunk_of = {t: slot // chunk for slot, t in enumerate(order)}
  allowed = np.zeros((length, length), bool)
  for i in range(length):
    for j in range(length):
      near = chunk_of[j] in (chunk_of[i], chunk_of[i] - 1)
      same = across or bucket_L[i] == bucket_L[j]
      allowed[i, j] = real_L[j] and near and same
  return allowed


def _dense(qk_BxLxHxK, v_BxLxHxK, allowed_BxHxLxL):
  """Dense shared-QK attention over `allowed` (helpers.masked_softmax_attention): keys are qk
  at unit length; a query attends to itself only if it is allowed nothing else, in which case
  its output is its own value."""
  k = qk_BxLxHxK / jnp.linalg.norm(qk_BxLxHxK, axis=-1, keepdims=True)
  others = allowed_BxHxLxL & ~np.eye(qk_BxLxHxK.shape[1], dtype=bool)
  out = helpers.masked_softmax_attention(qk_BxLxHxK, k, v_BxLxHxK, others)
  has_other_BxLxHx1 = np.transpose(others.any(-1), (0, 2, 1))[..., None]
  return jnp.where(has_other_BxLxHx1, out, v_BxLxHxK)


def _inputs(seed, batch, length, heads, dim):
  """qk, v and an output cotangent (BxLxHxK: helpers.padded_inputs' values, split three ways)
  and the generator."""
  x, _, rng = helpers.padded_inputs(length, 3 * heads * dim, seed, max(batch, 3))
  qk, v, cot = jnp.moveaxis(x[:batch].reshape(batch, length, 3, heads, dim), 2, 0)
  return qk, v, cot, rng


def test_one_bucket_one_chunk_is_full_attention_without_self():
  batch, length, heads, dim = 4, 9, 2, 4
  qk, v, cot, _ = _inputs(0, batch, length, heads, dim)
  mask = _mask(length)
  real = mask[:, :, None, None]
  one_bucket = jnp.zeros((batch, heads, 1, length), jnp.int32)
  allowed = np.broadcast_to(mask[:, None, None, :], (batch, heads, length, length))

  def run(qk, v):
    lsh = lambda qk, v: lsh_attention(qk, v, jnp.asarray(mask), one_bucket, chunk_len=length)
    ref = lambda qk, v: _dense(qk, v, allowed)
    loss = lambda f: lambda qk, v: jnp.sum(jnp.where(real, f(qk, v), 0.0) * cot)
    return (lsh(qk, v), ref(qk, v), jax.grad(loss(lsh), argnums=(0, 1))(qk, v),
            jax.grad(loss(ref), argnums=(0, 1))(qk, v))

  out, ref, grads, ref_grads = _run(run, qk, v)
  keep = np.broadcast_to(real, out.shape)
  np.testing.assert_allclose(np.asarray(out)[keep], np.asarray(ref)[keep], rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(out[3, 0], v[3, 0], rtol=1e-6)  # only itself: its own value
  assert np.all(np.isfinite(out))
  for g, r in zip(grads, ref_grads):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_module_with_whole_window_is_full_shared_qk_attention():
  """End to end through the projections: one chunk holding everything and every bucket
  allowed, so whatever the hash, the mixer is dense shared-QK attention with self masked."""
  batch, length, width, heads = 4, 9, 8, 2
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(batch, length, width)), jnp.float32)
  mask = _mask(length)
  real = mask[:, :, None]
  mixer = ReformerAttention(num_heads=heads, qkv_dim=8, n_hashes=2, n_buckets=4,
                            chunk_len=16, attend_across_buckets=True)
  allowed = np.broadcast_to(mask[:, None, None, :], (batch, heads, length, length))

  def reference(p, x):
    p = p["params"]
    qk = jnp.einsum("bld,dhk->blhk", x, p["query_key"]["kernel"])
    v = jnp.einsum("bld,dhk->blhk", x, p["value"]["kernel"])
    out = p["OutputProjection_0"]["out"]
    return jnp.einsum("blhk,hkd->bld", _dense(qk, v, allowed), out["kernel"]) + out["bias"][None, None]

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: mixer.apply(p, x, mask, deterministic=True)
    loss = lambda f: lambda p, x: jnp.sum(jnp.where(real, f(p, x), 0.0) ** 2)
    return (apply(params, x), reference(params, x), jax.grad(loss(apply), (0, 1))(params, x),
            jax.grad(loss(reference), (0, 1))(params, x))

  out, ref, grads, ref_grads = _run(run, x)
  # Shared QK: one query_key projection, no hash parameters (the rotations are drawn).
  assert sorted(grads[0]["params"]) == ["OutputProjection_0", "query_key", "value"]
  assert grads[0]["params"]["query_key"]["kernel"].shape == (width, heads, 8 // heads)
  keep = np.broadcast_to(real, out.shape)
  np.testing.assert_allclose(np.asarray(out)[keep], np.asarray(ref)[keep], rtol=1e-5,
                             atol=1e-5)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    assert np.abs(g).max() > 0  # every parameter (and the input) learns


def test_hash_is_argmax_of_rotation_and_its_negation():
  batch, length, heads, dim, rounds, n_buckets = 2, 7, 2, 4, 3, 6
  qk, _, _, _ = _inputs(2, batch, length, heads, dim)
  rot = random_rotations(jax.random.PRNGKey(3), heads, dim, rounds, n_buckets)
  assert rot.shape == (heads, dim, rounds, n_buckets // 2)
  buckets = np.asarray(_run(hash_buckets, qk, rot))
  q, r = np.asarray(qk, np.float64), np.asarray(rot, np.float64)
  expected = np.zeros((batch, heads, rounds, length), int)
  for b in range(batch):
    for h in range(heads):
      for n in range(rounds):
        for t in range(length):
          proj = q[b, t, h] @ r[h, :, n]
          expected[b, h, n, t] = np.argmax(np.concatenate([proj, -proj]))
  np.testing.assert_array_equal(buckets, expected)
  # Both halves ([xR] and [-xR]) and several buckets are in use: the test can fail.
  assert (expected < n_buckets // 2).any() and (expected >= n_buckets // 2).any()
  assert len(np.unique(expected)) >= 4


@pytest.mark.parametrize("rounds,across", [(2, False), (2, True), (1, False)])
def test_rounds_match_dense_attention_over_brute_force_sets(rounds, across):
  batch, length, heads, dim, chunk = 4, 13, 2, 4, 4  # 13 is not a multiple of the chunk
  qk, v, cot, rng = _inputs(4, batch, length, heads, dim)
  mask = _mask(length)
  real = mask[:, :, None, None]
  buckets = rng.integers(0, 3, size=(batch, heads, rounds, length))
  buckets_j = jnp.asarray(buckets, jnp.int32)
  per_round = np.array([[[_window_mask(buckets[b, h, r], mask[b], chunk, across)
                          for r in range(rounds)] for h in range(heads)]
                        for b in range(batch)])  # BxHxRxLxL
  union = per_round.any(axis=2)

  def run(qk, v):
    lsh = lambda dedup: lambda qk, v: lsh_attention(
        qk, v, jnp.asarray(mask), buckets_j, chunk_len=chunk, attend_across_buckets=across,
        dedup=dedup)
    ref = lambda qk, v: _dense(qk, v, union)
    loss = lambda f: lambda qk, v: jnp.sum(jnp.where(real, f(qk, v), 0.0) * cot)
    return (lsh(True)(qk, v), lsh(False)(qk, v), ref(qk, v),
            jax.grad(loss(lsh(True)), (0, 1))(qk, v), jax.grad(loss(ref), (0, 1))(qk, v))

  out, out_nodedup, ref, grads, ref_grads = _run(run, qk, v)
  keep = np.broadcast_to(real, out.shape)
  assert np.all(np.isfinite(out)) and np.all(np.isfinite(out_nodedup))
  # With the log N_ij term, the rounds combine to softmax attention over the union of sets.
  np.testing.assert_allclose(np.asarray(out)[keep], np.asarray(ref)[keep], rtol=1e-5,
                             atol=1e-5)
  for g, r in zip(grads, ref_grads):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)

  # Without it: each round's own softmax, weighted by softmax over rounds of its log-sum-exp.
  q64, v64 = np.asarray(qk, np.float64), np.asarray(v, np.float64)
  k64 = q64 / np.linalg.norm(q64, axis=-1, keepdims=True)
  expected = np.zeros(q64.shape)
  for b in range(batch):
    for h in range(heads):
      for i in np.flatnonzero(mask[b]):
        zs, outs = [], []
        for r in range(rounds):
          others = per_round[b, h, r, i].copy()
          others[i] = False
          if others.any():
            s = k64[b, others, h] @ q64[b, i, h] / np.sqrt(dim)
            zs.append(np.log(np.sum(np.exp(s - s.max()))) + s.max())
            outs.append(np.exp(s - zs[-1]) @ v64[b, others, h])
        if not zs:
          expected[b, i, h] = v64[b, i, h]  # nothing but itself in any round
          continue
        w = np.exp(np.array(zs) - max(zs))
        expected[b, i, h] = (w / w.sum()) @ np.array(outs)
  np.testing.assert_allclose(np.asarray(out_nodedup)[keep], expected[keep], rtol=1e-5,
                             atol=1e-5)

  # The sets are real restrictions, and with two rounds some pairs are found twice.
  assert not np.all(union == mask[:, None, None, :])
  if rounds == 2:
    assert (per_round.sum(axis=2) == 2).any() and (union != per_round[:, :, 0]).any()
    assert np.abs(np.asarray(out) - np.asarray(out_nodedup))[keep].max() > 1e-3


def test_hash_is_drawn_per_layer_and_per_training_step():
  """Evaluation is deterministic; each layer hashes differently; training redraws the hash on
  every step (from the dropout rng) unless redraw=False."""
  x, mask, _ = helpers.padded_inputs(11, 8, seed=5)
  kw = dict(num_heads=2, qkv_dim=8, n_hashes=2, n_buckets=4, chunk_len=3)
  mixer = ReformerAttention(**kw)
  other_layer = ReformerAttention(layer_index=1, **kw)
  fixed = ReformerAttention(redraw=False, **kw)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda m: m.apply(params, x, mask, deterministic=True)
    train = lambda m, s: m.apply(params, x, mask, deterministic=False,
                                 rngs={"dropout": jax.random.PRNGKey(s)})
    return dict(out=apply(mixer), again=apply(mixer), layer1=apply(other_layer),
                train0=train(mixer, 0), train1=train(mixer, 1), fixed=train(fixed, 0))

  r = _run(run, x)
  keep = np.asarray(mask)
  out = np.asarray(r["out"])
  np.testing.assert_array_equal(r["again"], out)
  assert np.abs(np.asarray(r["layer1"]) - out)[keep].max() > 1e-4
  assert np.abs(np.asarray(r["train0"]) - np.asarray(r["train1"]))[keep].max() > 1e-4
  np.testing.assert_allclose(r["fixed"], out, rtol=1e-6, atol=1e-6)


def test_settings():
  assert registry.default_settings("reformer") == dict(
      n_hashes=1, n_buckets=10, chunk_len=10, attend_across_buckets=False, dedup=True,
      redraw=True, seed=0)
  for name, bad in (("n_buckets", 7), ("n_buckets", 0), ("n_hashes", 0), ("chunk_len", 0),
                    ("chunk_len", 2.5)):
    with pytest.raises(SettingError, match=name):
      ReformerAttention(num_heads=2, qkv_dim=8, **{name: bad})
  with pytest.raises(SettingError, match="n_buckets"):
    models.build(dict(name="reformer", attention=dict(buckets=4)), vocab_size=5,
                 num_classes=2, max_len=8, pair=False)
