"""DeltaNet (Schlag et al. 2021, "Linear Transformers Are Secretly Fast Weight Programmers";
Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length"): linear attention whose state is written by the delta rule, as a token mixer.

The recurrence, per head, with S the K x V fast-weight state:
    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
        = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T      (replace what k_t retrieved)
    o_t = S_t^T q_t
beta_t in (0, 1) is the writing strength; with |k_t| = 1, (I - beta_t k_t k_t^T) has
eigenvalues 1 and 1 - beta_t, so the state stays bounded. This is the core's delta form
(models/ops/matrix_recurrence.py: the UT / WY chunked form of Yang et al. 2024, with the
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
o_proj: H V -> D, no bias. GatedDeltaNet (models/mixers/gated_deltanet.py) shares the base
class, DeltaRuleMixer (models/blocks/delta_rule.py).

Initialisation: the layer's own, PyTorch's defaults (uniform in +-1/sqrt(fan_in) for the
projections and the convs), norm weight 1. fla's language models (modeling_delta_net.py
_init_weights) redraw every linear and conv weight from N(0, 0.02) instead: a model-level
choice for large widths, not taken here (as for Mamba and HGRN2 in this code base).

Deviations: fla's other options (qk_activation relu / elu / identity, qk_norm sum, no short
conv, expand_k / expand_v != 1, conv bias) are not built. The heads come from the encoder's
num_heads (fla's num_heads, default 4 in the layer, 16 in its model config), not a head_dim
setting; the model width must split into them (a one-line error otherwise).

Bidirectional (setting): the core's two passes with the same q, k, v and beta (the short
convolutions stay causal), averaged before the norm (models/blocks/recurrent.py). fla is
causal only.

Padding: the input is zeroed at padded positions before the projections, each conv reads a
padded position as zero (the zeros past either end), and padded positions neither write the
state nor read it (the core), so real outputs equal those of the truncated sequence.
Dtypes: projections in the compute dtype; convs, norms of q and k, the recurrence and the
output norm in float32. No attention weights and no dropout inside (ATTENTION_DROPOUT False).
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.delta_rule import DeltaRuleMixer
from lra.models.registry import register


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
    _, key, value = self.head_sizes(width)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxV = self.heads_qkv(h_BxLxD, mask_BxL, key, value)
    if self.use_beta:
      beta_BxLxH = self.beta(h_BxLxD)
    else:
      beta_BxLxH = jnp.full(q_BxLxHxK.shape[:3], 2.0 if self.allow_neg_eigval else 1.0)
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, beta=beta_BxLxH)
    return self.output(o_BxLxHxV, h_BxLxD, width)
