"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks: Improving Mamba2
with Delta Rule"): DeltaNet's delta rule with Mamba-2's data-dependent decay, as a token mixer.

The recurrence, per head, with S the K x V state and alpha_t in (0, 1) a scalar decay:
    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t
The decay erases the whole memory quickly when needed (gating), the delta rule replaces one
key's value precisely. The core's delta form with a scalar decay per position and head
(models/ops/matrix_recurrence.py: the UT chunked form, with exp of differences of cumulative log
decays inside a chunk, and the step-by-step recurrence as its reference).

The layer is flash-linear-attention's GatedDeltaNet (fla/layers/gated_deltanet.py, the
authors' code) at its defaults (use_gate, use_short_conv, expand_v 2), with D = the input
width, H = num_heads (the encoder's), K = D / H and V = expand_v K per head:
    q, k, v = SiLU(conv(q_proj(x))), SiLU(conv(k_proj(x))), SiLU(conv(v_proj(x)))
                              D -> H K, H K, H V, no bias; depthwise causal convs, kernel
                              `conv_kernel`, no bias (ShortConvolution)
    q, k    = l2-normalised per head (fla's use_qk_l2norm_in_kernel, eps 1e-6), q K^-1/2
    beta    = sigmoid(b_proj(x))                      D -> H, no bias (x 2 with
                                                      allow_neg_eigval)
    log alpha = -exp(A_log) softplus(a_proj(x) + dt_bias)   D -> H, no bias (Mamba-2's dt
                                                      and A, kept in log space: fla's gate)
    o       = the recurrence above
    out     = o_proj(RMSNorm(o) * SiLU(g_proj(x)))    RMS norm over each head's V channels
                                                      (one weight of V, eps 1e-5), g_proj
                                                      D -> H V; use_gate False: no gate
o_proj: H V -> D, no bias. Everything but the decay (A_log, dt_bias, a_proj), expand_v and
the gate's default is DeltaNet's (models/mixers/deltanet.py; their base class,
DeltaRuleMixer, is models/blocks/delta_rule.py, which holds the decay too).

Initialisation (the layer's): A uniform in (0, 16) per head, A_log = log A; dt log-uniform in
[0.001, 0.1] (floored at 1e-4), dt_bias = softplus^-1(dt) (Mamba's); projections and convs
PyTorch's defaults (uniform in +-1/sqrt(fan_in)), norm weight 1. fla's language models redraw
the linear and conv weights from N(0, 0.02): not taken here (see models/mixers/deltanet.py).

Deviations: the heads come from the encoder's num_heads with K = D / H, not fla's head_dim
setting (256, with num_heads 6, independent of the width: fla advises H K = 0.75 D); expand_v
is an integer here (fla takes any float that gives whole channels); grouped value heads
(num_v_heads > num_heads) and conv bias are not built.

Bidirectional (setting): the core's two passes with the same q, k, v, beta and decay (the
short convolutions stay causal), averaged before the norm (models/blocks/recurrent.py). fla is
causal only.

Negative eigenvalues (setting `allow_neg_eigval`, off by default; Grazzi et al. 2025): beta =
2 sigmoid(b_proj(x)) in (0, 2), so the transition alpha (I - beta k k^T) has the eigenvalue
alpha (1 - beta) in (-alpha, alpha) along k and alpha elsewhere. Only beta is scaled; the
decay alpha stays in (0, 1): fla's GatedDeltaNet does exactly that (fla/layers/gated_deltanet.py:
"If set to `True`, the beta will be multiplied by 2", the decay passed to the kernel as is), and
Grazzi et al.'s own change to the delta rule is beta's scale alone (their DeltaNet's
sigmoid_scale = 2). Signing alpha too (2 alpha - 1, as for Mamba-2's decay) would also flip
every direction orthogonal to k, a different transition neither codebase has; the core could
run it (a scalar signed decay with the delta rule is exact in both forms), but no setting asks.

Optimiser: A_log and dt_bias are OPTIMIZER_GROUP: no weight decay (fla marks both
_no_weight_decay), trained at config.ssm_learning_rate (0 = the global rate).
Padding: as DeltaNet's (a padded position neither decays, writes nor reads the state).
No attention weights and no dropout inside (ATTENTION_DROPOUT False).
"""
from __future__ import annotations

import flax.linen as nn

from lra import rules as s
from lra.models.blocks.delta_rule import DeltaRuleMixer
from lra.models.registry import register

@register("gated_deltanet")
class GatedDeltaNet(DeltaRuleMixer):
  """Gated DeltaNet: DeltaNet's q, k, v, beta and delta rule with a decay
  -exp(A_log) softplus(a_proj(x) + dt_bias) per head, the output norm gated by
  SiLU(g_proj(x)), o_proj (see the module docstring)."""
  use_gate: bool = s.setting(True, s.Bool(), "gate the output norm by SiLU(g_proj(x)) "
                             "(fla's use_gate, on by default)")
  expand_v: int = s.setting(2, s.Int(1), "V = expand_v x K value channels per head "
                            "(fla's expand_v)")

  # Leaf names trained with config.ssm_learning_rate and no weight decay (fla's
  # _no_weight_decay; lra/training/optim.py).
  OPTIMIZER_GROUP = ("A_log", "dt_bias")

  @property
  def value_expand(self) -> int:
    return self.expand_v

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    _, key, value = self.head_sizes(width)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxV = self.heads_qkv(h_BxLxD, mask_BxL, key, value)
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL,
                         beta=self.beta(h_BxLxD), log_decay=self.log_decay(h_BxLxD))
    return self.output(o_BxLxHxV, h_BxLxD, width)
