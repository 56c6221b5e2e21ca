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

from lra import rules as s
from lra.models.ops.blocked import attend, gather_blocks, pad_to_blocks, to_blocks
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, softmax_attention
from lra.models.registry import register

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


def sparse_rows(q_BxPxHxK, k_BxPxHxK, v_BxPxHxK, mask_BxP, global_keys, pattern: BlockPattern,
                blk: int, *, dropout_rng=None, dropout_rate: float = 0.0):
  """The outputs of the non-global query blocks, BxMxHxK (M = their tokens): each block over
  its window and random key blocks and the global keys, in one softmax.

  global_keys = (k_BxGxHxK, v_BxGxHxK, mask_BxG).
  """
  gk_BxGxHxK, gv_BxGxHxK, gmask_BxG = global_keys
  batch, padded = mask_BxP.shape
  num_blocks = padded // blk
  front, back = pattern.num_front, pattern.num_back
  num_mid = num_blocks - front - back
  index_MxR = pattern.index_NxR[front:num_blocks - back]
  slot_ok_MxRb = np.repeat(pattern.valid_NxR[front:num_blocks - back], blk, axis=1)
  q_BxMxbxHxK = to_blocks(q_BxPxHxK[:, front * blk:padded - back * blk], blk)
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
                       dropout_rng=dropout_rng, dropout_rate=dropout_rate)
  return y_BxMxbxHxK.reshape(batch, num_mid * blk, *y_BxMxbxHxK.shape[3:])


@register("bigbird")
class BigBirdAttention(HeadsMixer):
  """BigBird block-sparse attention, ITC (global blocks of the sequence) or ETC (extra tokens).

  mode "itc": the first ceil(num_global_blocks / 2) and last floor(num_global_blocks / 2)
  blocks are global. mode "etc": num_extra_global learned token vectors are prepended inside
  the mixer as the global tokens (num_global_blocks is unused) and dropped from the output.
  """
  layer_index: int = 0  # picks this layer's random pattern
  block_size: int = s.setting(64, s.Int(1),
                              "tokens per block (every attention pattern is of whole blocks)")
  num_random_blocks: int = s.setting(3, s.Int(0), "random key blocks each query block attends to")
  window_blocks: int = s.setting(3, s.Int(1),
                                 "own block and (window_blocks - 1) / 2 neighbours each side; odd")
  num_global_blocks: int = s.setting(2, s.Int(0), "ITC: the first and the last block")
  mode: str = s.setting("itc", s.Choice(MODES),
                        '"itc" (global blocks of the sequence) or "etc" (extra global tokens)')
  num_extra_global: int = s.setting(128, s.Int(0),
                                    "ETC: as many global tokens as ITC's 2 blocks of 64")
  seed: int = s.setting(0, s.Int(0), "the random blocks' pattern (fixed per layer)")

  SUBQUADRATIC = True

  def check_settings(self) -> None:
    super().check_settings()
    if self.window_blocks % 2 == 0:
      s.fail(s.attention_key("window_blocks"), self.window_blocks, "an odd integer >= 1")
    if self.mode == "etc" and self.num_extra_global < 1:
      s.fail(s.attention_key("num_extra_global"), self.num_extra_global,
             "an integer >= 1 with mode 'etc'")

  def carried_state(self, width: int, length: int) -> int:
    """The keys and values a non-global query block reads: its window, random and global
    blocks (ITC), or its window and random blocks and the extra global tokens (ETC), as
    Zoology counts BigBird (2 x blocks x block_size x width); the global blocks' own queries
    read every key, not counted."""
    del width
    blocks = self.window_blocks + self.num_random_blocks
    if self.mode == "etc":
      keys = min(blocks * self.block_size, length) + self.num_extra_global
    else:
      keys = min((blocks + self.num_global_blocks) * self.block_size, length)
    return 2 * keys * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    batch, length, dim = x_BxLxD.shape
    blk = self.block_size
    etc = self.mode == "etc"
    if etc:
      # One projection for tokens and sequence, so global tokens share the layer's Q/K/V.
      g = self.num_extra_global
      tokens_GxD = self.param("global_tokens", nn.initializers.normal(1.0), (g, dim))
      tokens_BxGxD = jnp.broadcast_to(tokens_GxD.astype(x_BxLxD.dtype)[None], (batch, g, dim))
      x_BxLxD = jnp.concatenate([tokens_BxGxD, x_BxLxD], axis=1)
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype, self.rotary)(x_BxLxD)
    if etc:
      # The tokens' own query rows are not computed: they are re-created from the same
      # parameters in every layer and dropped, so their outputs could reach nothing.
      global_keys = (k[:, :g], v[:, :g], jnp.ones((batch, g), bool))
      q, k, v = q[:, g:], k[:, g:], v[:, g:]

    q_BxPxHxK, k_BxPxHxK, v_BxPxHxK = (pad_to_blocks(t, blk)[0] for t in (q, k, v))
    mask_BxP, _ = pad_to_blocks(mask_BxL.astype(bool), blk, value=False)
    padded = mask_BxP.shape[1]
    pattern = block_pattern(padded // blk, window_blocks=self.window_blocks,
                            num_random_blocks=self.num_random_blocks,
                            num_global_blocks=0 if etc else self.num_global_blocks,
                            seed=self.seed, layer_index=self.layer_index)
    start, stop = pattern.num_front * blk, padded - pattern.num_back * blk  # non-global rows
    if not etc:
      ends = lambda t: jnp.concatenate([t[:, :start], t[:, stop:]], axis=1)
      global_keys = (ends(k_BxPxHxK), ends(v_BxPxHxK), ends(mask_BxP))

    rng = self.attention_rng(deterministic)
    rngs = [None] * 3 if rng is None else list(jax.random.split(rng, 3))
    dense_rows = lambda q_BxGxHxK, rng: softmax_attention(
        q_BxGxHxK, k_BxPxHxK, v_BxPxHxK, mask_BxP, dropout_rng=rng,
        dropout_rate=self.dropout_rate)
    pieces = []
    if start:  # global query blocks at the start: dense over all keys (linear in L)
      pieces.append(dense_rows(q_BxPxHxK[:, :start], rngs[0]))
    if stop > start:
      pieces.append(sparse_rows(q_BxPxHxK, k_BxPxHxK, v_BxPxHxK, mask_BxP, global_keys,
                                pattern, blk, dropout_rng=rngs[1],
                                dropout_rate=self.dropout_rate))
    if stop < padded:  # global query blocks at the end
      pieces.append(dense_rows(q_BxPxHxK[:, stop:], rngs[2]))
    y_BxLxHxK = jnp.concatenate(pieces, axis=1)[:, :length]
    return OutputProjection(dim, self.dtype)(y_BxLxHxK)
