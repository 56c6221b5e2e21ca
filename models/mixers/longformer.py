"""Longformer attention (Beltagy et al. 2020): a (dilated) sliding window plus global tokens.

Computed sparsely, O(L * (w + g)) time and memory for window w and g global tokens:
- the window: the sequence is cut into blocks of b = w/2 queries; each block attends to its own
  and its two neighbouring key blocks (3b keys) under a b x 3b relative-position band mask. A
  head with dilation d works on the d interleaved sub-sequences i = m*d + r, in each of which
  the dilated window (j = i + d*t, |t| <= w/2) is a plain window;
- the g global keys are appended to every query's key set (one softmax over window and global
  keys; a global key inside the window is counted once, in the appended set);
- the g global queries' rows are computed densely over all L keys (g x L).
No L x L matrix or mask exists anywhere.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.ops.blocked import attend, gather_blocks, pad_to_blocks, to_blocks
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, softmax_attention
from lra.models.registry import register


def layer_window(window: int, growth: float, layer_index: int) -> int:
  """Window of layer `layer_index`: window * growth**layer_index to the nearest even number >= 2."""
  return max(2, 2 * round(window * growth ** layer_index / 2))


def _band_mask(block: int) -> np.ndarray:
  """b x 3b: query qi of a block may see gathered key slot s (blocks n-1, n, n+1) iff |j-i| <= b."""
  rel_bx3b = np.arange(3 * block)[None, :] - block - np.arange(block)[:, None]
  return np.abs(rel_bx3b) <= block


def _in_range_mask(num_blocks: int, block: int) -> np.ndarray:
  """N x 3b: False for the slots of the wrapped-around neighbours of the first and last block."""
  pos_Nx3b = (np.arange(num_blocks)[:, None] - 1) * block + np.arange(3 * block)[None, :]
  return (pos_Nx3b >= 0) & (pos_Nx3b < num_blocks * block)


def dilated_window_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, window_key_BxL, kg_BxGxHxK,
                             vg_BxGxHxK, global_key_BxG, *, dilation: int, half: int,
                             dropout_rng=None, dropout_rate: float = 0.0):
  """Each query attends to keys i + dilation*t (|t| <= half) allowed by `window_key` plus the G
  global keys allowed by `global_key`, in one softmax. Returns BxLxHxK."""
  batch, length = q_BxLxHxK.shape[:2]
  # A reach past the end of a sub-sequence only adds padding, so clip it: short inputs then
  # need not be padded up to a 512-token window.
  sub_length = -(-length // dilation)
  block = max(1, min(half, sub_length - 1))

  def split(x_BxLx___, value=0):
    """Pads to whole blocks per sub-sequence; BxLx... -> SxMx... with S = B*d, i = m*d + r."""
    x_BxPx___, _ = pad_to_blocks(x_BxLx___, dilation * block, value)
    m = x_BxPx___.shape[1] // dilation
    x_BxMxdx___ = x_BxPx___.reshape(batch, m, dilation, *x_BxPx___.shape[2:])
    x_Bxdx___ = jnp.moveaxis(x_BxMxdx___, 2, 1)
    return x_Bxdx___.reshape(batch * dilation, m, *x_BxPx___.shape[2:])

  q_SxNxbxHxK = to_blocks(split(q_BxLxHxK), block)
  num_blocks = q_SxNxbxHxK.shape[1]
  index_Nx3 = (np.arange(num_blocks)[:, None] + np.arange(-1, 2)[None, :]) % num_blocks
  k_SxNxWxHxK = gather_blocks(to_blocks(split(k_BxLxHxK), block), index_Nx3)
  v_SxNxWxHxK = gather_blocks(to_blocks(split(v_BxLxHxK), block), index_Nx3)
  key_SxNxW = gather_blocks(to_blocks(split(window_key_BxL, False), block), index_Nx3)
  allowed_SxNxbxW = (jnp.asarray(_band_mask(block))[None, None]
                     & jnp.asarray(_in_range_mask(num_blocks, block))[None, :, None, :]
                     & key_SxNxW[:, :, None, :])

  num_global = kg_BxGxHxK.shape[1]
  if num_global:
    # Every sub-sequence of a batch row sees the same global keys (S index = b*d + r).
    s, n = allowed_SxNxbxW.shape[:2]
    tile = lambda x_BxGx___: jnp.broadcast_to(
        jnp.repeat(x_BxGx___, dilation, axis=0)[:, None],
        (s, n) + x_BxGx___.shape[1:])
    k_SxNxWxHxK = jnp.concatenate([k_SxNxWxHxK, tile(kg_BxGxHxK)], axis=2)
    v_SxNxWxHxK = jnp.concatenate([v_SxNxWxHxK, tile(vg_BxGxHxK)], axis=2)
    gkey_SxNxbxG = jnp.broadcast_to(
        jnp.repeat(global_key_BxG, dilation, axis=0)[:, None, None, :],
        (s, n, block, num_global))
    allowed_SxNxbxW = jnp.concatenate([allowed_SxNxbxW, gkey_SxNxbxG], axis=3)

  y_SxNxbxHxK = attend(q_SxNxbxHxK, k_SxNxWxHxK, v_SxNxWxHxK, allowed_SxNxbxW,
                       dropout_rng=dropout_rng, dropout_rate=dropout_rate)
  heads, head_dim = y_SxNxbxHxK.shape[-2:]
  y_BxdxMxHxK = y_SxNxbxHxK.reshape(batch, dilation, num_blocks * block, heads, head_dim)
  y_BxPxHxK = jnp.moveaxis(y_BxdxMxHxK, 1, 2).reshape(batch, -1, heads, head_dim)
  return y_BxPxHxK[:, :length]


@register("longformer")
class LongformerAttention(HeadsMixer):
  """Beltagy et al. 2020: sliding window (dilated per head) + symmetric global attention."""
  layer_index: int = 0
  window: int = s.setting(512, s.Int(2), "total span w: w/2 keys on each side (the LRA setting)")
  dilation: tuple[int, ...] = s.setting(
      (1,), s.Ints(1, scalar_ok=True), "the window's dilation: one value per head, or one for "
      "all heads (any other length is an error)")
  global_positions: tuple[int, ...] = s.setting(
      (0,), s.Ints(0, empty_ok=True), "tokens that attend to all tokens and are attended by "
      "all; 0 is the encoder's CLS token")
  separate_global_projections: bool = s.setting(
      True, s.Bool(), "the paper's separate Q_g, K_g, V_g for the global tokens' rows; False "
      "reuses the local ones")
  window_growth: float = s.setting(1.0, s.Float(0.0, open="low"),
                                   "layer k uses window * window_growth**k (even, >= 2)")

  SUBQUADRATIC = True

  def check_settings(self) -> None:
    super().check_settings()
    if self.window % 2:
      s.fail(s.attention_key("window"), self.window, "an even integer >= 2")
    if len(self._dilations()) not in (1, self.num_heads):
      s.fail(s.attention_key("dilation"), self.dilation,
             f"1 or config.model.num_heads={self.num_heads} values")

  def check_length(self, length: int) -> None:
    if any(p >= length for p in self.global_positions):
      s.fail(s.attention_key("global_positions"), self.global_positions,
             f"positions below the sequence length {length} (CLS token included)")

  def _dilations(self) -> tuple[int, ...]:
    return (self.dilation,) if s.is_int(self.dilation) else tuple(self.dilation)

  def head_dilations(self) -> tuple[int, ...]:
    dilation = self._dilations()
    return tuple(int(d) for d in (dilation * self.num_heads if len(dilation) == 1 else dilation))

  def checked_global_positions(self, length: int) -> tuple[int, ...]:
    positions = tuple(sorted(set(int(p) for p in self.global_positions)))
    if positions and positions[-1] >= length:  # an input shorter than the model's length
      raise ValueError(f"longformer global_positions {positions} must lie in [0, {length})")
    return positions

  def carried_state(self, width: int, length: int) -> int:
    """The keys and values a non-global query reads: this layer's window (w + 1 positions,
    dilated or not) and the global tokens, 2 x min(w + 1 + g, length) x qkv_dim. The global
    tokens' own rows read every key: not counted, as Zoology counts BigBird's."""
    del width
    window = layer_window(self.window, self.window_growth, self.layer_index)
    keys = min(window + 1 + len(set(self.global_positions)), length)
    return 2 * keys * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    length = x_BxLxD.shape[1]
    half = layer_window(self.window, self.window_growth, self.layer_index) // 2
    dilations = self.head_dilations()
    positions = self.checked_global_positions(length)
    global_G = np.asarray(positions, np.int32)

    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    groups = sorted(set(dilations))
    rngs = [None] * (len(groups) + 1)
    if not deterministic and self.dropout_rate > 0.0:
      rngs = list(jax.random.split(self.make_rng("dropout"), len(groups) + 1))

    # Global keys leave the window's key set: the appended global set counts them once.
    is_global_L = np.zeros(length, bool)
    is_global_L[global_G] = True
    window_key_BxL = mask_BxL & jnp.asarray(~is_global_L)[None, :]
    global_key_BxG = mask_BxL[:, global_G]

    # Heads with the same dilation share one pass; the results go back in head order.
    parts, order = [], []
    for d, rng in zip(groups, rngs):
      heads = np.asarray([h for h, dh in enumerate(dilations) if dh == d])
      pick = lambda t_BxTxHxK: t_BxTxHxK if len(groups) == 1 else t_BxTxHxK[:, :, heads]
      parts.append(dilated_window_attention(
          pick(q_BxLxHxK), pick(k_BxLxHxK), pick(v_BxLxHxK), window_key_BxL,
          pick(k_BxLxHxK[:, global_G]), pick(v_BxLxHxK[:, global_G]), global_key_BxG,
          dilation=d, half=half, dropout_rng=rng, dropout_rate=self.dropout_rate))
      order.extend(heads.tolist())
    y_BxLxHxK = jnp.concatenate(parts, axis=2) if len(parts) > 1 else parts[0]
    if len(parts) > 1:
      y_BxLxHxK = y_BxLxHxK[:, :, np.argsort(order)]

    if positions:
      # The global tokens' rows: dense over all L keys, replacing their window rows.
      if self.separate_global_projections:
        head_dim = self.qkv_dim // self.num_heads
        dense = lambda name: nn.DenseGeneral(
            (self.num_heads, head_dim), use_bias=False, dtype=self.dtype,
            kernel_init=nn.initializers.xavier_uniform(), name=name)
        qg_BxGxHxK = dense("query_global")(x_BxLxD[:, global_G])
        kg_BxLxHxK = dense("key_global")(x_BxLxD)
        vg_BxLxHxK = dense("value_global")(x_BxLxD)
      else:
        qg_BxGxHxK = q_BxLxHxK[:, global_G]
        kg_BxLxHxK, vg_BxLxHxK = k_BxLxHxK, v_BxLxHxK
      yg_BxGxHxK = softmax_attention(qg_BxGxHxK, kg_BxLxHxK, vg_BxLxHxK, mask_BxL,
                                     dropout_rng=rngs[-1], dropout_rate=self.dropout_rate)
      y_BxLxHxK = y_BxLxHxK.at[:, global_G].set(yg_BxGxHxK.astype(y_BxLxHxK.dtype))
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
