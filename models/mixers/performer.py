"""Performer (Choromanski et al. 2021): linear attention with FAVOR+ random features.

softmax(q k^T / sqrt(d)) is replaced by phi(q) phi(k)^T, where the positive random features
phi(x) = exp(w x' - |x'|^2 / 2) / sqrt(m), x' = x / d^(1/4), w ~ N(0, I_d), give an unbiased
estimate of exp(q k / sqrt(d)). Attention is then phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1):
cost linear in L, never an L x L matrix. The original LRA code defaulted to a deterministic
ReLU feature map; here the default is the paper's FAVOR+ (positive, orthogonal, redrawn).

The projection matrix w is not a parameter: in training (with `redraw`) it is drawn afresh
from the "dropout" rng each step; otherwise it is recomputed from PRNGKey(seed) folded with the
layer index. Recomputing costs one small QR per layer and keeps the parameter tree identical to
FullAttention's (no extra collection for checkpoints or optimisers to carry).

Rotary positions (positions="rotary") as RoFormer defines them for kernel attention (Su et al.
2021, eq. 19): the M features are rotated in pairs, R_m phi(q_m) and R_n phi(k_n) (the
rotation of models/common.py at width M, so nb_features must be even), and the normaliser is
left unrotated:
  o_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n / sum_n phi(q_m)^T phi(k_n).
A query then meets a key through m - n only, for every draw of w; rotating q and k before the
features (as QKVProjection does for the softmax mixers) gives that only in expectation over w.
Still linear: sum_n R_n phi(k_n) v_n^T is formed once. As RoFormer says, the denominator stays
unrotated so it cannot reach zero, while the numerator's terms can now be negative: the weights
on the values are no longer a probability distribution, which RoFormer argues still models
how much each value matters.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, rotary_embedding
from lra.models.registry import register

KERNELS = ("softmax", "relu")
# Normalisers at or below this are replaced by 1: a row whose features all vanish (ReLU, or
# no real key) gives output ~0 with finite gradients instead of 0/0. A floor rather than an
# added epsilon, since the stabilising shifts make the normaliser's scale arbitrary and an
# added constant would bias every row by a different amount.
TINY = 1e-20


def _orthonormal_columns(g_NxKxK):
  """Q of G = QR with R's diagonal positive (Haar-distributed for Gaussian G), by Gram-Schmidt
  over the columns, projecting twice for float32 accuracy. Plain jnp ops instead of
  jnp.linalg.qr, whose LAPACK call hung CPU train steps in the benchmark (docs/results.md)."""
  dim = g_NxKxK.shape[-1]

  def orthogonalise(j, q_NxKxK):
    before_1xK = (jnp.arange(dim) < j)[None, :]
    v_NxK = q_NxKxK[:, :, j]
    for _ in range(2):
      coeffs_NxK = jnp.einsum("nkc,nk->nc", q_NxKxK, v_NxK) * before_1xK
      v_NxK = v_NxK - jnp.einsum("nkc,nc->nk", q_NxKxK, coeffs_NxK)
    v_NxK = v_NxK / jnp.linalg.norm(v_NxK, axis=-1, keepdims=True)
    return q_NxKxK.at[:, :, j].set(v_NxK)

  return jax.lax.fori_loop(0, dim, orthogonalise, g_NxKxK)


def random_features(key, nb_features: int, dim: int, *, orthogonal: bool = True):
  """The MxK projection matrix; every row is marginally N(0, I_K).

  Orthogonal: blocks of K mutually orthogonal directions (Haar-random, from QR of Gaussian
  matrices), each row rescaled by an independent chi(K) norm so its marginal stays Gaussian.
  """
  if not orthogonal:
    return jax.random.normal(key, (nb_features, dim), jnp.float32)
  num_blocks = -(-nb_features // dim)
  block_key, norm_key = jax.random.split(key)
  g_NxKxK = jax.random.normal(block_key, (num_blocks, dim, dim), jnp.float32)
  q_NxKxK = _orthonormal_columns(g_NxKxK)
  # Q's columns, as rows: block n holds rows [n K, (n + 1) K), the last block is cut short.
  directions_MxK = jnp.swapaxes(q_NxKxK, 1, 2).reshape(num_blocks * dim, dim)[:nb_features]
  norms_M = jnp.linalg.norm(jax.random.normal(norm_key, (nb_features, dim), jnp.float32),
                            axis=-1)
  return directions_MxK * norms_M[:, None]


def softmax_exponent(x_BxLxHxK, w_MxK):
  """w x' - |x'|^2 / 2 with x' = x / K^(1/4), in float32: the log of sqrt(M) phi(x)."""
  x_BxLxHxK = x_BxLxHxK.astype(jnp.float32) * x_BxLxHxK.shape[-1] ** -0.25
  proj_BxLxHxM = jnp.einsum("blhk,mk->blhm", x_BxLxHxK, w_MxK)
  return proj_BxLxHxM - 0.5 * jnp.sum(jnp.square(x_BxLxHxK), -1, keepdims=True)


