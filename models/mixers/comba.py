"""Comba (Hu et al. 2025, "Comba: Improving Bilinear RNNs with Closed-loop Control"): the
delta rule with a scalar-plus-low-rank transition, an erase key p apart from the write key k
(state feedback) and the query corrected by p (output feedback), as a token mixer.

The recurrence, per head, with S the K x V state and a_t in (0, 1) a scalar decay:
    S_t = (a_t I - beta_t k_t p_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t
i.e. S <- a S + beta k (v - S_{t-1}^T p)^T: p reads the state before this position's decay.
That is what fla's Comba layer runs (its chunk_comba and fused_recurrent_comba kernels, and
naive_chunk_comba, the reference fla tests them against); fla's naive_recurrent_comba decays
first, a (I - beta k p^T) S_{t-1}, another function (docs/models.md#comba). It is the core's
diagonal-plus-rank-one kind (models/ops/dplr.py, recurrence(dplr=(e, f))) with a scalar
decay: e = -beta k, f = p, the write key beta k, the value v.

The layer is flash-linear-attention's Comba (fla/layers/comba.py, the authors' code) at its
defaults (use_output_gate, use_output_correction, use_inner_decay, correction_factor 1,
use_short_conv, expand_v 2), with D the input width, H = num_heads (the encoder's), K = D / H
and V = expand_v K per head:
    q', k', v = SiLU(conv(q_proj(x))), SiLU(conv(k_proj(x))), SiLU(conv(v_proj(x)))
                                 D -> H K, H K, H V, no bias; depthwise causal convs, kernel
                                 `conv_kernel`, no bias
    p'      = sigmoid(decay_h) k'                    (use_inner_decay; else p' = k')
    q'      = q' - D_h p'                            (use_output_correction: the output
                                                     feedback, o = S^T (q - D p))
    q, k, p = l2-normalised per head (eps 1e-6, fla's use_qk_l2norm_in_kernel, which
              normalises p too), q K^-1/2
    beta    = sigmoid(b_proj(x))                     D -> H, no bias (x 2 with
                                                     allow_neg_eigval: ours)
    log a   = -exp(A_log) softplus(a_proj(x) + dt_bias)   D -> H (Gated DeltaNet's)
    o       = the recurrence above
    out     = o_proj(RMSNorm(o) * sigmoid(g_proj(x)))   g_proj D -> H V, no bias; RMS norm
                                                     over each head's V channels (one weight
                                                     of V, eps 1e-5); use_gate False (fla's
                                                     use_output_gate): no gate
o_proj: H V -> D, no bias. The convs, norms, beta, decay and output are Gated DeltaNet's
(their base class, DeltaRuleMixer: models/blocks/delta_rule.py), with the gate's sigmoid.
Because p is l2-normalised, sigmoid(decay) scales p only through the norm's eps: p is k's
direction to about 1e-6 / |k'|^2; the inner decay acts through the query's correction.

Initialisation (the layer's): decay 1 and D = correction_factor per head; A uniform in
(0, 16] per head, A_log = log A; dt log-uniform in [0.001, 0.1] (floored at 1e-4) per head,
dt_bias = softplus^-1(dt); projections and convs PyTorch's defaults, norm weight 1 (fla's
language models redraw them from N(0, 0.02): not taken, as for Gated DeltaNet).

Deviations: the heads come from the encoder's num_heads with K = D / H, not fla's head_dim
(256, with 6 heads); expand_v an integer; no grouped value heads (num_v_heads), no conv bias.
`allow_neg_eigval` (the family's, off) doubles beta: fla's Comba has no such setting.

Bidirectional (setting): the core's two passes with the same q, k, p, v, beta and decay (the
short convolutions stay causal), averaged before the norm (models/blocks/recurrent.py). fla
is causal only.

Optimiser: A_log, dt_bias and D are OPTIMIZER_GROUP (no weight decay,
config.ssm_learning_rate), as fla marks them _no_weight_decay; `decay` decays, as in fla.
Padding: a padded position neither decays, writes nor reads the state (the core's). No
attention weights and no dropout inside.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.delta_rule import DeltaRuleMixer, l2_normalise
from lra.models.registry import register


@register("comba")
class Comba(DeltaRuleMixer):
  """Comba: a scalar decay minus a rank-one erase beta k p^T, p the key scaled by
  sigmoid(decay) and l2-normalised; the query corrected by -D p; the norm gated by
  sigmoid(g_proj(x)) (see the module docstring)."""
  use_gate: bool = s.setting(True, s.Bool(), "gate the output norm by sigmoid(g_proj(x)) "
                             "(fla's use_output_gate)")
  expand_v: int = s.setting(2, s.Int(1), "V = expand_v x K value channels per head "
                            "(fla's expand_v)")
  use_output_correction: bool = s.setting(True, s.Bool(), "read the state with q - D p "
                                          "(fla's use_output_correction)")
  use_inner_decay: bool = s.setting(True, s.Bool(), "p = sigmoid(decay) k per head, else "
                                    "p = k (fla's use_inner_decay)")
  correction_factor: float = s.setting(1.0, s.Float(), "D's initial value (fla's "
                                       "correction_factor; it suggests 0.02 may suit small "
                                       "models)")

  # Trained with config.ssm_learning_rate and no weight decay (fla's _no_weight_decay).
  OPTIMIZER_GROUP = ("A_log", "dt_bias", "D")
  GATE = "sigmoid"  # fla's FusedRMSNormGated(activation="sigmoid")

  @property
  def value_expand(self) -> int:
    return self.expand_v

  def heads_qkpv(self, h_BxLxD, mask_BxL, key: int, value: int):
    """q (corrected, l2-normalised, scaled K^-1/2), k, p (l2-normalised): B x L x H x K;
    v: B x L x H x V; float32."""
    heads = self.num_heads
    q_BxLxHxK = self.branch(h_BxLxD, mask_BxL, "q", key)
    k_BxLxHxK = self.branch(h_BxLxD, mask_BxL, "k", key)
    v_BxLxHxV = self.branch(h_BxLxD, mask_BxL, "v", value)
    p_BxLxHxK = k_BxLxHxK
    if self.use_inner_decay:
      decay_H = self.param("decay", nn.initializers.ones, (heads,))
      p_BxLxHxK = k_BxLxHxK * jax.nn.sigmoid(decay_H)[None, None, :, None]
    if self.use_output_correction:
      D_H = self.param("D", nn.initializers.constant(self.correction_factor), (heads,))
      q_BxLxHxK = q_BxLxHxK - D_H[None, None, :, None] * p_BxLxHxK
    return (l2_normalise(q_BxLxHxK) * key ** -0.5, l2_normalise(k_BxLxHxK), v_BxLxHxV,
            l2_normalise(p_BxLxHxK))

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    _, key, value = self.head_sizes(width)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, p_BxLxHxK = self.heads_qkpv(h_BxLxD, mask_BxL, key,
                                                                 value)
    beta_BxLxH = self.beta(h_BxLxD)
    # a I - beta k p^T = diag(a) + e f^T: e = -beta k, f = p (read before the decay).
    write_BxLxHxK = beta_BxLxH[..., None] * k_BxLxHxK
    o_BxLxHxV = self.run(q_BxLxHxK, write_BxLxHxK, v_BxLxHxV, mask_BxL,
                         log_decay=self.log_decay(h_BxLxD),
                         dplr=(-write_BxLxHxK, p_BxLxHxK))
    return self.output(o_BxLxHxV, h_BxLxD, width)
