"""DeltaNet (Schlag et al. 2021, "Linear Transformers Are Secretly Fast Weight Programmers";
Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length"): linear attention whose state is written by the delta rule, as a token mixer.

The recurrence, per head, with S the K x V fast-weight state:
    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
        = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T      (replace what k_t retrieved)
    o_t = S_t^T q_t
beta_t in (0, 1) is the writing strength; with |k_t| = 1, (I - beta_t k_t k_t^T) has
eigenvalues 1 and 1 - beta_t, so the state stays bounded. This is the core's delta form
(models/matrix_recurrence.py: the UT / WY chunked form of Yang et al. 2024, with the
step-by-step recurrence as its reference).

The layer is flash-linear-attention's DeltaNet (fla/layers/delta_net.py, the authors' code, at
its defaults: expand_k = expand_v = 1, qk_activation silu, qk_norm l2, use_short_conv), with
D = the input width, H = num_heads (the encoder's) and K = V = D / H per head:
    q, k, v = SiLU(conv(q_proj(x))), SiLU(conv(k_proj(x))), SiLU(conv(v_proj(x)))
                              D -> H K each, no bias; each its own depthwise causal conv,
                              kernel `conv_kernel`, no bias (ShortConvolution)
    q, k    = q / |q|, k / |k|    per head (fla's l2norm: x / sqrt(sum x^2 + 1e-6))
    q       = q K^-1/2            (fla's kernels' default scale)
    beta    = sigmoid(b_proj(x))  D -> H, no bias (use_beta; else 1); x 2 with
                                  allow_neg_eigval (Grazzi et al. 2025: eigenvalues in (-1, 1))
    o       = the recurrence above
    out     = o_proj(RMSNorm(o))  RMS norm over each head's V channels, one weight of V shared
                                  by the heads, eps 1e-5; with use_gate (fla's default: off)
                                  RMSNorm(o) * SiLU(g_proj(x)), g_proj D -> H V, no bias
o_proj: H V -> D, no bias. GatedDeltaNet (models/gated_deltanet.py) shares this class's base.

Initialisation: the layer's own, PyTorch's defaults (uniform in +-1/sqrt(fan_in) for the
projections and the convs), norm weight 1. fla's language models (modeling_delta_net.py
_init_weights) redraw every linear and conv weight from N(0, 0.02) instead: a model-level
choice for large widths, not taken here (as for Mamba and HGRN2 in this code base).

Deviations: fla's other options (qk_activation relu / elu / identity, qk_norm sum, no short
conv, expand_k / expand_v != 1, conv bias) are not built. The heads come from the encoder's
num_heads (fla's num_heads, default 4 in the layer, 16 in its model config), not a head_dim
setting; the model width must split into them (a one-line error otherwise).

Bidirectional (setting): the core's two passes with the same q, k, v and beta (the short
convolutions stay causal), averaged before the norm (models/recurrent_mixer.py). fla is
causal only.

Padding: the input is zeroed at padded positions before the projections, each conv reads a
padded position as zero (the zeros past either end), and padded positions neither write the
state nor read it (the core), so real outputs equal those of the truncated sequence.
Dtypes: projections in the compute dtype; convs, norms of q and k, the recurrence and the
output norm in float32. No attention weights and no dropout inside (ATTENTION_DROPOUT False).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.mamba import torch_default
from lra.models.recurrent_mixer import HeadRMSNorm, RecurrentMixer, ShortConv
from lra.models.registry import register
from lra.models.ssm import masked_input

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(sum x^2 + eps)


def l2_normalise(x_BxLxHxK):
  """Each head's vector over its norm, in float32 (fla's l2norm, eps inside the root)."""
  x = x_BxLxHxK.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


class DeltaRuleMixer(RecurrentMixer):
  """What DeltaNet and Gated DeltaNet share: the heads' q, k, v (projection, short conv +
  SiLU, l2 norm of q and k, q scaled), beta, and the output (RMS norm, optionally gated by
  SiLU(g_proj(x)), then o_proj). A subclass with V != K overrides `value_expand`."""
  conv_kernel: int = s.setting(4, s.Int(1), "kernel of the depthwise causal convs on q, k, v "
                               "(fla's conv_size)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "beta = 2 sigmoid(.): the transition's "
                                     "eigenvalues in (-1, 1) (fla's allow_neg_eigval)")
  use_gate: bool = s.setting(False, s.Bool(), "gate the output norm by SiLU(g_proj(x)) "
                             "(fla's use_gate)")
  num_heads: int = 1  # the encoder's: H heads of K = D / H key channels

  def check_settings(self) -> None:
    super().check_settings()
    s.check(s.model_key("num_heads"), self.num_heads, s.Int(1))

  @property
  def value_expand(self) -> int:
    """V / K."""
    return 1

  def head_dims(self, width: int) -> tuple[int, int]:
    """(K, V) for a D = `width` input, or a one-line SettingError when D does not split."""
    if width % self.num_heads:
      s.fail(s.model_key("num_heads"), self.num_heads,
             f"a divisor of the model width {width} ({type(self).__name__}: K = width / heads)")
    key = width // self.num_heads
    return key, self.value_expand * key

  def carried_state(self, width: int, length: int) -> int:
    """S (K x V) per head, per direction (the convs' windows not counted)."""
    del length  # a fixed-size state
    key, value = self.head_dims(width)
    return self.directions * self.num_heads * key * value

  def dense(self, features: int, name: str) -> nn.Module:
    """D -> features, no bias, PyTorch's nn.Linear initialisation (fla's layers)."""
    return nn.Dense(features, use_bias=False, dtype=self.dtype, kernel_init=torch_default,
                    name=name)

  def heads_qkv(self, h_BxLxD, mask_BxL, key: int, value: int):
    """q (l2-normalised, scaled K^-1/2), k (l2-normalised): B x L x H x K; v: B x L x H x V;
    float32."""
    heads = self.num_heads

    def branch(name: str, per_head: int):
      y = self.dense(heads * per_head, f"{name}_proj")(h_BxLxD)
      y = ShortConv(self.conv_kernel, activation=True, name=f"{name}_conv1d")(y, mask_BxL)
      return y.reshape(y.shape[:2] + (heads, per_head))  # fla's '(h d)': head-major

    q_BxLxHxK = l2_normalise(branch("q", key)) * key ** -0.5
    return q_BxLxHxK, l2_normalise(branch("k", key)), branch("v", value)

  def beta(self, h_BxLxD):
    """beta_BxLxH = sigmoid(b_proj(x)) (x 2 with allow_neg_eigval), float32."""
    b = jax.nn.sigmoid(self.dense(self.num_heads, "b_proj")(h_BxLxD).astype(jnp.float32))
    return 2.0 * b if self.allow_neg_eigval else b

  def output(self, o_BxLxHxV, h_BxLxD, width: int):
    """o_proj(RMSNorm(o)), or o_proj(RMSNorm(o) * SiLU(g_proj(x))) with use_gate."""
    batch, length, heads, value = o_BxLxHxV.shape
    y_BxLxHxV = HeadRMSNorm(name="o_norm")(o_BxLxHxV)
    if self.use_gate:
      g_BxLxF = self.dense(heads * value, "g_proj")(h_BxLxD).astype(jnp.float32)
      y_BxLxHxV = y_BxLxHxV * jax.nn.silu(g_BxLxF.reshape(o_BxLxHxV.shape))
    y_BxLxF = y_BxLxHxV.reshape(batch, length, heads * value).astype(self.dtype)
    return self.dense(width, "o_proj")(y_BxLxF)


@register("deltanet")
class DeltaNet(DeltaRuleMixer):
  """DeltaNet: q, k, v with short convs, l2-normalised q and k, beta, the delta rule, RMS
  norm (optionally gated), o_proj (see the module docstring)."""
  use_beta: bool = s.setting(True, s.Bool(), "beta = sigmoid(b_proj(x)) per head; False: "
                             "beta = 1 (fla's use_beta)")

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    key, value = self.head_dims(width)
    h_BxLxD = masked_input(x_BxLxD, mask_BxL).astype(self.dtype)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxV = self.heads_qkv(h_BxLxD, mask_BxL, key, value)
    if self.use_beta:
      beta_BxLxH = self.beta(h_BxLxD)
    else:
      beta_BxLxH = jnp.full(q_BxLxHxK.shape[:3], 2.0 if self.allow_neg_eigval else 1.0)
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, beta=beta_BxLxH)
    return self.output(o_BxLxHxV, h_BxLxD, width)