def positive_features(x_BxLxHxK, w_MxK):
  """Unstabilised FAVOR+ features: phi(q) . phi(k) estimates exp(q k / sqrt(K))."""
  return jnp.exp(softmax_exponent(x_BxLxHxK, w_MxK)) / np.sqrt(w_MxK.shape[0])


def relu_features(x_BxLxHxK, w_MxK):
  """ReLU random features relu(w x') / sqrt(M); x' = x / K^(1/4) as for softmax."""
  x_BxLxHxK = x_BxLxHxK.astype(jnp.float32) * x_BxLxHxK.shape[-1] ** -0.25
  return jax.nn.relu(jnp.einsum("blhk,mk->blhm", x_BxLxHxK, w_MxK)) / np.sqrt(w_MxK.shape[0])


def stable_softmax_features(q_BxLxHxK, k_BxLxHxK, key_mask_BxL, w_MxK):
  """positive_features of queries and keys, each times a constant that cancels in attention.

  A query row is shifted by its own max exponent (it scales numerator and normaliser alike);
  keys share one shift per (batch, head), the max over real keys, since the sums over keys
  need a common factor. Padded keys are zeroed before exp so neither they nor their
  gradients can overflow.
  """
  scale = 1.0 / np.sqrt(w_MxK.shape[0])
  eq_BxLxHxM = softmax_exponent(q_BxLxHxK, w_MxK)
  shift_BxLxHx1 = jax.lax.stop_gradient(jnp.max(eq_BxLxHxM, -1, keepdims=True))
  phi_q_BxLxHxM = jnp.exp(eq_BxLxHxM - shift_BxLxHx1) * scale

  real_BxLx1x1 = key_mask_BxL.astype(bool)[:, :, None, None]
  ek_BxLxHxM = softmax_exponent(k_BxLxHxK, w_MxK)
  top_Bx1xHx1 = jnp.max(jnp.where(real_BxLx1x1, ek_BxLxHxM, -jnp.inf), (1, 3), keepdims=True)
  # No real key at all: any finite shift will do, the features are zeroed below.
  top_Bx1xHx1 = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top_Bx1xHx1), top_Bx1xHx1, 0.0))
  ek_BxLxHxM = jnp.where(real_BxLx1x1, ek_BxLxHxM - top_Bx1xHx1, 0.0)
  phi_k_BxLxHxM = jnp.where(real_BxLx1x1, jnp.exp(ek_BxLxHxM) * scale, 0.0)
  return phi_q_BxLxHxM, phi_k_BxLxHxM


