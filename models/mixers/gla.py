"""GLA (Yang et al. 2023, "Gated Linear Attention Transformers with Hardware-Efficient
Training"): gated linear attention as a token mixer.

Per head, with alpha_t in (0, 1)^K a data-dependent forget gate over the key channels:
    S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t
the core's vector decay (models/ops/matrix_recurrence.py, which runs it by chunks: the paper's
chunkwise form, guarded, with its secondary chunking where a chunk's decay is too strong for
it: models/ops/vector_decay.py).

The layer is flash-linear-attention's GatedLinearAttention (fla/layers/gla.py, the authors'
maintained reference), D = the input width, H = num_heads (the encoder's),
K = int(D expand_k) / H, V = int(D expand_v) / H, R = gate_low_rank_dim:
    q, k = q_proj(x), k_proj(x)          D -> H K each, no bias
    v, g = v_proj(x), g_proj(x)          D -> H V each, no bias
    log alpha = logsigmoid(gk_proj(x)) / gate_logit_normalizer
               gk_proj: D -> R (no bias) -> H K (with bias), the paper's low-rank gate
               alpha = sigmoid(.)^(1/16)
    o    = the recurrence above, with q scaled by K^-1/2 (fla's kernels)
    out  = o_proj(RMSNorm(o) * swish(g))  fla's FusedRMSNormGated over each head's V channels
                                          (one learned weight shared by the heads); o_proj:
                                          H V -> D
Defaults are fla's: expand_k 0.5, expand_v 1, gate_low_rank_dim 16, gate_logit_normalizer
16. fla's optional feature map, short convolution, clamp_min and grouped key/value heads are
off by default and not built here.

Differences from the paper: the paper's per-head LayerNorm is fla's RMS norm. Norm eps 1e-5
(fla's layer default; fla's GLA config passes 1e-6).

Negative eigenvalues (setting `allow_neg_eigval`, off by default; Grazzi et al. 2025): each
channel's alpha in (0, 1) becomes 2 alpha - 1 in (-1, 1), as their modified fla has it
(adankow/unlocking_state_tracking, flash-linear-attention_mod/fla/ops/gla/naive.py and
ops/common/fused_recurrent.py under use_negative_gates: 2 exp(gk) - 1 of the log gate gk). The
core takes log|2 alpha - 1| and its sign (models/ops/signed.py).

Initialisation: fla's (GLAPreTrainedModel._init_weights): every projection N(0, 0.02), the
gate's bias 0 (alpha starts near sigmoid(0)^(1/16) = 0.958), the norm's weight 1.

Bidirectional (setting, the core's, models/blocks/recurrent.py): the same q, k, v and gates run
from the end too, the two outputs averaged before the norm and gate. The paper and fla are
causal only.

Padding: padded positions neither decay nor write the state (the core), and the inputs are
zeroed there; real outputs equal those of the truncated sequence. No attention weights and no
dropout inside (ATTENTION_DROPOUT = False).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.heads import head_dims, heads_projection
from lra.models.blocks.init import fla_init
from lra.models.blocks.norms import GatedOutput
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.ops.signed import extended
from lra.models.registry import register


@register("gla")
class GLA(RecurrentMixer):
  """Gated linear attention: q, k, v, g projections, the low-rank forget gate over the key
  channels, per-head RMS norm, swish gate, output projection (see the module docstring)."""
  expand_k: float = s.setting(0.5, s.Float(0.0, open="low"),
                              "key channels = int(width * expand_k), split over the heads")
  expand_v: float = s.setting(1.0, s.Float(0.0, open="low"),
                              "value channels = int(width * expand_v), split over the heads")
  gate_low_rank_dim: int = s.setting(16, s.Int(1), "R, the rank of the forget gate's projection")
  gate_logit_normalizer: float = s.setting(16, s.Float(0.0, open="low"),
                                           "log alpha = logsigmoid(gate) / this (the paper's "
                                           "temperature tau)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "each channel's decay alpha becomes "
                                     "2 alpha - 1, in (-1, 1) (Grazzi et al. 2025)")

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V): int(width * expand) channels over the heads."""
    return (self.num_heads, *head_dims(width, self.num_heads, self.expand_k, self.expand_v))

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    heads, key, value = self.head_sizes(width)
    x_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    proj = lambda size, name: heads_projection(heads, size, self.dtype, name)(x_BxLxD)
    q_BxLxHxK, k_BxLxHxK = proj(key, "q_proj"), proj(key, "k_proj")
    v_BxLxHxV, g_BxLxHxV = proj(value, "v_proj"), proj(value, "g_proj")
    low_BxLxR = nn.Dense(self.gate_low_rank_dim, use_bias=False, dtype=self.dtype,
                         kernel_init=fla_init, name="gk_proj_down")(x_BxLxD)
    gk_BxLxHxK = nn.DenseGeneral((heads, key), dtype=self.dtype, kernel_init=fla_init,
                                 bias_init=nn.initializers.zeros, name="gk_proj_up")(low_BxLxR)
    log_alpha_BxLxHxK = jax.nn.log_sigmoid(gk_BxLxHxK.astype(jnp.float32)) \
        / self.gate_logit_normalizer
    q_BxLxHxK = q_BxLxHxK.astype(jnp.float32) * key ** -0.5
    decay = dict(log_decay=log_alpha_BxLxHxK)
    if self.allow_neg_eigval:  # 2 alpha - 1: its log magnitude and sign
      decay = dict(zip(("log_decay", "negative"), extended(log_alpha_BxLxHxK)))
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, **decay)
    return GatedOutput(width, self.dtype, name="output")(o_BxLxHxV, g_BxLxHxV)
