"""Sparse Transformer (Child et al. 2019), bidirectional: factorised block/stride attention.

With block size l, query i sees two key sets:
  A1 = {j : floor(j/l) == floor(i/l)}                 its own block (both patterns)
  A2 = {j : (i - j) mod l == 0}                       strided: its column
  A2 = {j : j mod l in {l-c, ..., l-1}}               fixed: the last c ("summary") of every block
combined by head (half the heads A1, half A2), by layer (even layers A1, odd A2), or merged
(every head one softmax over A1 union A2, each key once). Everything is computed on the
L/l x l reshape: A1 is block-local, strided A2 runs along the other axis of the reshape and
fixed A2 is an L x (L/l * c) product against the gathered summary keys; no L x L array exists.

A query whose key set holds no real token (fixed A2 when no summary position is a real token)
outputs zeros instead of an average over padding.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.ops.blocked import attend, pad_to_blocks, to_blocks
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, masked_softmax
from lra.models.registry import register

PATTERNS = ("fixed", "strided")
COMBINES = ("heads", "interleave", "merged")


def _attend_or_zero(q_BxNxQxHxK, k_BxNxMxHxK, v_BxNxMxHxK, allowed_BxNxQxM, rng, rate):
  """blocked.attend, with zero output for queries that may see no key at all."""
  y_BxNxQxHxK = attend(q_BxNxQxHxK, k_BxNxMxHxK, v_BxNxMxHxK, allowed_BxNxQxM,
                       dropout_rng=rng, dropout_rate=rate)
  has_key_BxNxQ = jnp.any(allowed_BxNxQxM, axis=-1)
  return y_BxNxQxHxK * has_key_BxNxQ[..., None, None].astype(y_BxNxQxHxK.dtype)


def _local(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, rng, rate):
  """A1: each block attends to itself."""
  return _attend_or_zero(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl[:, :, None, :],
                         rng, rate)


def _strided(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, rng, rate):
  """Strided A2: the same block-local attention on the transposed reshape (columns)."""
  cols = lambda t: jnp.swapaxes(t, 1, 2)
  y_BxlxNxHxK = _attend_or_zero(cols(q_BxNxlxHxK), cols(k_BxNxlxHxK), cols(v_BxNxlxHxK),
                                cols(mask_BxNxl)[:, :, None, :], rng, rate)
  return cols(y_BxlxNxHxK)


def _summaries(t_BxNxlx___, c: int):
  """The last c positions of every block, side by side: Bx(N*c)x..."""
  s_BxNxcx___ = t_BxNxlx___[:, :, -c:]
  b, n = s_BxNxcx___.shape[:2]
  return s_BxNxcx___.reshape(b, n * c, *s_BxNxcx___.shape[3:])


def _fixed(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, c, rng, rate):
  """Fixed A2: every query attends to the same N*c summary keys."""
  b, n, l, h, d = q_BxNxlxHxK.shape
  q_Bx1xLxHxK = q_BxNxlxHxK.reshape(b, 1, n * l, h, d)
  k_Bx1xSxHxK = _summaries(k_BxNxlxHxK, c)[:, None]
  v_Bx1xSxHxK = _summaries(v_BxNxlxHxK, c)[:, None]
  allowed_Bx1x1xS = _summaries(mask_BxNxl, c)[:, None, None, :]
  y_Bx1xLxHxK = _attend_or_zero(q_Bx1xLxHxK, k_Bx1xSxHxK, v_Bx1xSxHxK, allowed_Bx1x1xS,
                                rng, rate)
  return y_Bx1xLxHxK.reshape(b, n, l, h, d)


def _merged(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, pattern, c, rng, rate):
  """One softmax over A1 and A2 side by side; keys of A2 already in A1 are masked out of A2."""
  b, n, l = mask_BxNxl.shape
  q_BxNxlxHxK = q_BxNxlxHxK * q_BxNxlxHxK.shape[-1] ** -0.5
  near_BxNxHxlxl = jnp.einsum("bnqhk,bnmhk->bnhqm", q_BxNxlxHxK, k_BxNxlxHxK,
                              preferred_element_type=jnp.float32)
  near_ok_BxNx1xlxl = jnp.broadcast_to(mask_BxNxl[:, :, None, None, :], (b, n, 1, l, l))
  if pattern == "strided":
    # Query (n, r) sees keys (m, r) for every block m; m == n is the query itself, in A1.
    far_BxNxHxlxM = jnp.einsum("bnqhk,bmqhk->bnhqm", q_BxNxlxHxK, k_BxNxlxHxK,
                               preferred_element_type=jnp.float32)
    other_block_NxM = ~jnp.eye(n, dtype=bool)
    far_ok_BxNx1xlxM = (jnp.swapaxes(mask_BxNxl, 1, 2)[:, None, None]
                        & other_block_NxM[None, :, None, None, :])
  else:
    k_BxSxHxK, v_BxSxHxK = _summaries(k_BxNxlxHxK, c), _summaries(v_BxNxlxHxK, c)
    far_BxNxHxlxM = jnp.einsum("bnqhk,bshk->bnhqs", q_BxNxlxHxK, k_BxSxHxK,
                               preferred_element_type=jnp.float32)
    # The summaries of the query's own block are in A1 already.
    block_of_S = jnp.arange(n * c) // c
    other_block_NxS = block_of_S[None, :] != jnp.arange(n)[:, None]
    far_ok_BxNx1xlxM = (_summaries(mask_BxNxl, c)[:, None, None, None, :]
                        & other_block_NxS[None, :, None, None, :])
  far_ok_BxNx1xlxM = jnp.broadcast_to(far_ok_BxNx1xlxM, (b, n, 1, l, far_BxNxHxlxM.shape[-1]))

  logits_BxNxHxlxT = jnp.concatenate([near_BxNxHxlxl, far_BxNxHxlxM], axis=-1)
  ok_BxNx1xlxT = jnp.concatenate([near_ok_BxNx1xlxl, far_ok_BxNx1xlxM], axis=-1)
  weights_BxNxHxlxT = masked_softmax(logits_BxNxHxlxT, ok_BxNx1xlxT, dropout_rng=rng,
                                     dropout_rate=rate)
  weights_BxNxHxlxT = weights_BxNxHxlxT.astype(v_BxNxlxHxK.dtype)
  near_w_BxNxHxlxl, far_w_BxNxHxlxM = weights_BxNxHxlxT[..., :l], weights_BxNxHxlxT[..., l:]

  y_BxNxlxHxK = jnp.einsum("bnhqm,bnmhk->bnqhk", near_w_BxNxHxlxl, v_BxNxlxHxK)
  if pattern == "strided":
    y_BxNxlxHxK += jnp.einsum("bnhqm,bmqhk->bnqhk", far_w_BxNxHxlxM, v_BxNxlxHxK)
  else:
    y_BxNxlxHxK += jnp.einsum("bnhqs,bshk->bnqhk", far_w_BxNxHxlxM, v_BxSxHxK)
  has_key_BxNxlx1x1 = jnp.any(ok_BxNx1xlxT, axis=-1)[:, :, 0, :, None, None]
  return y_BxNxlxHxK * has_key_BxNxlx1x1.astype(y_BxNxlxHxK.dtype)


@register("sparse_transformer")
class SparseTransformerAttention(HeadsMixer):
  """Child et al. 2019 factorised attention, without the causal mask (classification)."""
  layer_index: int = 0  # the encoder block's index; picks the pattern for "interleave"
  # LRA's sparse transformer config used the fixed pattern with block 50 and c 10.
  pattern: str = s.setting("fixed", s.Choice(PATTERNS), '"fixed" or "strided": what A2 is')
  combine: str = s.setting("heads", s.Choice(COMBINES),
                           '"heads" (paper\'s best), "interleave" (by layer) or "merged"')
  block_size: int = s.setting(50, s.Int(1), "l: block length and stride")
  c: int = s.setting(10, s.Int(1), "fixed pattern: summary positions at the end of each block")

  SUBQUADRATIC = True
  # One head cannot hold two patterns ("heads" splits them over the heads): configs of a
  # one-head model merge them.
  SETTINGS_WHEN = (({"num_heads": 1}, {"combine": "merged"}),)

  def check_settings(self) -> None:
    super().check_settings()
    if self.pattern == "fixed" and self.c > self.block_size:
      s.fail(s.attention_key("c"), self.c,
             f"an integer in 1..config.model.attention.block_size={self.block_size}")
    if self.combine == "heads" and self.num_heads < 2:
      # With one head there is nothing to split: the model would be A1 only.
      s.fail(s.attention_key("combine"), self.combine,
             "'interleave' or 'merged' with one head ('heads' needs config.model.num_heads >= 2)")

  def carried_state(self, width: int, length: int) -> int:
    """The keys and values a query reads, per head: A1 its block (l), A2 its column (strided,
    ceil(L / l)) or every block's c summaries (fixed), both (merged, the overlap once) or as
    `combine` gives them to heads and layers; 2 x keys x head_dim summed over the heads."""
    del width
    l, blocks = self.block_size, -(-length // self.block_size)
    near = min(l, length)
    far = min(blocks if self.pattern == "strided" else blocks * self.c, length)
    both = min(l + (blocks - 1) * (1 if self.pattern == "strided" else self.c), length)
    if self.combine == "merged":
      keys = [both] * self.num_heads
    elif self.combine == "interleave":
      keys = [near if self.layer_index % 2 == 0 else far] * self.num_heads
    else:  # the first ceil(H/2) heads A1, the rest A2
      keys = [near] * (self.num_heads - self.num_heads // 2) + [far] * (self.num_heads // 2)
    return 2 * sum(keys) * self.head_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype, self.rotary)(x_BxLxD)
    rng = self.attention_rng(deterministic)
    l = self.block_size
    q_BxPxHxK, length = pad_to_blocks(q, l)
    k_BxPxHxK, _ = pad_to_blocks(k, l)
    v_BxPxHxK, _ = pad_to_blocks(v, l)
    mask_BxP, _ = pad_to_blocks(mask_BxL, l, value=False)  # padded keys get no weight
    q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK = (
        to_blocks(t, l) for t in (q_BxPxHxK, k_BxPxHxK, v_BxPxHxK))
    mask_BxNxl = to_blocks(mask_BxP, l)

    def second(q_, k_, v_, rng_):
      if self.pattern == "strided":
        return _strided(q_, k_, v_, mask_BxNxl, rng_, self.dropout_rate)
      return _fixed(q_, k_, v_, mask_BxNxl, self.c, rng_, self.dropout_rate)

    if self.combine == "merged":
      y_BxNxlxHxK = _merged(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, self.pattern,
                            self.c, rng, self.dropout_rate)
    elif self.combine == "interleave":
      if self.layer_index % 2 == 0:
        y_BxNxlxHxK = _local(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, mask_BxNxl, rng,
                             self.dropout_rate)
      else:
        y_BxNxlxHxK = second(q_BxNxlxHxK, k_BxNxlxHxK, v_BxNxlxHxK, rng)
    else:
      # The first ceil(H/2) heads take A1, the rest A2.
      split = self.num_heads - self.num_heads // 2
      rng1, rng2 = (None, None) if rng is None else jax.random.split(rng)
      near_BxNxlxHxK = _local(q_BxNxlxHxK[..., :split, :], k_BxNxlxHxK[..., :split, :],
                              v_BxNxlxHxK[..., :split, :], mask_BxNxl, rng1,
                              self.dropout_rate)
      far_BxNxlxHxK = second(q_BxNxlxHxK[..., split:, :], k_BxNxlxHxK[..., split:, :],
                             v_BxNxlxHxK[..., split:, :], rng2)
      y_BxNxlxHxK = jnp.concatenate([near_BxNxlxHxK, far_BxNxlxHxK], axis=3)

    b, n, _, h, d = y_BxNxlxHxK.shape
    y_BxLxHxK = y_BxNxlxHxK.reshape(b, n * l, h, d)[:, :length]
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
