"""Exact softmax attention in O(N) memory (Rabe and Staats 2021, "Self-attention does not
need O(n^2) memory").

The queries are cut into chunks (lax.map); for each query chunk the keys and values are
visited chunk by chunk (lax.scan) keeping, per query and head, a running maximum of the logits,
the running sum of exp(logit - max) and the running exp-weighted sum of the values. When a
new chunk raises the maximum, the old sums are rescaled by exp(old max - new max), so the
result is the softmax attention of the dense formula, not an approximation. (The paper
instead maps over the key chunks and merges their summaries at the end; the running merge
keeps one summary at a time.)

Memory: the largest intermediate is one BxHxQxC block of logits (Q, C the query and key chunk
sizes). Both loop bodies are rematerialised (jax.checkpoint): the backward pass recomputes
each block of logits instead of storing it, and across query chunks it stores only the inputs,
so a train step holds O(N) activations. The paper checkpoints the key-chunk step only; we
also checkpoint the query-chunk body, because otherwise the outer loop keeps every key-chunk
carry of every query chunk (N x N/C values) for the backward pass.

Semantics match models.common.softmax_attention exactly: logits and sums in float32, masked
keys take the logit MASK_VALUE (so a query whose keys are all masked gets the same uniform
average over the masked keys as the dense formula), and the keys added only to fill the last
chunk take 2 * MASK_VALUE, which underflows to weight 0 next to any real or masked key.

Attention-weight dropout cannot reproduce the dense path's mask (that one is drawn for the
whole LxM matrix at once); instead each (query chunk i, key chunk j) block draws its own:
keep = bernoulli(fold_in(fold_in(rng, i), j), 1 - rate, shape BxHxQxC) over the chunk grid
padded to whole chunks, with Q = balanced_chunk(L, query_chunk) and
C = balanced_chunk(M, key_chunk). The kept weights are rescaled by 1 / (1 - rate) and the
softmax denominator is the undropped one, as in the dense path, so the result is the dense
formula with that mask.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from lra.models.common import MASK_VALUE, dropout_weights

# Logit of the keys that only fill the last chunk: exp(FILL - MASK_VALUE) == 0 in float32, so
# these keys get no weight even in a row whose real keys are all masked.
FILL_VALUE = 2 * MASK_VALUE


def _pad_and_chunk(x, axis: int, chunk: int, value=0):
  """Pads `axis` with `value` to whole chunks of `chunk` and splits it: the chunk index becomes
  the new leading axis and the chunk's positions stay at `axis` + 1."""
  extra = -x.shape[axis] % chunk
  if extra:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    x = jnp.pad(x, widths, constant_values=value)
  x = x.reshape(*x.shape[:axis], x.shape[axis] // chunk, chunk, *x.shape[axis + 1:])
  return jnp.moveaxis(x, axis, 0)


def balanced_chunk(length: int, chunk: int) -> int:
  """The chunk size actually used: as many chunks as `chunk` needs, made equal, so the padding
  is under one position per chunk (1025 tokens with chunk 1024: two chunks of 513)."""
  count = -(-length // chunk)
  return -(-length // count)


def _key_chunk_step(q_BxHxQxK, rng, dropout_rate: float, q_positions_Q=None):
  """The scan body over key chunks for one query chunk: folds a chunk of keys into the running
  (max, denominator, weighted value sum); `rng` None means no dropout; `q_positions_Q` (causal
  only) the chunk's query positions, keys after them masked as the dense path masks them."""

  def key_chunk_step(carry, chunk):
    max_BxHxQ, denom_BxHxQ, acc_BxHxQxK = carry
    k_BxHxCxK, v_BxHxCxK, real_BxC, fill_BxC, k_index = chunk
    logits_BxHxQxC = jnp.einsum("bhqk,bhck->bhqc", q_BxHxQxK, k_BxHxCxK,
                                preferred_element_type=jnp.float32)
    logits_BxHxQxC = jnp.where(real_BxC[:, None, None, :], logits_BxHxQxC,
                               fill_BxC[:, None, None, :])
    if q_positions_Q is not None:
      k_positions_C = k_index * k_BxHxCxK.shape[2] + jnp.arange(k_BxHxCxK.shape[2])
      later_QxC = k_positions_C[None, :] > q_positions_Q[:, None]
      # A later real key takes MASK_VALUE as in the dense path; a fill key stays FILL_VALUE.
      logits_BxHxQxC = jnp.where(later_QxC[None, None] & real_BxC[:, None, None, :],
                                 MASK_VALUE, logits_BxHxQxC)
    # The result does not depend on the shift, so it carries no gradient (exactly).
    new_max_BxHxQ = jax.lax.stop_gradient(
        jnp.maximum(max_BxHxQ, jnp.max(logits_BxHxQxC, axis=-1)))
    weights_BxHxQxC = jnp.exp(logits_BxHxQxC - new_max_BxHxQ[..., None])
    rescale_BxHxQ = jnp.exp(max_BxHxQ - new_max_BxHxQ)  # 0 at the first chunk (-inf)
    denom_BxHxQ = denom_BxHxQ * rescale_BxHxQ + jnp.sum(weights_BxHxQxC, axis=-1)
    if rng is not None:
      weights_BxHxQxC = dropout_weights(jax.random.fold_in(rng, k_index), weights_BxHxQxC,
                                        dropout_rate)
    acc_BxHxQxK = acc_BxHxQxK * rescale_BxHxQ[..., None] + jnp.einsum(
        "bhqc,bhck->bhqk", weights_BxHxQxC.astype(v_BxHxCxK.dtype), v_BxHxCxK,
        preferred_element_type=jnp.float32)
    return (new_max_BxHxQ, denom_BxHxQ, acc_BxHxQxK), None

  return key_chunk_step


def chunked_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, key_mask_BxM, *,
                      query_chunk: int = 256, key_chunk: int = 256, dropout_rng=None,
                      dropout_rate: float = 0.0, causal: bool = False):
  """softmax_attention(q, k, v, key_mask, causal=causal) computed chunk by chunk; returns
  BxLxHxK. (Causal, the blocks above the diagonal are still visited, masked: same cost.)"""
  batch, length, heads, head_dim = q_BxLxHxK.shape
  keys = k_BxMxHxK.shape[1]
  q_chunk, k_chunk = balanced_chunk(length, query_chunk), balanced_chunk(keys, key_chunk)
  dropout = dropout_rng is not None and dropout_rate > 0.0
  out_dtype = v_BxMxHxK.dtype

  scale = head_dim ** -0.5
  # Heads next to batch, so each block's matmuls need no transposes inside the loops.
  q_NxBxHxQxK = _pad_and_chunk(jnp.einsum("blhk->bhlk", q_BxLxHxK * scale), 2, q_chunk)
  k_JxBxHxCxK = _pad_and_chunk(jnp.einsum("bmhk->bhmk", k_BxMxHxK), 2, k_chunk)
  v_JxBxHxCxK = _pad_and_chunk(jnp.einsum("bmhk->bhmk", v_BxMxHxK), 2, k_chunk)
  # Where a key is not real, its logit is replaced by MASK_VALUE (masked) or FILL_VALUE (fill).
  real_JxBxC = _pad_and_chunk(key_mask_BxM, 1, k_chunk, False)
  fill_BxM = jnp.where(key_mask_BxM, 0.0, MASK_VALUE).astype(jnp.float32)
  fill_JxBxC = _pad_and_chunk(fill_BxM, 1, k_chunk, FILL_VALUE)
  key_index_J = jnp.arange(k_JxBxHxCxK.shape[0])

  def query_chunk_attention(q_BxHxQxK, q_index):
    rng = jax.random.fold_in(dropout_rng, q_index) if dropout else None
    q_positions_Q = q_index * q_chunk + jnp.arange(q_chunk) if causal else None
    key_chunk_step = _key_chunk_step(q_BxHxQxK, rng, dropout_rate, q_positions_Q)
    init = (jnp.full((batch, heads, q_chunk), -jnp.inf, jnp.float32),
            jnp.zeros((batch, heads, q_chunk), jnp.float32),
            jnp.zeros((batch, heads, q_chunk, head_dim), jnp.float32))
    # Rematerialised: the backward pass recomputes the logits of each block, never stores them.
    # (prevent_cse=False is safe and faster inside a loop body, per jax.checkpoint's docs.)
    (_, denom_BxHxQ, acc_BxHxQxK), _ = jax.lax.scan(
        jax.checkpoint(key_chunk_step, prevent_cse=False), init,
        (k_JxBxHxCxK, v_JxBxHxCxK, real_JxBxC, fill_JxBxC, key_index_J))
    # denom >= 1: the largest logit contributes exp(0).
    return (acc_BxHxQxK / denom_BxHxQ[..., None]).astype(out_dtype)

  # Rematerialised too: across query chunks the backward pass keeps only each chunk's inputs.
  body = jax.checkpoint(query_chunk_attention, prevent_cse=False)
  num_q = q_NxBxHxQxK.shape[0]
  out_NxBxHxQxK = jax.lax.map(lambda args: body(*args), (q_NxBxHxQxK, jnp.arange(num_q)))
  out_BxHxLxK = jnp.moveaxis(out_NxBxHxQxK, 0, 2).reshape(batch, heads, num_q * q_chunk,
                                                          head_dim)
  return jnp.einsum("bhlk->blhk", out_BxHxLxK[:, :, :length])
