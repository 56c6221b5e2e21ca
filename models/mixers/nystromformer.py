"""Nystromformer (Xiong et al. 2021): softmax attention through m landmarks, never L x L.

Per head, with scaled queries Q and keys K (logits Q K^T / sqrt(d)):
  landmarks   Q~, K~ = means of Q and of K over m contiguous segments of the sequence,
  out = softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V   [+ conv(V)]
evaluated right to left: (m x L)(L x d), then (m x m)(m x d), then (L x m)(m x d). Time and
memory O(L m); the largest arrays are the L x m and m x L softmax matrices.

pinv is the paper's iterative Moore-Penrose pseudo-inverse,
  Z_{j+1} = Z_j (13 I - A Z_j (15 I - A Z_j (7 I - A Z_j))) / 4,  Z_0 = A^T / (||A||_1 ||A||_inf),
with ||A||_1 the largest column sum and ||A||_inf the largest row sum of |A|, per matrix (the
official code takes the maxima over the whole batch). In terms of the residual R = I - A Z,
one step maps R to R^3 (3 + R) / 4: cubic convergence once ||R|| < 1, and a growth by about
13/4 per step of the singular values A Z starts small. The paper's 6 iterations are the default.
More is not always better: along an exact null space (a singular A) float32 round-off grows by
the same 13/4 per step, so a singular A is best served by the few iterations that converge.

Optional skip connection (described in the paper; the official LRA code's `conv_kernel_size`):
a depthwise convolution of V along the sequence, one kernel per head shared by the head's
channels (the official Conv2d with groups=num_heads and a (k, 1) kernel), added to the output.
The official LRA configs use kernel 35 with 32/64/128/256 landmarks; defaults here: 35 and 64.

Padding (the official code averages padded zeros into the landmarks; here, deliberately not):
- The sequence is padded to m * ceil(L / m) and each landmark is the mean over the REAL tokens
  of its segment. A segment with no real token gives an absent landmark: it is masked out of
  softmax(Q K~^T) and softmax(Q~ K~^T), and its row of softmax(Q~ K~^T) is replaced by the unit
  row e_i. The matrix then is block diagonal (present landmarks | identity), so the iteration
  keeps that structure exactly and the absent landmarks drop out: the result equals the
  Nystrom approximation over the present landmarks only.
- Padded keys get no weight in softmax(Q~ K^T); padded values are zeroed before the product and
  the convolution. Real outputs therefore do not depend on what the padded positions hold.
  They do depend on the padded LENGTH (it sets the segment boundaries), as in the paper.

Attention dropout (the official Nystromformer code applies none; set the encoder's
attention_dropout_rate to 0 for that): applied to softmax(Q~ K^T), the only factor that weighs
tokens. With one landmark per token the three softmax factors are the same matrix A, so the
output is A pinv(A) dropout(A) V = dropout(A) V: exactly the Transformer's attention dropout.
The matrix that is pseudo-inverted is never dropped.

Precision: the whole Nystrom core runs in float32 (the official code runs it outside autocast);
the pseudo-inverse and the products with it use HIGHEST matmul precision, because Z can have
large entries of both signs and TF32/bf16 products would lose the cancellations.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, masked_softmax
from lra.models.registry import register

_HIGHEST = jax.lax.Precision.HIGHEST


def segment_means(t_BxLxHxK, mask_BxL, num_landmarks: int):
  """Means of t over m contiguous segments of ceil(L / m) positions, real tokens only.

  Returns (means_BxMxHxK, present_BxM); a segment without a real token has mean 0 and
  present False. The sequence is padded with masked positions to a multiple of m.
  """
  batch, length = mask_BxL.shape
  segment = -(-length // num_landmarks)
  extra = segment * num_landmarks - length
  keep_BxP = jnp.pad(mask_BxL.astype(bool), ((0, 0), (0, extra)), constant_values=False)
  t_BxPxHxK = jnp.pad(t_BxLxHxK, ((0, 0), (0, extra), (0, 0), (0, 0)))
  t_BxPxHxK = jnp.where(keep_BxP[:, :, None, None], t_BxPxHxK, 0.0)
  sums_BxMxHxK = t_BxPxHxK.reshape(batch, num_landmarks, segment,
                                   *t_BxLxHxK.shape[2:]).sum(axis=2)
  count_BxM = keep_BxP.reshape(batch, num_landmarks, segment).sum(axis=-1)
  means_BxMxHxK = sums_BxMxHxK / jnp.maximum(count_BxM, 1)[:, :, None, None].astype(
      sums_BxMxHxK.dtype)
  return means_BxMxHxK, count_BxM > 0


def _eye_like(a___xMxM):
  m = a___xMxM.shape[-1]
  return jnp.eye(m, dtype=a___xMxM.dtype).reshape((1,) * (a___xMxM.ndim - 2) + (m, m))


def iterative_pinv(a___xMxM, iterations: int):
  """The paper's iterative Moore-Penrose pseudo-inverse of each trailing m x m matrix."""
  a = a___xMxM.astype(jnp.float32)
  eye = _eye_like(a)
  abs_a = jnp.abs(a)
  norm_1 = jnp.max(jnp.sum(abs_a, axis=-2), axis=-1)  # largest column sum
  norm_inf = jnp.max(jnp.sum(abs_a, axis=-1), axis=-1)  # largest row sum
  z0 = jnp.swapaxes(a, -1, -2) / (norm_1 * norm_inf)[..., None, None]
  mm = lambda x, y: jnp.matmul(x, y, precision=_HIGHEST)

  def step(_, z):
    az = mm(a, z)
    return 0.25 * mm(z, 13.0 * eye - mm(az, 15.0 * eye - mm(az, 7.0 * eye - az)))

  return jax.lax.fori_loop(0, int(iterations), step, z0)


