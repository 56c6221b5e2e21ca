"""Transformer-XL (Dai et al. 2019) as an encoder for long inputs.

Transformer-XL reads a long sequence in segments of `segment_len` tokens. Layer l on segment s
attends over [memory; h_s], where the memory is the output of layer l-1 on the previous
`mem_len` positions, cached with no gradient (the paper's SG(h^{l-1}_{s-1})). Positions are
relative: the logit of query i and key j is the paper's four terms

    A_ij = q_i.k_j (a) + q_i.W_R R_{i-j} (b) + u.k_j (c) + v.W_R R_{i-j} (d),

scaled by 1/sqrt(head dim), with R sinusoidal, W_R a learned projection of each layer and u, v
a content and a position bias per head. As in the paper's code u and v are shared by all layers
(owned by the encoder through registry.make_shared); `untie_biases=True` gives each layer its
own.

Computed in parallel, not segment by segment: the shared encoder runs layer by layer over the
whole sequence, so layer l already holds h^{l-1} for every segment, which is exactly what the
recurrence would have cached. Every segment's queries therefore attend at once to the keys of
positions [sS - M, sS + S): the first M are projected from stop_gradient(h^{l-1}) (no gradient
into the cache, as in the paper), the other S from h^{l-1} itself. Time and memory
O(L (S + M)), never L x L. The position term (b)+(d) is computed once per relative distance,
S x (2S + M - 1) per segment, and moved into place with the relative-shift (skew) trick.

Differences from the paper, on purpose:
- Not causal. LRA classifies; it does not predict the next token, so a query sees its whole
  segment as well as the memory. Relative distances i - j then range over [-(S-1), S+M-1];
  the sinusoids are defined for negative distances too.
- The mixer sits inside a pre-LayerNorm block, so the cache is the LayerNorm'd h^{l-1}: that
  LayerNorm's scale and bias get no gradient through the memory (the values are the same).
- With CLS pooling the classifier would read position 0, which attends to the first segment
  only (memory flows forward), so it would ignore the rest of the input. The task configs
  therefore use MEAN pooling without a CLS token, and no absolute positions (the mixer's
  ENCODER_SETTINGS).

Padded keys get no weight, in the memory too. An input whose length is not a multiple of the
segment length is padded internally; an input no longer than one segment is one segment.
LRA lengths are 1K-16K: the default segment of 256 with a memory of 256 lets each query see
256 to 512 keys (a 1K input is 4-5 segments, 4K is 16) and reaches l x 256 positions back
after l layers.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.ops.blocked import pad_to_blocks, to_blocks
from lra.models.common import (HeadsMixer, MASK_VALUE, OutputProjection, QKVProjection,
                           masked_softmax)
from lra.models.registry import register

_BIAS_INIT = nn.initializers.normal(stddev=0.02)  # the paper's code: init_std 0.02


def relative_encodings(distances_W: np.ndarray, dim: int) -> np.ndarray:
  """Sinusoidal encodings R_d of (possibly negative) relative distances d, W x dim.

  As in the paper's code: [sin(d f), cos(d f)] with f = 10000^(-2m/dim), m < dim/2.
  """
  inv_freq = 1.0 / (10000.0 ** (np.arange(0, dim, 2) / dim))
  angles_WxF = distances_W.astype(np.float64)[:, None] * inv_freq[None, :]
  table = np.concatenate([np.sin(angles_WxF), np.cos(angles_WxF)], axis=-1)[:, :dim]
  return table.astype(np.float32)


def relative_shift(p_BxNxHxSxW, mem_len: int):
  """Moves per-distance scores into per-key columns: BxNxHxSxW -> BxNxHxSx(S+M).

  Column c of the input holds distance S+M-1-c (W = 2S+M-1 of them); output [i, j] is key j
  of [memory; segment] for query i, whose distance is M+i-j, i.e. input column j+S-1-i. Row i
  is shifted left by S-1-i: pad one column, flatten the rows, drop S-1 entries, and the
  row length W+1 -> W takes away one more entry per row (the skew trick, no gather).
  """
  *lead, seg, width = p_BxNxHxSxW.shape
  padded = jnp.pad(p_BxNxHxSxW, [(0, 0)] * len(lead) + [(0, 0), (0, 1)])
  flat = padded.reshape(*lead, seg * (width + 1))[..., seg - 1: seg - 1 + seg * width]
  return flat.reshape(*lead, seg, width)[..., : seg + mem_len]


def _memory(x_BxNxSx___, mem_len: int, fill):
  """For every segment n, the mem_len positions before it: BxNxMx... (`fill` before 0)."""
  batch, num, seg = x_BxNxSx___.shape[:3]
  back = -(-mem_len // seg)  # whole segments the memory reaches back
  widths = [(0, 0), (back, 0)] + [(0, 0)] * (x_BxNxSx___.ndim - 2)
  padded = jnp.pad(x_BxNxSx___, widths, constant_values=fill)
  # Segments n-back .. n-1 side by side, then their last mem_len positions.
  window = jnp.concatenate([padded[:, c: c + num] for c in range(back)], axis=2)
  return window[:, :, back * seg - mem_len:]


class RelativeBiases(nn.Module):
  """The content bias u and the position bias v (HxK each)."""
  num_heads: int
  head_dim: int

  @nn.compact
  def __call__(self):
    shape = (self.num_heads, self.head_dim)
    return self.param("u", _BIAS_INIT, shape), self.param("v", _BIAS_INIT, shape)


@register("transformer_xl")
class TransformerXLAttention(HeadsMixer):
  """Segment-level attention over [cached memory; segment] with relative positions."""
  segment_len: int = s.setting(256, s.Int(1), "S: tokens per segment (see the module docstring)")
  mem_len: int = s.setting(-1, s.Int(-1),
                           "M: cached positions before each segment; -1: same as segment_len")
  untie_biases: bool = s.setting(False, s.Bool(),
                                 "u, v per layer instead of shared by all layers (the paper)")
  shared: RelativeBiases | None = None  # the encoder's u, v, given unless untie_biases

  SUBQUADRATIC = True
  # Relative positions only; MEAN pooling, so no CLS token either (a CLS token at position 0
  # would see only itself and add its vector to the mean).
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    self.refuse_rotary("it encodes relative positions itself")

  @classmethod
  def make_shared(cls, settings, *, num_heads, qkv_dim, **_):
    """Called by the encoder in its own scope: one u, v for all layers unless untied."""
    if settings.get("untie_biases", cls.untie_biases):
      return None
    return RelativeBiases(num_heads, qkv_dim // num_heads, name="relative_biases")

  def _biases(self, head_dim: int):
    if self.untie_biases:
      shape = (self.num_heads, head_dim)
      return self.param("u", _BIAS_INIT, shape), self.param("v", _BIAS_INIT, shape)
    if self.shared is None:
      raise ValueError("transformer_xl with untie_biases=False needs the encoder's shared "
                       "biases; build the mixer through models.Encoder or set untie_biases")
    return self.shared()

  def carried_state(self, width: int, length: int) -> int:
    """The keys and values a query reads: its segment S and the memory M before it (both as
    the layer caps them at this length), 2 x (S + M) x qkv_dim; the paper caches the memory
    as M hidden states of the layer below, projected to keys and values here too."""
    del width
    seg = min(self.segment_len, length)
    mem = self.segment_len if self.mem_len == -1 else self.mem_len
    mem = min(mem, (-(-length // seg) - 1) * seg)
    return 2 * (seg + mem) * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    batch, length, dim = x_BxLxD.shape
    # An input no longer than a segment is one segment of its own length (same result).
    seg = min(int(self.segment_len), length)
    num = -(-length // seg)
    mem = int(self.segment_len) if self.mem_len == -1 else int(self.mem_len)
    mem = min(mem, (num - 1) * seg)  # positions before 0 would all be masked anyway

    x_BxPxD, _ = pad_to_blocks(x_BxLxD, seg)
    keep_BxP, _ = pad_to_blocks(mask_BxL.astype(bool), seg, value=False)
    qkv = QKVProjection(self.num_heads, self.qkv_dim, self.dtype)
    q_BxPxHxK, k_BxPxHxK, v_BxPxHxK = qkv(x_BxPxD)
    head_dim = q_BxPxHxK.shape[-1]
    u_HxK, v_HxK = (b.astype(q_BxPxHxK.dtype) for b in self._biases(head_dim))

    q_BxNxSxHxK = to_blocks(q_BxPxHxK, seg)
    k_BxNxTxHxK, v_BxNxTxHxK = to_blocks(k_BxPxHxK, seg), to_blocks(v_BxPxHxK, seg)
    keep_BxNxT = to_blocks(keep_BxP, seg)
    if mem:
      # The cache: the same layer input with no gradient; this layer's W_k, W_v still learn
      # from it (as in the paper, where k = W_k [SG(memory); h]).
      _, km_BxPxHxK, vm_BxPxHxK = qkv(jax.lax.stop_gradient(x_BxPxD))
      k_BxNxTxHxK = jnp.concatenate(
          [_memory(to_blocks(km_BxPxHxK, seg), mem, 0), k_BxNxTxHxK], axis=2)
      v_BxNxTxHxK = jnp.concatenate(
          [_memory(to_blocks(vm_BxPxHxK, seg), mem, 0), v_BxNxTxHxK], axis=2)
      keep_BxNxT = jnp.concatenate([_memory(keep_BxNxT, mem, False), keep_BxNxT], axis=2)

    # W_R R_d for every distance d a segment needs, S+M-1 down to -(S-1).
    distances_W = seg + mem - 1 - np.arange(2 * seg + mem - 1)
    table_WxD = jnp.asarray(relative_encodings(distances_W, dim), self.dtype)
    r_WxHxK = nn.DenseGeneral((self.num_heads, head_dim), use_bias=False, dtype=self.dtype,
                              kernel_init=nn.initializers.xavier_uniform(),
                              name="relative_key")(table_WxD)

    # (a) + (c): (q + u).k ; (b) + (d): (q + v).W_R R, per distance, then shifted into place.
    qu_BxNxSxHxK = q_BxNxSxHxK + u_HxK[None, None, None]
    qv_BxNxSxHxK = q_BxNxSxHxK + v_HxK[None, None, None]
    content_BxNxHxSxT = jnp.einsum("bnshk,bnthk->bnhst", qu_BxNxSxHxK, k_BxNxTxHxK,
                                   preferred_element_type=jnp.float32)
    position_BxNxHxSxW = jnp.einsum("bnshk,whk->bnhsw", qv_BxNxSxHxK, r_WxHxK,
                                    preferred_element_type=jnp.float32)
    logits_BxNxHxSxT = (content_BxNxHxSxT + relative_shift(position_BxNxHxSxW, mem)) * (
        head_dim ** -0.5)
    allowed_BxNx1x1xT = keep_BxNxT[:, :, None, None, :]
    # For tests (free otherwise): the logits with masked keys at MASK_VALUE.
    self.sow("intermediates", "logits",
             jnp.where(allowed_BxNx1x1xT, logits_BxNxHxSxT, MASK_VALUE))
    weights_BxNxHxSxT = masked_softmax(logits_BxNxHxSxT, allowed_BxNx1x1xT,
                                       dropout_rng=self.attention_rng(deterministic),
                                       dropout_rate=self.dropout_rate)
    y_BxNxSxHxK = jnp.einsum("bnhst,bnthk->bnshk", weights_BxNxHxSxT.astype(v_BxNxTxHxK.dtype),
                             v_BxNxTxHxK)
    y_BxPxHxK = y_BxNxSxHxK.reshape(batch, num * seg, self.num_heads, head_dim)
    return OutputProjection(dim, self.dtype)(y_BxPxHxK[:, :length])
