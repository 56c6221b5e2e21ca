"""Linear Transformer (Katharopoulos et al. 2020): kernelised attention in linear form.

With the feature map phi(x) = elu(x) + 1 (positive, so every weight is positive), output i is
  phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j)),
the sums running over the non-padded keys only. Both sums are formed once per head (a K x K
state and a K vector), so time and memory are O(L K^2), never L x L. Non-causal, as in LRA.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection
from lra.models.registry import register


def feature_map(x):
  """phi(x) = elu(x) + 1 > 0."""
  return jax.nn.elu(x) + 1.0


def linear_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, key_mask_BxL, eps: float):
  """Normalised kernel attention in linear form, in float32; padded keys add nothing."""
  phi_q_BxLxHxK = feature_map(q_BxLxHxK.astype(jnp.float32))
  keep_BxLx1x1 = key_mask_BxL.astype(jnp.float32)[:, :, None, None]
  phi_k_BxLxHxK = feature_map(k_BxLxHxK.astype(jnp.float32)) * keep_BxLx1x1
  state_BxHxKxV = jnp.einsum("blhk,blhv->bhkv", phi_k_BxLxHxK, v_BxLxHxK.astype(jnp.float32))
  norm_BxHxK = jnp.sum(phi_k_BxLxHxK, axis=1)
  numer_BxLxHxV = jnp.einsum("blhk,bhkv->blhv", phi_q_BxLxHxK, state_BxHxKxV)
  # eps keeps a row with no real key finite (0 / eps = 0) instead of 0 / 0.
  denom_BxLxH = jnp.einsum("blhk,bhk->blh", phi_q_BxLxHxK, norm_BxHxK) + eps
  return numer_BxLxHxV / denom_BxLxH[..., None]


@register("linear_transformer")
class LinearTransformerAttention(HeadsMixer):
  """elu+1 kernel attention over the non-padded tokens, computed without an L x L matrix."""
  eps: float = s.setting(1e-6, s.Float(0.0, open="low"),
                         "added to the normaliser (the paper's code uses 1e-6)")

  SUBQUADRATIC = True
  ATTENTION_DROPOUT = False  # phi(K)^T V never forms attention weights (nor does the paper)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    y_BxLxHxK = linear_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, self.eps)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK.astype(v_BxLxHxK.dtype))
