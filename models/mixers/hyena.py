"""Hyena (Poli et al. 2023, "Hyena Hierarchy: Towards Larger Convolutional Language Models"):
the order-2 Hyena operator as a token mixer, as HazyResearch/zoology's `Hyena` mixer (read at
commit d88d6f5: zoology/mixers/hyena.py, the model of Zoology's Figure 2).

The operator, with D = the input width and u the block's input:
    x1, x2, v = short_conv(in_proj(u))     in_proj D -> 3D with bias; a depthwise causal conv
                                           of kernel `short_filter_order` with bias over the
                                           3D channels (Zoology's Conv1d, padding K - 1, cut)
    y         = x2 * (h * (x1 v) + b x1 v)  "*" the long convolution over the whole sequence
                                           with the implicit filter h (one per channel), by
                                           FFT over 2L points (zero padding: no wrap-around);
                                           b a per-channel skip (Zoology's Filter.bias)
    out       = out_proj(y)                D -> D with bias
The implicit filter, one value per channel d and offset n = 0 .. L-1 (Zoology's Filter):
    z_n = [t_n, cos(f_j w_n), -sin(f_j w_n)]   t_n = n / (l_max - 1), w_n = 2 pi n / l_max,
                                           f_j = linspace(1e-4, B - 1, B), B = (emb_dim - 1)/2
    h_n = FFN(z_n) exp(-t_n |delta_d|)     FFN: Dense(emb_dim -> order), sin(freq .), then
                                           num_inner_mlps x [Dense(order -> order), sin(freq .)],
                                           Dense(order -> D, no bias); one sin frequency vector
                                           (order) for every layer (Zoology's one Sin module)
    delta_d = linspace(ln(1e-2) / 1.5, ln(1e-2) / 0.3, D), fixed (Zoology's buffer).
The table z (l_max x emb_dim) is a parameter, initialised as above: Zoology registers it with
lr 1e-5, a tag its trainer never reads, so it trains at the global rate, as here.

Length: the filter is made for the array's length L from z[:L] and t_n with the fixed l_max,
so its value at an offset never depends on L (nor on where padding starts). A longest
sequence above l_max is refused (`check_length`), as Zoology asserts it; Figure 2 sets l_max to
the input length, so a config sets l_max = max_len (+1 with a CLS token).

causal (setting, default False: every task here reads non-causally, LRA's and MQAR's alike, as
Based's default; True is the authors' causal form, as Zoology's Figure 2 runs it). False, the
filter is two-sided as HazyResearch/m2
builds its bidirectional Hyena (M2-BERT, bert/src/mm/hyena_utils.py HyenaFilter): a second FFN
(`filter_rev`; the sin frequencies, z, the decay and b shared) gives k_rev, and position t
reads s <= t through h[t - s] and s > t through k_rev[s - t - 1]: one FFT convolution with
the 2L-point kernel [h, reversed k_rev] (s4d.fft_convolve). A filter over signed offsets,
each side learned on its own and the present counted once, from the authors' group's own
non-causal Hyena rather than two averaged causal passes. The short conv stays causal in both
(as in Zoology and M2).

Padding: in_proj's output is zeroed at padded positions before the short conv, and x1 v before
the long one, so a padded position reads as the zeros past either end of a sequence. LRA pads
at the end: the causal parts never read later positions, the two-sided filter reads zeros
there, as the FFT's zero padding past the end of the truncated sequence; the filter depends on
the offset only. Real outputs therefore equal those of the truncated sequence.

Initialisation (Zoology's model.py `_init_weights`, which reaches every nn.Linear of the model,
the filter FFN's included): weights N(0, 0.02), biases 0, out_proj N(0, 0.02 / sqrt(2 n_layers));
the short conv PyTorch's Conv1d default (uniform in +-1/sqrt(K), weight and bias); b N(0, 1);
the sin frequencies `filter_freq` (Zoology's w, 1).

Not built (Figure 2 leaves them at their defaults): heads and blocks (Zoology's num_heads,
num_blocks: 1), the dropout on x1 v (0; attention_dropout_rate > 0 is refused), filter
dropout (Zoology does not implement it either), normalized and linear_mixer filters, the
decay's shift and percentages (fixed at Zoology's 0, 0.3, 1.5, target 1e-2), return_state.
Zoology's own `bidirectional` flag calls a filter_rev its Filter lacks: `causal` replaces it.
Optimiser: Zoology trains every parameter with one AdamW, weight decay included (Safari's
per-parameter lr / wd tags are not read): no OPTIMIZER_GROUP. Dtypes: the projections in the
compute dtype; the convolutions, the filter and the gates in float32.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import symmetric_uniform
from lra.models.common import Mixer
from lra.models.ops.convolution import causal_depthwise_conv, fft_convolve
from lra.models.registry import register

INIT_STD = 0.02  # Zoology's initializer_range
DECAY_TARGET, FAST_DECAY, SLOW_DECAY = 1e-2, 0.3, 1.5  # ExponentialModulation's defaults


def positional_table(l_max: int, emb_dim: int) -> np.ndarray:
  """z (l_max x emb_dim): [t, cos(f w), -sin(f w)] at each offset, Zoology's
  PositionalEmbedding (t = n / (l_max - 1), w = 2 pi n / l_max, B = (emb_dim - 1) / 2 bands)."""
  n = np.arange(l_max, dtype=np.float64)[:, None]
  bands = (emb_dim - 1) // 2
  f = np.linspace(1e-4, bands - 1, bands)[None, :]
  angle = 2 * np.pi * n / l_max * f
  return np.concatenate([n / (l_max - 1), np.cos(angle), -np.sin(angle)], 1).astype(np.float32)


def decay_rates(width: int) -> np.ndarray:
  """|delta_d| (D): channel d's filter decays as exp(-t |delta_d|), to 1e-2 at t = 1.5 (the
  slowest) to t = 0.3 (the fastest)."""
  target = math.log(DECAY_TARGET)
  return np.abs(np.linspace(target / SLOW_DECAY, target / FAST_DECAY, width)).astype(np.float32)


class FilterFFN(nn.Module):
  """z (L x emb_dim) -> L x width: Dense, sin(freq .), inner x [Dense, sin(freq .)], Dense
  without bias; weights N(0, 0.02), biases 0 (Zoology's _init_weights)."""
  order: int
  width: int
  inner: int

  @nn.compact
  def __call__(self, z_LxE, freq_O):
    normal = nn.initializers.normal(INIT_STD)
    h_LxO = z_LxE
    for i in range(self.inner + 1):
      h_LxO = jnp.sin(freq_O[None, :] * nn.Dense(self.order, kernel_init=normal,
                                                 name=f"dense_{i}")(h_LxO))
    return nn.Dense(self.width, use_bias=False, kernel_init=normal, name="out")(h_LxO)


@register("hyena")
class Hyena(Mixer):
  """Order-2 Hyena: in_proj to (x1, x2, v), short causal conv, y = x2 (h * (x1 v) + b x1 v)
  with an implicit long filter h applied by FFT, out_proj (see the module docstring)."""
  l_max: int = s.setting(1024, s.Int(2), "the filter's time scale, t = offset / (l_max - 1), "
                         "and the longest sequence (Zoology's l_max; Figure 2: the input "
                         "length)")
  filter_order: int = s.setting(64, s.Int(1), "width of the implicit filter's FFN")
  emb_dim: int = s.setting(3, s.Int(3), "odd: the filter's positional input, t and "
                           "(emb_dim - 1) / 2 cosine-sine bands")
  num_inner_mlps: int = s.setting(2, s.Int(0), "hidden order x order layers of the FFN")
  filter_freq: float = s.setting(1.0, s.Float(0.0, open="low"),
                                 "initial frequency of the FFN's sin activations (Zoology's w)")
  short_filter_order: int = s.setting(3, s.Int(1), "kernel of the short depthwise causal conv")
  modulate: bool = s.setting(True, s.Bool(), "multiply the filter by its exponential decay")
  causal: bool = s.setting(False, s.Bool(), "True: the authors' causal filter; False: "
                           "two-sided (M2's bidirectional Hyena: a second FFN for later "
                           "positions)")
  num_layers: int = 1  # the encoder's depth (filled in): out_proj starts / sqrt(2 num_layers)

  # The filter is generated per offset and applied by FFT: no L x L array.
  SUBQUADRATIC = True
  # No attention weights; Zoology's dropout on x1 v (0 in Figure 2) is not built.
  ATTENTION_DROPOUT = False
  # No absolute positions (Zoology's Figure 2 gives the non-attention mixers none: the filters
  # encode order) and mean pooling without a CLS token (a causal filter gives a CLS token at
  # position 0 nothing to read), as for Mamba.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    if self.emb_dim % 2 == 0:
      s.fail(s.attention_key("emb_dim"), self.emb_dim, "an odd number >= 3 (t, then a cosine "
             "and a sine per band)")

  def causal_reading(self) -> str | None:
    return f"{s.attention_key('causal')}=True" if self.causal else None  # the convs are causal

  def check_length(self, length: int) -> None:
    if length > self.l_max:
      s.fail(s.attention_key("l_max"), self.l_max, f"at least the longest sequence, {length} "
             "(CLS token included): the filter's table has l_max offsets")

  def carried_state(self, width: int, length: int) -> int:
    """Zoology's count (Hyena.state_size: d_model x L): the long convolution's window of
    inputs x1 v, D x L, per direction (the short conv's window not counted)."""
    return (1 if self.causal else 2) * width * length

  def filters(self, width: int, length: int):
    """(h, k_rev or None), each L x D in float32: the implicit filters at offsets 0..L-1."""
    z_LxE = self.param("pos_emb", lambda *_: jnp.asarray(
        positional_table(self.l_max, self.emb_dim)))[:length]
    freq_O = self.param("sin_freq", nn.initializers.constant(self.filter_freq),
                        (self.filter_order,))
    decay_LxD = jnp.ones((length, width), jnp.float32)
    if self.modulate:
      t_L = jnp.arange(length, dtype=jnp.float32) / (self.l_max - 1)
      decay_LxD = jnp.exp(-t_L[:, None] * jnp.asarray(decay_rates(width))[None, :])
    ffn = lambda name: FilterFFN(self.filter_order, width, self.num_inner_mlps, name=name)
    h_LxD = ffn("filter")(z_LxE, freq_O) * decay_LxD
    if self.causal:
      return h_LxD, None
    return h_LxD, ffn("filter_rev")(z_LxE, freq_O) * decay_LxD

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width, length = x_BxLxD.shape[-1], x_BxLxD.shape[1]
    if length > self.l_max:
      raise ValueError(f"input length {length} exceeds l_max {self.l_max}")
    keep_BxLx1 = mask_BxL.astype(bool)[..., None]
    normal = nn.initializers.normal(INIT_STD)
    u_BxLx3D = nn.Dense(3 * width, dtype=self.dtype, kernel_init=normal,
                        name="in_proj")(x_BxLxD.astype(self.dtype))
    u_BxLx3D = jnp.where(keep_BxLx1, u_BxLx3D.astype(jnp.float32), 0.0)
    conv_init = symmetric_uniform(1 / np.sqrt(self.short_filter_order))  # fan_in = K
    w_Kx3D = self.param("short_conv_weight", conv_init, (self.short_filter_order, 3 * width))
    b_3D = self.param("short_conv_bias", conv_init, (3 * width,))
    uc_BxLx3D = causal_depthwise_conv(u_BxLx3D, w_Kx3D, b_3D)
    x1_BxLxD, x2_BxLxD, v_BxLxD = jnp.split(uc_BxLx3D, 3, axis=-1)
    xv_BxLxD = jnp.where(keep_BxLx1, x1_BxLxD * v_BxLxD, 0.0)  # pre-gating
    h_LxD, k_rev_LxD = self.filters(width, length)
    skip_D = self.param("skip", nn.initializers.normal(1.0), (width,))
    y_BxLxD = fft_convolve(xv_BxLxD, h_LxD, k_rev_LxD) + xv_BxLxD * skip_D[None, None, :]
    y_BxLxD = x2_BxLxD * y_BxLxD  # post-gating
    out_init = nn.initializers.normal(INIT_STD / np.sqrt(2 * self.num_layers))
    return nn.Dense(width, dtype=self.dtype, kernel_init=out_init,
                    name="out_proj")(y_BxLxD.astype(self.dtype))
