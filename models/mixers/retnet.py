"""RetNet (Sun et al. 2023, "Retentive Network: A Successor to Transformer for Large Language
Models"): multi-scale retention as a token mixer.

Retention per head h, with a fixed decay gamma_h, in its recurrent form (the paper's eq. 1-2)
    S_t = gamma_h S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t
and its parallel form o = (q k^T * D) v, D[n, m] = gamma_h^(n - m) for n >= m, else 0.
gamma_h = 1 - 2^(-5 - h) for h = 0..H-1 (the paper's multi-scale decays; log_decay =
log(1 - 2^(-5 - h)), shape H). This is the core's fixed scalar decay
(models/ops/matrix_recurrence.py).

The layer is flash-linear-attention's MultiScaleRetention (fla/layers/multiscale_retention.py,
the authors' maintained reference), D = the input width, H = num_heads (the encoder's),
K = int(D expand_k) / H, V = int(D expand_v) / H:
    q, k = q_proj(x), k_proj(x)       D -> H K each, no bias
    q, k = rotary(q), rotary(k)       fla rotates both by RotaryEmbedding(K): RoFormer's
                                      rotation of the two halves of each head (GPT-NeoX's
                                      layout), base 10000, no xPos scale; our
                                      common.rotary_embedding is that rotation
    v, g = v_proj(x), g_proj(x)       D -> H V each, no bias
    o    = retention(q K^-1/2, k, v)  fla's kernels scale q by K^-1/2
    out  = o_proj(RMSNorm(o) * swish(g))   fla's FusedRMSNormGated: an RMS norm over each
                                      head's V channels, one learned weight shared by the
                                      heads, then the swish (SiLU) gate; o_proj: H V -> D
Defaults are fla's: expand_k 1, expand_v 2 (so H V = 2D, as the paper's value width).
fla's optional feature map, short convolution and grouped key/value heads are off by default
and not built here.

Differences from the paper: the paper's GroupNorm (a LayerNorm per head) is fla's RMS norm, and
the paper's retention-score normalisations (D's rows scaled by their sum, the scores by
max(|sum|, 1)) are left out, as fla does: the per-head norm after retention removes the scale
(up to its eps). The paper's xPos scaling of the rotation is left out, as fla does.
Norm eps 1e-5 (fla's layer default; fla's RetNet config passes 1e-6).

Initialisation: fla's (RetNetPreTrainedModel._init_weights): every projection N(0, 0.02), the
norm's weight 1.

Bidirectional (setting, the core's, models/blocks/recurrent.py): the same q, k, v run from the
end too, the two retentions averaged before the norm and gate: o = (q k^T * (D + D^T) / 2) v.
The rotation is by absolute position, so the backward pass reads the same relative angles
mirrored. The paper and fla are causal only.

Padding: padded positions neither decay nor write the state (the core), and the inputs are
zeroed there; real outputs equal those of the truncated sequence (LRA pads at the end, so the
rotation's positions of real tokens do not change). No attention weights and no dropout inside
(ATTENTION_DROPOUT = False).
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.heads import head_dims, heads_projection
from lra.models.blocks.norms import GatedOutput
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.common import rotary_embedding
from lra.models.registry import register


def retnet_log_decay(heads: int):
  """log gamma_h = log(1 - 2^(-5 - h)), h = 0..H-1 (the paper's multi-scale decays)."""
  return jnp.asarray(np.log1p(-2.0 ** (-5.0 - np.arange(heads))), jnp.float32)


@register("retnet")
class RetNet(RecurrentMixer):
  """Multi-scale retention: q, k (rotated), v, g projections, fixed per-head decays, per-head
  RMS norm, swish gate, output projection (see the module docstring)."""
  expand_k: float = s.setting(1.0, s.Float(0.0, open="low"),
                              "key channels = int(width * expand_k), split over the heads")
  expand_v: float = s.setting(2.0, s.Float(0.0, open="low"),
                              "value channels = int(width * expand_v), split over the heads")

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V); K must be even (the rotation turns pairs of channels)."""
    key, value = head_dims(width, self.num_heads, self.expand_k, self.expand_v)
    if key % 2:
      s.fail(s.attention_key("expand_k"), self.expand_k,
             f"an even key width per head (int(width {width} * expand_k) / num_heads = {key}) "
             "for the rotary positions")
    return self.num_heads, key, value

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    heads, key, value = self.head_sizes(width)
    x_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    proj = lambda size, name: heads_projection(heads, size, self.dtype, name)(x_BxLxD)
    q_BxLxHxK = rotary_embedding(proj(key, "q_proj").astype(jnp.float32))
    k_BxLxHxK = rotary_embedding(proj(key, "k_proj").astype(jnp.float32))
    v_BxLxHxV, g_BxLxHxV = proj(value, "v_proj"), proj(value, "g_proj")
    o_BxLxHxV = self.run(q_BxLxHxK * key ** -0.5, k_BxLxHxK, v_BxLxHxV, mask_BxL,
                         log_decay=retnet_log_decay(heads))
    return GatedOutput(width, self.dtype, name="output")(o_BxLxHxV, g_BxLxHxV)