def nystrom_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, *, num_landmarks: int,
                      pinv_iterations: int, dropout_rng=None, dropout_rate: float = 0.0):
  """The Nystrom approximation of masked softmax attention, in float32; returns BxLxHxK."""
  q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = (t.astype(jnp.float32)
                                     for t in (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK))
  keep_BxL = mask_BxL.astype(bool)
  q_BxLxHxK = q_BxLxHxK * q_BxLxHxK.shape[-1] ** -0.5
  v_BxLxHxK = jnp.where(keep_BxL[:, :, None, None], v_BxLxHxK, 0.0)
  ql_BxMxHxK, present_BxM = segment_means(q_BxLxHxK, keep_BxL, num_landmarks)
  kl_BxMxHxK, _ = segment_means(k_BxLxHxK, keep_BxL, num_landmarks)

  # Every query over the present landmark keys.
  logits_BxHxLxM = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK, kl_BxMxHxK)
  kernel1_BxHxLxM = masked_softmax(logits_BxHxLxM, present_BxM[:, None, None, :])

  # Landmarks over landmarks; an absent landmark becomes an identity row (and, being masked
  # as a key, a zero column elsewhere), so it separates out of the pseudo-inverse.
  logits_BxHxMxM = jnp.einsum("bmhk,bnhk->bhmn", ql_BxMxHxK, kl_BxMxHxK)
  kernel2_BxHxMxM = masked_softmax(logits_BxHxMxM, present_BxM[:, None, None, :])
  kernel2_BxHxMxM = jnp.where(present_BxM[:, None, :, None], kernel2_BxHxMxM,
                              _eye_like(kernel2_BxHxMxM))

  # Landmark queries over the real keys.
  logits_BxHxMxL = jnp.einsum("bmhk,blhk->bhml", ql_BxMxHxK, k_BxLxHxK)
  kernel3_BxHxMxL = masked_softmax(logits_BxHxMxL, keep_BxL[:, None, None, :],
                                   dropout_rng=dropout_rng, dropout_rate=dropout_rate)

  z_BxHxMxM = iterative_pinv(kernel2_BxHxMxM, pinv_iterations)
  w_BxHxMxK = jnp.einsum("bhml,blhk->bhmk", kernel3_BxHxMxL, v_BxLxHxK)
  w_BxHxMxK = jnp.einsum("bhmn,bhnk->bhmk", z_BxHxMxM, w_BxHxMxK, precision=_HIGHEST)
  return jnp.einsum("bhlm,bhmk->blhk", kernel1_BxHxLxM, w_BxHxMxK, precision=_HIGHEST)


def depthwise_conv(v_BxLxHxK, kernel_kxH):
  """Per head, one 1-D kernel along the sequence for all the head's channels; 'same' output
  length with zero padding (cross-correlation, centred for the odd kernel sizes allowed)."""
  batch, length, heads, dim = v_BxLxHxK.shape
  size = kernel_kxH.shape[0]
  v_BxLxC = v_BxLxHxK.reshape(batch, length, heads * dim)
  # Channel c = h * K + k takes head h's kernel: a grouped conv with one channel per group.
  kernel_kx1xC = jnp.repeat(kernel_kxH.astype(v_BxLxC.dtype), dim, axis=1)[:, None, :]
  y_BxLxC = jax.lax.conv_general_dilated(
      v_BxLxC, kernel_kx1xC, window_strides=(1,), padding=[(size // 2, size // 2)],
      dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=heads * dim,
      precision=_HIGHEST)
  return y_BxLxC.reshape(batch, length, heads, dim)


@register("nystromformer")
class NystromAttention(HeadsMixer):
  """Nystrom-approximated softmax attention with segment-mean landmarks."""
  num_landmarks: int = s.setting(64, s.Int(1), "m; the official LRA code offers 32, 64, 128, 256")
  pinv_iterations: int = s.setting(6, s.Int(1), "iterations of the pseudo-inverse (the paper's 6)")
  conv_kernel: int = s.setting(35, s.Int(0),
                               "depthwise conv skip on V along the sequence (odd); 0 = off")

  SUBQUADRATIC = True

  def check_settings(self) -> None:
    super().check_settings()
    if self.conv_kernel % 2 == 0 and self.conv_kernel:
      s.fail(s.attention_key("conv_kernel"), self.conv_kernel,
             "0 (off) or an odd kernel size (LRA: 35)")

  def carried_state(self, width: int, length: int) -> int:
    """The m landmark keys and the m rows pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V that every
    query reads, 2 x min(m, length) x qkv_dim (Zoology's 2 x m x width); the conv skip's
    window of values is not counted (as no mixer's short convolution is)."""
    del width
    return 2 * min(self.num_landmarks, length) * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    rng = self.attention_rng(deterministic)
    y_BxLxHxK = nystrom_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL,
                                  num_landmarks=int(self.num_landmarks),
                                  pinv_iterations=int(self.pinv_iterations),
                                  dropout_rng=rng, dropout_rate=self.dropout_rate)
    if self.conv_kernel:
      # Fan-in k, uniform(+-1/sqrt(k)): the default init of the official torch Conv2d.
      init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform", in_axis=0,
                                              out_axis=1)
      kernel_kxH = self.param("conv", init, (self.conv_kernel, self.num_heads), jnp.float32)
      keep_BxLx1x1 = mask_BxL.astype(bool)[:, :, None, None]
      v_BxLxHxK = jnp.where(keep_BxLx1x1, v_BxLxHxK.astype(jnp.float32), 0.0)
      y_BxLxHxK = y_BxLxHxK + depthwise_conv(v_BxLxHxK, kernel_kxH)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK.astype(self.dtype))
