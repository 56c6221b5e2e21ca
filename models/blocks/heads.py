"""The heads of fla's layers (RetNet, GLA): their key and value widths from expand_k and
expand_v, and the projection of a width-D input to them."""
from __future__ import annotations

import flax.linen as nn

from lra import rules as s
from lra.models.blocks.init import fla_init


def head_dims(width: int, heads: int, expand_k: float, expand_v: float) -> tuple[int, int]:
  """(K, V) per head: int(width * expand) channels split over the heads; a setting that
  leaves no whole head is a one-line SettingError."""
  sizes = []
  for name, expand in (("expand_k", expand_k), ("expand_v", expand_v)):
    channels = int(width * expand)
    if channels < heads or channels % heads:
      s.fail(s.attention_key(name), expand,
             f"int(width {width} * {name}) = {channels} channels must be a positive multiple "
             f"of config.model.num_heads={heads}")
    sizes.append(channels // heads)
  return sizes[0], sizes[1]


def heads_projection(heads: int, size: int, dtype: str, name: str, bias: bool = False):
  """Dense BxLxD -> BxLxHxsize (fla's nn.Linear then split into heads), fla's N(0, 0.02)."""
  return nn.DenseGeneral((heads, size), use_bias=bias, dtype=dtype, kernel_init=fla_init,
                         name=name)
