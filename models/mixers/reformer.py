"""Reformer LSH attention (Kitaev et al. 2020): shared query-key, hashed, sorted, chunked.

Each token has one projection qk (queries) and a separate value projection; its key is qk
normalised to unit length. Per hash round, a random Gaussian matrix R (K x n_buckets/2, per
head) hashes a vector x to argmax([xR, -xR]), one of n_buckets buckets. The tokens are sorted
by (bucket, position), the sorted sequence is cut into chunks of chunk_len, and every query
attends to the keys of its own chunk and of the chunk before it that are in its own bucket
(the paper's set; `attend_across_buckets=True` keeps the whole two-chunk window). Logits are
q.k / sqrt(K) (the LRA code multiplied by sqrt(K)). A query does not attend to itself unless it
has no other key; padded keys never get weight. Outputs go back to token order through the
inverse permutation (argsort of the sort indices).

Several rounds (n_hashes) are combined as in the paper's appendix: round r's output weighted by
softmax over rounds of its log-sum-exp z_r. With `dedup` (the paper's m_ij = log N_ij), a key
found by N rounds has log N subtracted from its logit in each, so the result is exactly softmax
attention over the union of the rounds' key sets; without it a pair counts once per round.

Memory is O(n_hashes L chunk_len) (logits are per chunk pair), never L x L.

Choices beyond the paper:
- Padded tokens are sorted after every real bucket, so where they fall cannot move the chunk
  boundaries between real tokens: real outputs do not depend on padded inputs, and trailing
  padding gives the same result as the truncated input.
- The first chunk looks back at nothing (no wrap-around to the last chunk).
- The rotations are not parameters. With `redraw` (the paper's choice) training draws them
  afresh each step from the "dropout" rng; evaluation (and training without redraw) uses
  PRNGKey(seed) folded with layer_index, so evaluation is deterministic and layers differ.
- Only the attention: the Reformer's reversible layers and chunked feed-forward are memory
  savings of the whole network, outside the token mixer.

Defaults follow LRA's Reformer: 1 hash round, 10 buckets, chunks of 10 (trax's own default
chunk is 64, which fills an accelerator's matrix units better).
"""
from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.common import (HeadsMixer, MASK_VALUE, OutputProjection, dropout_weights,
                               head_projection, rotary_embedding)
from lra.models.registry import register

# Logit given to a query's own key. Far below any real logit, so self gets weight ~exp(-1e5)
# whenever another key is allowed, yet far above MASK_VALUE (-1e9, padded or excluded keys), so
# a query with no other key attends to itself and never to padding. In the round combination,
# a round that found only self has z ~ -1e5 and so ~zero weight next to a round that found more.
SELF_VALUE = -1e5
# Floor on |qk|^2 when normalising keys (a zero vector stays zero instead of NaN).
_TINY = 1e-12
# Bucket given to padded tokens so they sort after every real bucket.
_PAD_BUCKET = np.iinfo(np.int32).max


