"""Local attention: each token attends only to the tokens of its own contiguous block.

The sequence is cut into non-overlapping blocks of `block_size` consecutive positions; with
`overlap` a block also sees its previous and next block. Computed block by block (gathers of
key blocks, never an L x L matrix or mask). The original LRA code grouped strided positions
(i, i + L/b, ...) into a "block"; here blocks are contiguous, as the method describes.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.ops.blocked import attend, gather_blocks, padded_blocks
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection
from lra.models.registry import register


@register("local")
class LocalAttention(HeadsMixer):
  """Softmax attention within contiguous blocks (optionally plus the neighbouring blocks)."""
  block_size: int = s.setting(50, s.Int(1), "tokens per block (LRA: 50; the image tasks use 64)")
  overlap: bool = s.setting(False, s.Bool(), "also attend to the previous and the next block")

  SUBQUADRATIC = True

  def carried_state(self, width: int, length: int) -> int:
    """The keys and values a query reads: its block (and the blocks beside it with overlap),
    2 x min(span, length) x qkv_dim, as Zoology counts sliding-window attention."""
    del width
    span = (3 if self.overlap else 1) * min(self.block_size, length)
    return 2 * min(span, length) * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    batch, length = mask_BxL.shape
    # A block longer than the input is one block of the input's length: same pattern, no
    # padding work.
    block = min(int(self.block_size), length)
    q_BxNxQxHxK, k_BxNxbxHxK, v_BxNxbxHxK = (padded_blocks(t, block)
                                             for t in (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK))
    # The positions added to fill the last block are padding: False, so they get no weight.
    keep_BxNxb = padded_blocks(mask_BxL.astype(bool), block, value=False)
    num_blocks = keep_BxNxb.shape[1]

    # Key blocks of every query block: itself, or (previous, itself, next) with overlap.
    offsets_R = np.array([-1, 0, 1] if self.overlap else [0])
    index_NxR = np.arange(num_blocks)[:, None] + offsets_R[None, :]
    # Neighbours past either end do not exist: point them at a real block (a safe gather)
    # and drop their keys below, so no key is counted twice.
    exists_NxR = (index_NxR >= 0) & (index_NxR < num_blocks)
    index_NxR = np.clip(index_NxR, 0, num_blocks - 1)
    exists_NxM = np.repeat(exists_NxR, block, axis=1)

    k_BxNxMxHxK = gather_blocks(k_BxNxbxHxK, index_NxR)
    v_BxNxMxHxK = gather_blocks(v_BxNxbxHxK, index_NxR)
    keep_BxNxM = gather_blocks(keep_BxNxb, index_NxR)
    allowed_BxNx1xM = (keep_BxNxM & jnp.asarray(exists_NxM)[None])[:, :, None, :]

    rng = self.attention_rng(deterministic)
    y_BxNxQxHxK = attend(q_BxNxQxHxK, k_BxNxMxHxK, v_BxNxMxHxK, allowed_BxNx1xM,
                         dropout_rng=rng, dropout_rate=self.dropout_rate)
    y_BxPxHxK = y_BxNxQxHxK.reshape(batch, -1, *y_BxNxQxHxK.shape[3:])
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxPxHxK[:, :length])
