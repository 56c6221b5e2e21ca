"""Linear Transformer (Katharopoulos et al. 2020): kernelised attention in linear form.

With the feature map phi(x) = elu(x) + 1 (positive, so every weight is positive), output i is
  phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j)),
the sums running over the non-padded keys only. Both sums are formed once per head (a K x K
state and a K vector), so time and memory are O(L K^2), never L x L. Non-causal, as in LRA.

Rotary positions (positions="rotary") as RoFormer defines them for kernel attention (Su et al.
2021, eq. 19): the FEATURE-MAPPED query and key are rotated, R_m phi(q_m) and R_n phi(k_n),
and the normaliser is left unrotated:
  o_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n / sum_n phi(q_m)^T phi(k_n),
so a query meets a key through m - n only (rotating q and k before phi, as QKVProjection does
for the softmax mixers, would not: elu(R_m q) depends on m itself). Still linear: the state is
sum_n R_n phi(k_n) v_n^T, formed once. As RoFormer says, the denominator stays unrotated so it
cannot reach zero, while the numerator's terms can now be negative: the weights on the values
are no longer a probability distribution, which RoFormer argues still models how much each
value matters.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, rotary_embedding
from lra.models.registry import register


def feature_map(x):
  """phi(x) = elu(x) + 1 > 0."""
  return jax.nn.elu(x) + 1.0


def linear_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, key_mask_BxL, eps: float,
                     rotary: bool = False):
  """Normalised kernel attention in linear form, in float32; padded keys add nothing. With
  `rotary`, phi(q) and phi(k) rotated by position in the numerator only (RoFormer eq. 19)."""
  phi_q_BxLxHxK = feature_map(q_BxLxHxK.astype(jnp.float32))
  keep_BxLx1x1 = key_mask_BxL.astype(jnp.float32)[:, :, None, None]
  phi_k_BxLxHxK = feature_map(k_BxLxHxK.astype(jnp.float32)) * keep_BxLx1x1
  norm_BxHxK = jnp.sum(phi_k_BxLxHxK, axis=1)
  # eps keeps a row with no real key finite (0 / eps = 0) instead of 0 / 0.
  denom_BxLxH = jnp.einsum("blhk,bhk->blh", phi_q_BxLxHxK, norm_BxHxK) + eps
  if rotary:
    phi_q_BxLxHxK = rotary_embedding(phi_q_BxLxHxK)
    phi_k_BxLxHxK = rotary_embedding(phi_k_BxLxHxK)
  state_BxHxKxV = jnp.einsum("blhk,blhv->bhkv", phi_k_BxLxHxK, v_BxLxHxK.astype(jnp.float32))
  numer_BxLxHxV = jnp.einsum("blhk,bhkv->blhv", phi_q_BxLxHxK, state_BxHxKxV)
  return numer_BxLxHxV / denom_BxLxH[..., None]


@register("linear_transformer")
class LinearTransformerAttention(HeadsMixer):
  """elu+1 kernel attention over the non-padded tokens, computed without an L x L matrix."""
  eps: float = s.setting(1e-6, s.Float(0.0, open="low"),
                         "added to the normaliser (the paper's code uses 1e-6)")

  SUBQUADRATIC = True
  ATTENTION_DROPOUT = False  # phi(K)^T V never forms attention weights (nor does the paper)

  def carried_state(self, width: int, length: int) -> int:
    """The sums phi(K)^T V (K x K) and phi(K)^T 1 (K) per head, qkv_dim x (K + 1): formed
    once over the sequence (non-causal: one sum, not two directions), read at every position."""
    del width, length
    return self.qkv_dim * (self.head_dim + 1)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    # Unrotated projections: the rotation comes after the feature map (linear_attention).
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype)(x_BxLxD)
    y_BxLxHxK = linear_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, self.eps,
                                 self.rotary)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK.astype(v_BxLxHxK.dtype))
