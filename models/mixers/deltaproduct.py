"""DeltaProduct (Siems et al. 2025, "DeltaProduct:
Improving State-Tracking in Linear RNNs via Householder Products"): the delta rule taken
n_h times per token, so that each token's state transition is a product of n_h generalised
Householder matrices (a diagonal-plus-rank-n_h matrix) instead of DeltaNet's one, as a token
mixer.

The recurrence, per head, with S the K x V state:
    S_t = H_{t,n} ... H_{t,1} alpha_t S_{t-1} + (the n_h writes),  H_{t,j} = I - beta_{t,j} k k^T
          i.e. n_h delta-rule steps S <- S + beta_{t,j} k_{t,j} (v_{t,j} - S^T k_{t,j})^T
    o_t = S_t^T q_t
alpha_t the forget gate (Gated DeltaNet's decay; 1 without use_forget_gate), beta_{t,j} in
(0, 2) with allow_neg_eigval (each factor's eigenvalues in (-1, 1]: the state tracking that
needs reflections, Grazzi et al. 2025), else (0, 1). The recurrence is the core's delta form
over the L n_h sub-steps of models/ops/delta_product.py (the decay on each token's first
sub-step, the query read on its last).

The layer is flash-linear-attention's GatedDeltaProduct (fla/layers/gated_deltaproduct.py, the
authors' code, merged into fla) at its defaults (num_householder 2, use_forget_gate,
allow_neg_eigval, use_output_gate, use_short_conv, expand_v 2), with D the input width,
H = num_heads (the encoder's), K = D / H and V = expand_v K per head, n = num_householder:
    q    = SiLU(conv(q_proj(x)))             D -> H K
    k, v = SiLU(conv(k_proj(x))), SiLU(conv(v_proj(x)))   D -> n H K, n H V: one projection
                                             and one depthwise causal conv over the tokens
                                             each, split as fla's '(n h d)' (kernel
                                             `conv_kernel`, no bias)
    q, k = l2-normalised per head and step (fla's use_qk_l2norm_in_kernel, eps 1e-6), q K^-1/2
    beta = sigmoid(b_proj(x))                D -> n H, '(n h)', no bias (x 2 with
                                             allow_neg_eigval)
    log alpha = -exp(A_log) softplus(a_proj(x) + dt_bias)   D -> H (use_forget_gate)
    o    = the recurrence above
    out  = o_proj(RMSNorm(o) * SiLU(g_proj(x)))   RMS norm over each head's V channels (one
                                             weight of V, eps 1e-5), g_proj D -> H V; use_gate
                                             False (fla's use_output_gate): no gate
o_proj: H V -> D, no bias. The heads, convs, norms, beta, decay and output are Gated
DeltaNet's (their base class, DeltaRuleMixer: models/blocks/delta_rule.py); n_h = 1 without
allow_neg_eigval is Gated DeltaNet (DeltaNet without the forget gate, at expand_v 1).

Initialisation (the layer's): A uniform in (0, 16) per head, A_log = log A; dt log-uniform in
[0.001, 0.1] (floored at 1e-4), dt_bias = softplus^-1(dt); projections and convs PyTorch's
defaults, norm weight 1 (fla's language models redraw them from N(0, 0.02): not taken, as for
Gated DeltaNet).

Deviations: as Gated DeltaNet's (heads from the encoder's num_heads with K = D / H, not fla's
head_dim; an integer expand_v; no num_v_heads, no conv bias); fla's output-gate setting is
called use_gate here, as in the rest of the family. fla's model config (not the layer) defaults
to num_householder 1 and no forget gate or negative eigenvalues; the layer's defaults are
taken.

Bidirectional (setting): the core's two passes with the same q, k, v, beta and decay (the short
convolutions stay causal), averaged before the norm (models/blocks/recurrent.py); the backward
pass takes each token's n_h steps in their own order (decay first, read last). fla is causal
only.

Optimiser: A_log and dt_bias are OPTIMIZER_GROUP (no weight decay, config.ssm_learning_rate),
as fla marks them _no_weight_decay. Padding: a padded token's n_h sub-steps neither decay,
write nor read the state. Cost: the core runs over L n_h sub-steps (chunk_size counts
sub-steps). No attention weights and no dropout inside (ATTENTION_DROPOUT False).
"""
from __future__ import annotations

import flax.linen as nn

from lra import rules as s
from lra.models.blocks.delta_rule import DeltaRuleMixer
from lra.models.ops.delta_product import delta_product
from lra.models.registry import register


@register("deltaproduct")
class DeltaProduct(DeltaRuleMixer):
  """DeltaProduct: num_householder delta-rule steps per token (keys, values and betas of
  their own), the forget gate on the first, the query read after the last; Gated DeltaNet's
  heads, convs, norms and output (see the module docstring)."""
  num_householder: int = s.setting(2, s.Int(1), "n_h: delta-rule steps (Householder factors) "
                                   "per token (fla's num_householder)")
  use_forget_gate: bool = s.setting(True, s.Bool(), "decay the state once per token by "
                                    "-exp(A_log) softplus(a_proj(x) + dt_bias) (fla's "
                                    "use_forget_gate)")
  allow_neg_eigval: bool = s.setting(True, s.Bool(), "beta = 2 sigmoid(.): each factor's "
                                     "eigenvalues in (-1, 1] (fla's allow_neg_eigval, on in "
                                     "its layer)")
  use_gate: bool = s.setting(True, s.Bool(), "gate the output norm by SiLU(g_proj(x)) "
                             "(fla's use_output_gate)")
  expand_v: int = s.setting(2, s.Int(1), "V = expand_v x K value channels per head "
                            "(fla's expand_v)")

  # Trained with config.ssm_learning_rate and no weight decay (fla's _no_weight_decay). A
  # layer without the forget gate has neither.
  OPTIMIZER_GROUP = ("A_log", "dt_bias")

  @property
  def value_expand(self) -> int:
    return self.expand_v

  def core(self, q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, mask_BxL, *, reverse: bool, beta,
           log_decay=None):
    """The core over each token's num_householder sub-steps (models/ops/delta_product.py):
    (o_BxLxHxV, None)."""
    o_BxLxHxV = delta_product(q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, beta, mask_BxL,
                              log_decay=log_decay, reverse=reverse, core=super().core)
    return o_BxLxHxV, None

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width, steps = x_BxLxD.shape[-1], self.num_householder
    _, key, value = self.head_sizes(width)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV = self.heads_qkv(h_BxLxD, mask_BxL, key, value, steps)
    gates = dict(beta=self.beta(h_BxLxD, steps))
    if self.use_forget_gate:
      gates["log_decay"] = self.log_decay(h_BxLxD)
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, mask_BxL, **gates)
    return self.output(o_BxLxHxV, h_BxLxD, width)
