"""Based's linear attention (Arora et al. 2024; Zoology's `Based` and `TaylorExp`): softmax's
exp(q.k) replaced by its second-order Taylor expansion 1 + s + s^2 / 2 (s = q.k / sqrt(f)),
written as the dot product of a feature map phi of 1 + f + f^2 features, and normalised:
    y_i = phi(q_i).sum_j phi(k_j) v_j^T / (phi(q_i).sum_j phi(k_j) + EPS)
over the real keys j (j <= i when causal). Non-causal: the sums over every real key, one
(1 + f + f^2) x V state per head. Causal: by chunks of C positions, within a chunk the kernel
itself as a masked C x C product, across chunks the states of the earlier chunks (an exclusive
cumulative sum over chunks, never one state per position as Zoology's cumsum path holds).

Why not the recurrent family's core (models/ops/matrix_recurrence.py), though causal Based is
its plain recurrence without a decay (q = phi(q), k = phi(k), v with a ones column for the
normaliser): the core would form phi(q).phi(k) inside a chunk over all 1 + f + f^2 features
(273 at f = 16) where the kernel needs only q.k over f; without a decay a cumulative sum over
the chunks replaces its scan; the non-causal sums need no chunks at all; and the order of the
float operations, so Based's outputs, would change. Inputs and results in float32.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from lra.models.ops.blocked import padded_blocks

EPS = 1e-12  # Zoology's Based eps, added to the normaliser


def taylor_features(x_BxLxHxF):
  """phi(x) = [1, x / f^(1/4), vec(x x^T) / (sqrt(2) sqrt(f))]: 1 + f + f^2 features whose dot
  products are 1 + s + s^2 / 2, s = q.k / sqrt(f) (Zoology's TaylorExp)."""
  f = x_BxLxHxF.shape[-1]
  outer_BxLxHxFF = (x_BxLxHxF[..., :, None] * x_BxLxHxF[..., None, :]).reshape(
      *x_BxLxHxF.shape[:-1], f * f)
  ones = jnp.ones(x_BxLxHxF.shape[:-1] + (1,), x_BxLxHxF.dtype)
  return jnp.concatenate([ones, x_BxLxHxF / f ** 0.25,
                          outer_BxLxHxFF / (math.sqrt(2) * math.sqrt(f))], axis=-1)


def _causal_chunks(q_BxLxHxF, k_BxLxHxF, v_BxLxHxV, keep_BxL, chunk: int):
  """Causal Taylor linear attention by chunks: (numerator BxLxHxV, normaliser BxLxH)."""
  length, f = keep_BxL.shape[1], q_BxLxHxF.shape[-1]
  c = max(1, min(chunk, length))
  q_BxNxCxHxF, k_BxNxCxHxF, v_BxNxCxHxV = (padded_blocks(t, c)
                                           for t in (q_BxLxHxF, k_BxLxHxF, v_BxLxHxV))
  keep_BxNxC = padded_blocks(keep_BxL, c, value=False)
  phi_k = taylor_features(k_BxNxCxHxF) * keep_BxNxC[..., None, None]
  phi_q = taylor_features(q_BxNxCxHxF)
  # The state each chunk writes, then the sum of the earlier chunks' (shifted, so exact).
  S_BxNxHxPxV = jnp.einsum("bnchp,bnchv->bnhpv", phi_k, v_BxNxCxHxV)
  z_BxNxHxP = jnp.sum(phi_k, axis=2)
  before = lambda a: jnp.cumsum(jnp.pad(a, [(0, 0), (1, 0)] + [(0, 0)] * (a.ndim - 2))[:, :-1],
                                axis=1)
  num_BxNxCxHxV = jnp.einsum("bnchp,bnhpv->bnchv", phi_q, before(S_BxNxHxPxV))
  den_BxNxCxH = jnp.einsum("bnchp,bnhp->bnch", phi_q, before(z_BxNxHxP))
  # Within a chunk: the kernel itself, on keys at or before the query.
  s_BxNxHxCxC = jnp.einsum("bnchf,bndhf->bnhcd", q_BxNxCxHxF, k_BxNxCxHxF) / math.sqrt(f)
  causal_CxC = np.tril(np.ones((c, c), bool))
  a_BxNxHxCxC = jnp.where(causal_CxC[None, None, None] & keep_BxNxC[:, :, None, None, :],
                          1.0 + s_BxNxHxCxC + 0.5 * s_BxNxHxCxC * s_BxNxHxCxC, 0.0)
  num_BxNxCxHxV = num_BxNxCxHxV + jnp.einsum("bnhcd,bndhv->bnchv", a_BxNxHxCxC, v_BxNxCxHxV)
  den_BxNxCxH = den_BxNxCxH + jnp.moveaxis(jnp.sum(a_BxNxHxCxC, axis=-1), 2, 3)
  batch = keep_BxL.shape[0]
  num_BxLxHxV = num_BxNxCxHxV.reshape(batch, -1, *num_BxNxCxHxV.shape[3:])[:, :length]
  return num_BxLxHxV, den_BxNxCxH.reshape(batch, -1, den_BxNxCxH.shape[-1])[:, :length]


def taylor_linear_attention(q_BxLxHxF, k_BxLxHxF, v_BxLxHxV, keep_BxL, *, causal: bool,
                            chunk: int):
  """y_i = phi(q_i).sum_j phi(k_j) v_j^T / (phi(q_i).sum_j phi(k_j) + EPS), over the real keys
  j (j <= i when causal). Inputs and result in float32."""
  if causal:
    num_BxLxHxV, den_BxLxH = _causal_chunks(q_BxLxHxF, k_BxLxHxF, v_BxLxHxV, keep_BxL, chunk)
  else:
    phi_k = taylor_features(k_BxLxHxF) * keep_BxL[..., None, None]  # padded keys write nothing
    phi_q = taylor_features(q_BxLxHxF)
    S_BxHxPxV = jnp.einsum("blhp,blhv->bhpv", phi_k, v_BxLxHxV)
    num_BxLxHxV = jnp.einsum("blhp,bhpv->blhv", phi_q, S_BxHxPxV)
    den_BxLxH = jnp.einsum("blhp,bhp->blh", phi_q, jnp.sum(phi_k, axis=1))
  return num_BxLxHxV / (den_BxLxH[..., None] + EPS)
