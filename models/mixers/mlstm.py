"""mLSTM (Beck et al. 2024, "xLSTM: Extended Long Short-Term Memory"): the matrix-memory LSTM
with exponential gating, as a token mixer.

The cell (the paper's eqs. 19-27, stabilised as in its appendix), per head, q, k, v of width K:
    m_t = max(log f_t + m_{t-1}, i_t)                 the stabiliser
    C_t = f'_t C_{t-1} + i'_t k_t v_t^T / sqrt(K)      f'_t = exp(log f_t + m_{t-1} - m_t),
    n_t = f'_t n_{t-1} + i'_t k_t / sqrt(K)            i'_t = exp(i_t - m_t)
    h_t = C_t^T q_t / max(|n_t . q_t|, exp(-m_t))
with log f_t = logsigmoid(fgate preact) and i_t the igate pre-activation (exp(i_t) the input
gate), one scalar of each per head and position. This is the core's scalar decay with an
exponential write gate (models/ops/matrix_recurrence.py): log_decay = logsigmoid(fgate),
log_write = igate; v gets an extra all-ones column, whose output is n_t . q_t; the core
returns both scaled by exp(-m_t), and h = o / (max(|den|, exp(-m)) + eps) in the `finish`
callback, where the scale cancels: the result does not depend on which stabiliser is used
(up to xLSTM's eps = 1e-6 on the denominator, which xLSTM adds in the same stabilised units).

The layer is xLSTM's mLSTMLayer (NX-AI/xlstm, xlstm/blocks/mlstm/layer.py and cell.py), with
D the input width and E = proj_factor D inner channels, H = num_heads heads of K = E / H:
    x, z   = proj_up(h)                       D -> 2E, no bias
    c      = SiLU(conv(x))                    depthwise causal conv, kernel conv_kernel, bias
    q, k   = headwise(c), v = headwise(x)     block-diagonal E -> E, blocks of qkv_blocksize
    i, f   = igate(q, k, v), fgate(q, k, v)   3E -> H each, with bias
    h      = the cell above, then a layer norm per head (weight, no bias, eps 1e-5)
    out    = proj_down((h + skip * c) * SiLU(z))   learnable skip per channel, E -> D, no bias
Negative eigenvalues (setting `allow_neg_eigval`, off by default; Grazzi et al. 2025): the
forget gate f = sigmoid(fgate) in (0, 1) becomes 2 f - 1 = tanh(fgate / 2) in (-1, 1). Their
code has no mLSTM variant (their mLSTM runs are xLSTM's, unchanged); this is their rule for a
decay in (0, 1), a -> 2a - 1 (their Mamba's and GLA's), carried to mLSTM's forget gate. The
core takes log|2 f - 1| and its sign (models/ops/signed.py); the stabiliser m bounds
magnitudes, so it runs on log|2 f - 1| as it ran on log f, and the normaliser n takes the
signs as C does.

Initialisation (xLSTM's): proj_up and the headwise q, k, v N(0, 2 / (5 D)) (small init, with
the input width D); proj_down N(0, (2 / num_layers / sqrt(D))^2) (Wang init, num_blocks =
the encoder's depth); igate and fgate weights 0, fgate bias linspace(3, 6) over the heads
(a forget gate near 1), igate bias N(0, 0.1^2); skip 1; norm weight 1 (xLSTM stores it as
1 + w, w = 0); the conv PyTorch's default (uniform in +-1/sqrt(kernel)).

Deviations: E = proj_factor x D exactly (xLSTM rounds E up to a multiple of 64: the same for
D a multiple of 32); the encoder's qkv_dim is not used (the heads split E, as in xLSTM); the
layer's dropout after proj_down is left to the encoder's residual dropout.

Bidirectional (setting): the core's two passes with the same projections and gates, each
normalised by its own n and m (the `finish` callback), averaged before the head norm.
Padding: the input is zeroed at padded positions before the conv (ShortConv), and padded
positions neither decay nor write the state (the core), so real outputs equal those of the
truncated sequence. No attention weights, no dropout inside (ATTENTION_DROPOUT = False).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.blocks.short_conv import ShortConv
from lra.models.ops.signed import extended
from lra.models.registry import register

EPS = 1e-6  # xLSTM's eps on the normaliser
NORM_EPS = 1e-5  # xLSTM's MultiHeadLayerNorm (a group norm, one group per head)
FGATE_BIAS = (3.0, 6.0)  # xLSTM's linspace init of the forget gate's bias
IGATE_BIAS_STD = 0.1


def normal(std: float):
  return nn.initializers.normal(stddev=std)


class Headwise(nn.Module):
  """xLSTM's LinearHeadwiseExpand without bias: E channels in blocks of `block`, each block
  mapped by its own block x block matrix (block-diagonal E -> E)."""
  block: int
  std: float
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxE):
    channels = x_BxLxE.shape[-1]
    w_NxOxI = self.param("kernel", normal(self.std),
                         (channels // self.block, self.block, self.block))
    x_BxLxNxI = x_BxLxE.astype(self.dtype).reshape(x_BxLxE.shape[:-1] + (-1, self.block))
    y_BxLxNxO = jnp.einsum("blni,noi->blno", x_BxLxNxI, w_NxOxI.astype(self.dtype))
    return y_BxLxNxO.reshape(x_BxLxE.shape)


def normalised(o_BxLxHxK1, m_BxLxH):
  """h = o / (max(|n . q|, exp(-m)) + eps): the cell's output from the core's scaled
  numerator (the first K channels) and denominator (the last, from the ones column)."""
  num_BxLxHxK, den_BxLxH = o_BxLxHxK1[..., :-1], o_BxLxHxK1[..., -1]
  scale_BxLxH = jnp.maximum(jnp.abs(den_BxLxH), jnp.exp(-m_BxLxH)) + EPS
  return num_BxLxHxK / scale_BxLxH[..., None]


def head_layer_norm(h_BxLxHxK, weight_HxK):
  """Layer norm over each head's K channels, a weight per channel, no bias (xLSTM's
  MultiHeadLayerNorm)."""
  mean = jnp.mean(h_BxLxHxK, axis=-1, keepdims=True)
  centred = h_BxLxHxK - mean
  var = jnp.mean(centred * centred, axis=-1, keepdims=True)
  return centred * jax.lax.rsqrt(var + NORM_EPS) * weight_HxK[None, None]


@register("mlstm")
class MLSTM(RecurrentMixer):
  """xLSTM's mLSTM layer: up-projection, conv + SiLU, headwise q, k, v, exponential input and
  sigmoid forget gates, the stabilised matrix memory, head norm, skip, SiLU(z) gate,
  down-projection (see the module docstring)."""
  proj_factor: int = s.setting(2, s.Int(1), "E = proj_factor x D inner channels")
  conv_kernel: int = s.setting(4, s.Int(1), "the causal depthwise conv's kernel (xLSTM's 4)")
  qkv_blocksize: int = s.setting(4, s.Int(1), "block size of the block-diagonal q, k, v "
                                 "projections (xLSTM's qkv_proj_blocksize)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "the forget gate f becomes 2 f - 1, in "
                                     "(-1, 1) (Grazzi et al. 2025's rule)")
  num_layers: int = 1  # the encoder's depth: proj_down's Wang init

  def check_width(self, width: int) -> int:
    """E for a D = `width` input, or a one-line SettingError when E does not split."""
    inner = self.proj_factor * width
    for key, value in ((s.model_key("num_heads"), self.num_heads),
                       (s.attention_key("qkv_blocksize"), self.qkv_blocksize)):
      if inner % value:
        s.fail(key, value, f"a divisor of the inner width proj_factor x width = {inner}")
    return inner

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, K + 1): the state's values are v and the ones column whose output is n . q."""
    key = self.check_width(width) // self.num_heads
    return self.num_heads, key, key + 1

  def carried_state(self, width: int, length: int) -> int:
    """C (K x K) and n (K) per head, the core's K x (K + 1) state, and m (1), per direction
    (the conv's window not counted)."""
    return super().carried_state(width, length) + self.directions * self.num_heads

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    heads, key, _ = self.head_sizes(width)
    inner = heads * key
    f32 = lambda a: a.astype(jnp.float32)
    small = normal(np.sqrt(2 / (5 * width)))
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    up_BxLx2E = nn.Dense(2 * inner, use_bias=False, dtype=self.dtype, kernel_init=small,
                         name="proj_up")(h_BxLxD)
    x_BxLxE, z_BxLxE = jnp.split(up_BxLx2E, 2, axis=-1)
    c_BxLxE = ShortConv(self.conv_kernel, bias=True, activation=True, name="conv")(
        x_BxLxE, mask_BxL)
    headwise = lambda name: Headwise(self.qkv_blocksize, np.sqrt(2 / (5 * width)), self.dtype,
                                     name=name)
    q_BxLxE = f32(headwise("q_proj")(c_BxLxE))
    k_BxLxE = f32(headwise("k_proj")(c_BxLxE))
    v_BxLxE = f32(headwise("v_proj")(x_BxLxE))
    # Stacked, not concatenated: no B x L x 3E array (3E may pass the sequence length).
    qkv_BxLx3xE = jnp.stack([q_BxLxE, k_BxLxE, v_BxLxE], axis=2)
    fgate_bias = lambda _, shape, dtype=jnp.float32: jnp.linspace(*FGATE_BIAS, shape[0],
                                                                  dtype=dtype)

    def gate(name, bias_init):  # xLSTM's Linear(3E -> H) over cat(q, k, v)
      w_3xExH = self.param(name + "_kernel", nn.initializers.zeros, (3, inner, heads))
      b_H = self.param(name + "_bias", bias_init, (heads,))
      return jnp.einsum("blse,seh->blh", qkv_BxLx3xE, w_3xExH) + b_H[None, None]

    i_BxLxH = gate("igate", normal(IGATE_BIAS_STD))
    f_BxLxH = gate("fgate", fgate_bias)
    split = lambda a: a.reshape(a.shape[:2] + (heads, key))
    ones_BxLxHx1 = jnp.ones(x_BxLxD.shape[:2] + (heads, 1), jnp.float32)
    v_BxLxHxK1 = jnp.concatenate([split(v_BxLxE), ones_BxLxHx1], axis=-1)  # n's column
    decay = dict(log_decay=jax.nn.log_sigmoid(f_BxLxH))
    if self.allow_neg_eigval:  # 2 f - 1: its log magnitude and sign
      decay = dict(zip(("log_decay", "negative"), extended(decay["log_decay"])))
    h_BxLxHxK = self.run(split(q_BxLxE), split(k_BxLxE) * key ** -0.5, v_BxLxHxK1, mask_BxL,
                         finish=normalised, log_write=i_BxLxH, **decay)
    weight_HxK = self.param("outnorm", nn.initializers.ones, (heads, key))
    h_BxLxE = head_layer_norm(h_BxLxHxK, weight_HxK).reshape(h_BxLxHxK.shape[:2] + (inner,))
    skip_E = self.param("learnable_skip", nn.initializers.ones, (inner,))
    h_BxLxE = (h_BxLxE + skip_E[None, None] * c_BxLxE) * jax.nn.silu(f32(z_BxLxE))
    down = normal(2 / self.num_layers / np.sqrt(width))
    return nn.Dense(width, use_bias=False, dtype=self.dtype, kernel_init=down,
                    name="proj_down")(h_BxLxE.astype(self.dtype))
