"""BigBird (Zaheer et al. 2020): block-sparse attention with window, random and global blocks.

Every non-global query block attends to its window blocks, a few random blocks and the global
keys; global queries attend to everything. The pattern is computed sparsely: key blocks are
gathered per query block, global query rows are dense over L keys, so no L x L array exists.
"""
from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models import registry
from models.attention import OutputProjection, QKVProjection, softmax_attention
from models.blocked import attend, gather_blocks, pad_to_blocks, to_blocks

MODES = ("itc", "etc")


class BlockPattern(NamedTuple):
  """Which key blocks each query block of a padded sequence attends to.

  Blocks [0, num_front) and [num_blocks - num_back, num_blocks) are global: their queries see
  every key and every query sees them. Row n of index_NxR lists the other key blocks of query
  block n (window first, then random), each at most once and never a global block; slots where
  valid_NxR is False are filler (rows have different lengths near the ends). Rows of global
  query blocks are all filler.
  """
  num_front: int
  num_back: int
  index_NxR: np.ndarray  # int32
  valid_NxR: np.ndarray  # bool


def global_block_counts(num_blocks: int, num_global_blocks: int) -> tuple[int, int]:
  """Splits the global blocks between the start and the end (start first), as the paper's
  code makes the first and the last block global."""
  front = min((num_global_blocks + 1) // 2, num_blocks)
  back = min(num_global_blocks // 2, num_blocks - front)
  return front, back


def block_pattern(num_blocks: int, *, window_blocks: int, num_random_blocks: int,
                  num_global_blocks: int, seed: int, layer_index: int) -> BlockPattern:
  """The fixed BigBird pattern of one layer, drawn with numpy from (seed, layer_index).

  Random blocks of query block n are drawn without replacement among the blocks that are
  neither global nor in n's window, so nothing is counted twice; fewer are drawn when fewer
  such blocks exist.
  """
  front, back = global_block_counts(num_blocks, num_global_blocks)
  is_global_N = np.zeros(num_blocks, bool)
  is_global_N[:front] = True
  is_global_N[num_blocks - back:] = True
  rng = np.random.default_rng([seed, layer_index])
  half = window_blocks // 2
  rows = []
  for n in range(num_blocks):
    if is_global_N[n]:
      rows.append([])
      continue
    window = [m for m in range(max(0, n - half), min(num_blocks, n + half + 1))
              if not is_global_N[m]]
    excluded_N = is_global_N.copy()
    excluded_N[window] = True
    candidates = np.flatnonzero(~excluded_N)
    count = min(num_random_blocks, len(candidates))
    chosen = rng.choice(candidates, size=count, replace=False) if count else []
    rows.append(window + sorted(int(m) for m in chosen))
  width = max([len(r) for r in rows] + [1])
  index_NxR = np.zeros((num_blocks, width), np.int32)
  valid_NxR = np.zeros((num_blocks, width), bool)
  for n, row in enumerate(rows):
    index_NxR[n, :len(row)] = row
    valid_NxR[n, :len(row)] = True
  return BlockPattern(front, back, index_NxR, valid_NxR)


@registry.register("bigbird")
class BigBirdAttention(nn.Module):
  """BigBird block-sparse attention, ITC (global blocks of the sequence) or ETC (extra tokens).

  mode "itc": the first ceil(num_global_blocks / 2) and last floor(num_global_blocks / 2)
  blocks are global. mode "etc": num_extra_global learned token vectors are prepended inside
  the mixer as the global tokens (num_global_blocks is unused) and dropped from the output.
  """
  num_heads: int
  qkv_dim: int
  dropout_rate: float = 0.0  # attention-weight dropout
  dtype: str = "float32"
  layer_index: int = 0  # picks this layer's random pattern
  block_size: int = 64
  num_random_blocks: int = 3
  window_blocks: int = 3  # own block and (window_blocks - 1) / 2 neighbours each side; odd
  num_global_blocks: int = 2  # ITC: the first and the last block
  mode: str = "itc"
  num_extra_global: int = 128  # ETC: as many global tokens as ITC's 2 blocks of 64
  seed: int = 0

  def _check(self):
    if self.mode not in MODES:
      raise ValueError(f"bigbird mode {self.mode!r} is not one of {', '.join(MODES)}")
    if self.block_size < 1:
      raise ValueError(f"bigbird block_size must be >= 1, got {self.block_size}")
    if self.window_blocks < 1 or self.window_blocks % 2 == 0:
      raise ValueError(f"bigbird window_blocks must be odd and >= 1, got {self.window_blocks}")
    if self.num_random_blocks < 0 or self.num_global_blocks < 0:
      raise ValueError("bigbird num_random_blocks and num_global_blocks must be >= 0")
    if self.mode == "etc" and self.num_extra_global < 1:
      raise ValueError(f"bigbird ETC needs num_extra_global >= 1, got {self.num_extra_global}")

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    self._check()
    batch, length, dim = x_BxLxD.shape
    blk = self.block_size
    mask_BxL = mask_BxL.astype(bool)
    etc = self.mode == "etc"
    if etc:
      # One projection for tokens and sequence, so global tokens share the layer's Q/K/V.
      tokens_GxD = self.param("global_tokens", nn.initializers.normal(1.0),
                              (self.num_extra_global, dim))
      tokens_BxGxD = jnp.broadcast_to(tokens_GxD.astype(x_BxLxD.dtype)[None],
                                      (batch, self.num_extra_global, dim))
      x_BxLxD = jnp.concatenate([tokens_BxGxD, x_BxLxD], axis=1)
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype)(x_BxLxD)
    if etc:
      g = self.num_extra_global
      # The tokens' own query rows are not computed: they are re-created from the same
      # parameters in every layer and dropped, so their outputs could reach nothing.
      gk_BxGxHxK, gv_BxGxHxK = k[:, :g], v[:, :g]
      gmask_BxG = jnp.ones((batch, g), bool)
      q, k, v = q[:, g:], k[:, g:], v[:, g:]

    q_BxPxHxK, _ = pad_to_blocks(q, blk)
    k_BxPxHxK, _ = pad_to_blocks(k, blk)
    v_BxPxHxK, _ = pad_to_blocks(v, blk)
    mask_BxP, _ = pad_to_blocks(mask_BxL, blk, value=False)
    padded = mask_BxP.shape[1]
    num_blocks = padded // blk
    pattern = block_pattern(num_blocks, window_blocks=self.window_blocks,
                            num_random_blocks=self.num_random_blocks,
                            num_global_blocks=0 if etc else self.num_global_blocks,
                            seed=self.seed, layer_index=self.layer_index)
    front, back = pattern.num_front, pattern.num_back
    start, stop = front * blk, padded - back * blk  # token range of non-global query blocks
    if not etc:
      gk_BxGxHxK = jnp.concatenate([k_BxPxHxK[:, :start], k_BxPxHxK[:, stop:]], axis=1)
      gv_BxGxHxK = jnp.concatenate([v_BxPxHxK[:, :start], v_BxPxHxK[:, stop:]], axis=1)
      gmask_BxG = jnp.concatenate([mask_BxP[:, :start], mask_BxP[:, stop:]], axis=1)

    rng = None if deterministic or self.dropout_rate == 0.0 else self.make_rng("dropout")
    rngs = [None] * 3 if rng is None else list(jax.random.split(rng, 3))
    pieces = []
    if front:  # global query blocks at the start: dense over all keys (linear in L)
      pieces.append(softmax_attention(q_BxPxHxK[:, :start], k_BxPxHxK, v_BxPxHxK, mask_BxP,
                                      dropout_rng=rngs[0], dropout_rate=self.dropout_rate))
    num_mid = num_blocks - front - back
    if num_mid:
      index_MxR = pattern.index_NxR[front:num_blocks - back]
      slot_ok_MxRb = np.repeat(pattern.valid_NxR[front:num_blocks - back], blk, axis=1)
      q_BxMxbxHxK = to_blocks(q_BxPxHxK[:, start:stop], blk)
      k_BxMxRbxHxK = gather_blocks(to_blocks(k_BxPxHxK, blk), index_MxR)
      v_BxMxRbxHxK = gather_blocks(to_blocks(v_BxPxHxK, blk), index_MxR)
      kmask_BxMxRb = gather_blocks(to_blocks(mask_BxP, blk), index_MxR) & slot_ok_MxRb[None]
      # Global keys join every block's own keys so that one softmax covers all of them.
      gshape = (batch, num_mid) + gk_BxGxHxK.shape[1:]
      k_BxMxSxHxK = jnp.concatenate(
          [k_BxMxRbxHxK, jnp.broadcast_to(gk_BxGxHxK[:, None], gshape)], axis=2)
      v_BxMxSxHxK = jnp.concatenate(
          [v_BxMxRbxHxK, jnp.broadcast_to(gv_BxGxHxK[:, None], gshape)], axis=2)
      gmask_BxMxG = jnp.broadcast_to(gmask_BxG[:, None], (batch, num_mid, gmask_BxG.shape[1]))
      allowed_BxMx1xS = jnp.concatenate([kmask_BxMxRb, gmask_BxMxG], axis=2)[:, :, None]
      y_BxMxbxHxK = attend(q_BxMxbxHxK, k_BxMxSxHxK, v_BxMxSxHxK, allowed_BxMx1xS,
                           dropout_rng=rngs[1], dropout_rate=self.dropout_rate)
      pieces.append(y_BxMxbxHxK.reshape(batch, num_mid * blk, *y_BxMxbxHxK.shape[3:]))
    if back:  # global query blocks at the end
      pieces.append(softmax_attention(q_BxPxHxK[:, stop:], k_BxPxHxK, v_BxPxHxK, mask_BxP,
                                      dropout_rng=rngs[2], dropout_rate=self.dropout_rate))
    y_BxLxHxK = jnp.concatenate(pieces, axis=1)[:, :length]
    return OutputProjection(dim, self.dtype)(y_BxLxHxK)