def linear_attention(phi_q_BxLxHxM, phi_k_BxLxHxM, v_BxLxHxK, key_mask_BxL,
                     rotary: bool = False):
  """phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1) over the real keys; float32 sums. With
  `rotary`, the features rotated by position in the numerator only (RoFormer eq. 19)."""
  real_BxLx1x1 = key_mask_BxL.astype(bool)[:, :, None, None]
  phi_k_BxLxHxM = jnp.where(real_BxLx1x1, phi_k_BxLxHxM, 0.0)
  den_BxLxH = jnp.einsum("blhm,bhm->blh", phi_q_BxLxHxM, jnp.sum(phi_k_BxLxHxM, 1))
  den_BxLxH = jnp.where(den_BxLxH > TINY, den_BxLxH, 1.0)
  if rotary:
    phi_q_BxLxHxM = rotary_embedding(phi_q_BxLxHxM)
    phi_k_BxLxHxM = rotary_embedding(phi_k_BxLxHxM)
  kv_BxHxMxK = jnp.einsum("blhm,blhk->bhmk", phi_k_BxLxHxM, v_BxLxHxK.astype(jnp.float32))
  num_BxLxHxK = jnp.einsum("blhm,bhmk->blhk", phi_q_BxLxHxM, kv_BxHxMxK)
  return (num_BxLxHxK / den_BxLxH[..., None]).astype(v_BxLxHxK.dtype)


def favor_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, key_mask_BxL, w_MxK,
                    kernel: str = "softmax", rotary: bool = False):
  """Performer attention with projection matrix w_MxK (shared by all heads); `rotary`:
  RoFormer's rotation of the features (linear_attention)."""
  if kernel == "softmax":
    phi_q, phi_k = stable_softmax_features(q_BxLxHxK, k_BxLxHxK, key_mask_BxL, w_MxK)
  elif kernel == "relu":
    phi_q, phi_k = relu_features(q_BxLxHxK, w_MxK), relu_features(k_BxLxHxK, w_MxK)
  else:
    raise ValueError(f"unknown performer kernel {kernel!r}; valid: {', '.join(KERNELS)}")
  return linear_attention(phi_q, phi_k, v_BxLxHxK, key_mask_BxL, rotary)


@register("performer")
class PerformerAttention(HeadsMixer):
  """FAVOR+ linear attention; random features shared by the heads of a layer."""
  layer_index: int = 0  # decorrelates the fixed features of different layers
  nb_features: int = s.setting(256, s.Int(1), "m, random features per head")
  kernel: str = s.setting("softmax", s.Choice(KERNELS),
                          '"softmax": positive features (FAVOR+); "relu": ReLU features')
  orthogonal: bool = s.setting(True, s.Bool(),
                               "orthogonal random features (lower variance than iid)")
  redraw: bool = s.setting(True, s.Bool(),
                           'fresh features every training step, from the "dropout" rng')
  seed: int = s.setting(0, s.Int(0),
                        "the fixed features used in evaluation (and in training without redraw)")

  SUBQUADRATIC = True

  def check_settings(self) -> None:
    super().check_settings()
    if self.rotary and self.nb_features % 2:
      s.fail(s.attention_key("nb_features"), self.nb_features,
             "an even number with positions='rotary' (the features rotate in pairs)")

  def carried_state(self, width: int, length: int) -> int:
    """The sums phi(K)^T V (m x K) and phi(K)^T 1 (m) per head, H x m x (K + 1) for m
    random features: one sum over the sequence (non-causal), read at every position."""
    del width, length
    return self.num_heads * self.nb_features * (self.head_dim + 1)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    # Unrotated projections: the rotation comes after the feature map (linear_attention).
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype)(x_BxLxD)
    if self.redraw and not deterministic:
      key = self.make_rng("dropout")
    else:
      key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self.layer_index)
    w_MxK = random_features(key, int(self.nb_features), q_BxLxHxK.shape[-1],
                            orthogonal=self.orthogonal)
    y_BxLxHxK = favor_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, w_MxK, self.kernel,
                                self.rotary)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