def random_rotations(key, num_heads: int, head_dim: int, n_hashes: int, n_buckets: int):
  """The hash matrices, HxKxRx(n_buckets/2): Gaussian, as in the authors' code."""
  return jax.random.normal(key, (num_heads, head_dim, n_hashes, n_buckets // 2), jnp.float32)


def hash_buckets(qk_BxLxHxK, rot_HxKxRxN):
  """Bucket of every token in every round, BxHxRxL: argmax([xR, -xR]) in [0, 2N)."""
  proj_BxHxRxLxN = jnp.einsum("blhk,hkrn->bhrln", qk_BxLxHxK.astype(jnp.float32), rot_HxKxRxN)
  return jnp.argmax(jnp.concatenate([proj_BxHxRxLxN, -proj_BxHxRxLxN], axis=-1),
                    axis=-1).astype(jnp.int32)


def _look_back(x_BxHxRxNxcx___):
  """Per chunk n, chunk n then chunk n-1 side by side: BxHxRxNx(2c)x... (chunk 0's second half
  is the last chunk, rolled in; callers mask it)."""
  return jnp.concatenate([x_BxHxRxNxcx___, jnp.roll(x_BxHxRxNxcx___, 1, axis=3)], axis=4)


def _gather_rounds(x_BxHxLx___, index_BxHxRxL):
  """x per round in the order of index: BxHxRxLx... (index along the L axis)."""
  x_BxHx1xLx___ = x_BxHxLx___[:, :, None]
  idx = index_BxHxRxL.reshape(index_BxHxRxL.shape + (1,) * (x_BxHxLx___.ndim - 3))
  return jnp.take_along_axis(x_BxHx1xLx___, idx, axis=3)


class _Sorted(NamedTuple):
  """One round's tokens sorted by (bucket, position) and cut into chunks of c (BxHxRxNxc...),
  the sort itself (the token in each slot) and its inverse (the slot of each token), BxHxRxP."""
  qk: jax.Array  # BxHxRxNxcxK
  v: jax.Array  # BxHxRxNxcxK
  real: jax.Array  # BxHxRxNxc, False for padding
  position: jax.Array  # BxHxRxNxc, the token each slot holds
  bucket: jax.Array  # BxHxRxNxc
  sort: jax.Array  # BxHxRxP
  undo: jax.Array  # BxHxRxP


def _sort_into_chunks(qk_BxPxHxK, v_BxPxHxK, real_BxP, bucket_BxHxRxP, chunk: int) -> _Sorted:
  """Sorts each round by (bucket, position); padded tokens carry _PAD_BUCKET already."""
  batch, padded_len, heads = qk_BxPxHxK.shape[:3]
  rounds = bucket_BxHxRxP.shape[2]
  pos_BxHxRxP = jnp.broadcast_to(jnp.arange(padded_len, dtype=jnp.int32), bucket_BxHxRxP.shape)
  sorted_bucket_BxHxRxP, sort_BxHxRxP = jax.lax.sort((bucket_BxHxRxP, pos_BxHxRxP),
                                                     dimension=3, num_keys=2)
  to_chunks = lambda t: t.reshape(batch, heads, rounds, padded_len // chunk, chunk,
                                  *t.shape[4:])
  gather = lambda t_BxPxHxK: to_chunks(_gather_rounds(jnp.transpose(t_BxPxHxK, (0, 2, 1, 3)),
                                                      sort_BxHxRxP))
  real_BxHxRxP = jnp.take_along_axis(real_BxP[:, None, None, :], sort_BxHxRxP, axis=3)
  return _Sorted(gather(qk_BxPxHxK), gather(v_BxPxHxK), to_chunks(real_BxHxRxP),
                 to_chunks(sort_BxHxRxP), to_chunks(sorted_bucket_BxHxRxP), sort_BxHxRxP,
                 jnp.argsort(sort_BxHxRxP, axis=3).astype(jnp.int32))


def _allowed(srt: _Sorted, num_chunks: int, chunk: int, attend_across_buckets: bool):
  """Which of the 2c keys (own chunk, chunk before) each sorted query may see: real keys, not
  before chunk 0, and (unless attend_across_buckets) in the query's bucket. BxHxRxNxcx2c."""
  window_Nx2c = jnp.concatenate(
      [jnp.ones((num_chunks, chunk), bool),
       jnp.broadcast_to((jnp.arange(num_chunks) > 0)[:, None], (num_chunks, chunk))], axis=1)
  allowed_BxHxRxNxcx2c = (window_Nx2c[None, None, None, :, None, :]
                          & _look_back(srt.real)[..., None, :])
  if not attend_across_buckets:
    allowed_BxHxRxNxcx2c &= srt.bucket[..., :, None] == _look_back(srt.bucket)[..., None, :]
  return allowed_BxHxRxNxcx2c


def _round_counts(bucket_BxHxRxP, srt: _Sorted, chunk: int, attend_across_buckets: bool):
  """N_ij: in how many rounds key j is in query i's set (>= 1 for an allowed pair), for the
  slots of every round: BxHxRxNxcx2c."""
  rounds = bucket_BxHxRxP.shape[2]
  shape = srt.real.shape
  chunk_of_BxHxRxP = srt.undo // chunk
  count_BxHxRxNxcx2c = jnp.zeros(shape + (2 * chunk,), jnp.float32)
  for other in range(rounds):
    at = lambda t: jnp.take_along_axis(t[:, :, other:other + 1], srt.sort,
                                       axis=3).reshape(shape)
    chunk_q_BxHxRxNxc = at(chunk_of_BxHxRxP)
    diff = chunk_q_BxHxRxNxc[..., :, None] - _look_back(chunk_q_BxHxRxNxc)[..., None, :]
    member = (diff == 0) | (diff == 1)
    if not attend_across_buckets:
      bucket_other_BxHxRxNxc = at(bucket_BxHxRxP)
      member &= (bucket_other_BxHxRxNxc[..., :, None]
                 == _look_back(bucket_other_BxHxRxNxc)[..., None, :])
    count_BxHxRxNxcx2c += member.astype(jnp.float32)
  return count_BxHxRxNxcx2c


def lsh_attention(qk_BxLxHxK, v_BxLxHxK, mask_BxL, buckets_BxHxRxL, *, chunk_len: int,
                  attend_across_buckets: bool = False, dedup: bool = True, dropout_rng=None,
                  dropout_rate: float = 0.0):
  """Shared-QK attention within sorted bucket chunks, R rounds combined; returns BxLxHxK.

  `buckets` are any integer bucket ids per head and round (hash_buckets gives the paper's);
  padded tokens' ids are ignored.
  """
  batch, length, heads, dim = qk_BxLxHxK.shape
  rounds = buckets_BxHxRxL.shape[2]
  chunk = min(int(chunk_len), length)  # a chunk longer than the input is the whole input
  extra = -length % chunk
  pad = lambda t, value=0: jnp.pad(t, [(0, 0), (0, extra)] + [(0, 0)] * (t.ndim - 2),
                                   constant_values=value)
  padded_len = length + extra
  num_chunks = padded_len // chunk
  real_BxP = pad(mask_BxL.astype(bool), False)
  # Padded tokens sort after every real bucket.
  bucket_BxHxRxP = jnp.where(real_BxP[:, None, None, :],
                             jnp.pad(buckets_BxHxRxL.astype(jnp.int32),
                                     [(0, 0), (0, 0), (0, 0), (0, extra)]), _PAD_BUCKET)
  srt = _sort_into_chunks(pad(qk_BxLxHxK), pad(v_BxLxHxK), real_BxP, bucket_BxHxRxP, chunk)

  # Keys: the shared vectors at unit length (norm in float32).
  q32 = srt.qk.astype(jnp.float32)
  inv_norm = jax.lax.rsqrt(jnp.maximum(jnp.sum(q32 * q32, axis=-1, keepdims=True), _TINY))
  k_BxHxRxNxcxK = (q32 * inv_norm).astype(srt.qk.dtype)
  v_BxHxRxNx2cxK = _look_back(srt.v)
  allowed_BxHxRxNxcx2c = _allowed(srt, num_chunks, chunk, attend_across_buckets)
  self_BxHxRxNxcx2c = srt.position[..., :, None] == _look_back(srt.position)[..., None, :]

  logits_BxHxRxNxcx2c = jnp.einsum("bhrnqk,bhrnmk->bhrnqm", srt.qk * dim ** -0.5,
                                   _look_back(k_BxHxRxNxcxK), preferred_element_type=jnp.float32)
  if dedup and rounds > 1:
    count_BxHxRxNxcx2c = _round_counts(bucket_BxHxRxP, srt, chunk, attend_across_buckets)
    logits_BxHxRxNxcx2c -= jnp.log(jnp.maximum(count_BxHxRxNxcx2c, 1.0))
  logits_BxHxRxNxcx2c = jnp.where(allowed_BxHxRxNxcx2c, logits_BxHxRxNxcx2c, MASK_VALUE)
  logits_BxHxRxNxcx2c = jnp.where(allowed_BxHxRxNxcx2c & self_BxHxRxNxcx2c, SELF_VALUE,
                                  logits_BxHxRxNxcx2c)

  lse_BxHxRxNxc = jax.nn.logsumexp(logits_BxHxRxNxcx2c, axis=-1)
  weights_BxHxRxNxcx2c = jnp.exp(logits_BxHxRxNxcx2c - lse_BxHxRxNxc[..., None])
  if dropout_rng is not None and dropout_rate > 0.0:
    weights_BxHxRxNxcx2c = dropout_weights(dropout_rng, weights_BxHxRxNxcx2c, dropout_rate)
  o_BxHxRxNxcxK = jnp.einsum("bhrnqm,bhrnmk->bhrnqk",
                             weights_BxHxRxNxcx2c.astype(v_BxHxRxNx2cxK.dtype), v_BxHxRxNx2cxK)

  # Back to token order, then each round weighted by softmax over rounds of its z.
  flat = lambda t: t.reshape(batch, heads, rounds, padded_len, *t.shape[5:])
  o_BxHxRxPxK = jnp.take_along_axis(flat(o_BxHxRxNxcxK), srt.undo[..., None], axis=3)
  lse_BxHxRxP = jnp.take_along_axis(flat(lse_BxHxRxNxc), srt.undo, axis=3)
  round_w_BxHxRxP = jax.nn.softmax(lse_BxHxRxP, axis=2)
  y_BxPxHxK = jnp.einsum("bhrp,bhrpk->bphk", round_w_BxHxRxP.astype(o_BxHxRxPxK.dtype),
                         o_BxHxRxPxK)
  return y_BxPxHxK[:, :length]


@register("reformer")
class ReformerAttention(HeadsMixer):
  """LSH attention on a shared query-key projection (per head), n_hashes rounds."""
  layer_index: int = 0  # decorrelates the fixed hashes of different layers
  n_hashes: int = s.setting(1, s.Int(1), "hash rounds (LRA: 1)")
  n_buckets: int = s.setting(10, s.Int(2), "buckets per round, even (LRA: 10)")
  chunk_len: int = s.setting(10, s.Int(1),
                             "sorted chunk length; each chunk also sees the one before (LRA: 10)")
  attend_across_buckets: bool = s.setting(False, s.Bool(),
                                          "False: only same-bucket keys in the window (paper)")
  dedup: bool = s.setting(True, s.Bool(),
                          "count a key found by several rounds once (paper's log N_ij term)")
  redraw: bool = s.setting(True, s.Bool(),
                           'fresh hashes every training step, from the "dropout" rng (paper)')
  seed: int = s.setting(0, s.Int(0),
                        "the fixed hashes used in evaluation (and in training without redraw)")

  SUBQUADRATIC = True

  def check_settings(self) -> None:
    super().check_settings()
    if self.n_buckets % 2:
      s.fail(s.attention_key("n_buckets"), self.n_buckets, "an even integer >= 2")

  def carried_state(self, width: int, length: int) -> int:
    """The whole cache, shared query-keys and values, 2 x length x qkv_dim: a query reads
    n_hashes x 2 chunks, but which keys they hold depends on every key's bucket."""
    del width
    return 2 * length * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    # As QKVProjection, but one query-key projection, not two.
    dense = lambda name: head_projection(self.num_heads, self.qkv_dim, self.dtype, name)
    qk_BxLxHxK, v_BxLxHxK = dense("query_key")(x_BxLxD), dense("value")(x_BxLxD)
    if self.rotary:  # one rotation serves as query and as key: q_m . k_n depends on m - n
      qk_BxLxHxK = rotary_embedding(qk_BxLxHxK)

    if self.redraw and not deterministic:
      key = self.make_rng("dropout")
    else:
      key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self.layer_index)
    rot_HxKxRxN = random_rotations(key, self.num_heads, qk_BxLxHxK.shape[-1],
                                   int(self.n_hashes), int(self.n_buckets))
    buckets_BxHxRxL = hash_buckets(qk_BxLxHxK, rot_HxKxRxN)

    rng = self.attention_rng(deterministic)
    y_BxLxHxK = lsh_attention(qk_BxLxHxK, v_BxLxHxK, mask_BxL, buckets_BxHxRxL,
                              chunk_len=int(self.chunk_len),
                              attend_across_buckets=self.attend_across_buckets,
                              dedup=self.dedup, dropout_rng=rng, dropout_rate=self.dropout_rate)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
