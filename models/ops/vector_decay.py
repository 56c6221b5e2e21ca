"""The scores inside a chunk under a vector decay (GLA, HGRN2: a decay per key channel), for
the recurrent core's chunked form (models/ops/matrix_recurrence.py):
    scores_tj = sum_k q_tk k_jk exp(G_tk - G_jk)   for j <= t, else 0,
G (B x H x N x C x K) the cumulative log decay inside each chunk. Two forms and a guard:

- factorised (GLA's chunkwise form, Yang et al. 2023): with a reference R per chunk and
  channel, scores = (q exp(G - R)) (k exp(R - G))^T, masked: one C x K by K x C matmul a
  chunk. A kept term is the product of two float32 factors whose exponents add up to
  G_t - G_j, so it carries float32's relative round-off, as a term formed from
  exp(G_t - G_j) does; only the factors' range can fail (overflow, or a subnormal factor).
- sub-chunked (GLA's secondary chunking, `sub_chunked`): exact whatever the decay's
  strength, at C x C x K work inside its sub-chunks (several times the factorised form's
  time and memory).

The guard: R is the middle of the chunk's range of G in each channel ((max + min) / 2; for
decays <= 1, (G_first + G_last) / 2), so no exponent exceeds half the chunk's total decay. When
every exponent of every chunk and channel lies in [-BOUND, BOUND] (`factorisable`, one
predicate for the whole call) the factorised form runs, else the sub-chunked one (jax.lax.cond:
under jit only the branch taken runs, and it differentiates). BOUND = 60 keeps a factor within
e^+-60 |q| or |k|, e^27 inside float32's range (largest number e^88.7, smallest normal one
e^-87.3): no factor overflows while |q|, |k| < 1e11, and a factor goes subnormal only where its
|q| or |k| < 1e-12, its terms then below 1e-12 times the other vector's entry (an absolute
round-off). The masked upper triangle, exp(G_t - G_j) for j > t, may overflow (up to e^(2
BOUND)): jnp.where replaces it by 0, and the factors' gradients read only the kept terms. R
carries no gradient (the scores do not depend on it). A signed decay's signs are on q and k
already (sigma_t, sigma_j), so both forms stay exact under them.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

BOUND = 60.0  # the largest |exponent| of the factorised form's factors (module docstring)
SUB = 16  # the sub-chunked form's sub-chunk


def scores(qc, kc, G, bound: float = BOUND):
  """B x H x N x C x C: the scores above, factorised when `factorisable(G, bound)`, else
  sub-chunked (q, k, G: B x H x N x C x K)."""
  # Each branch rematerialised: lax.cond's gradient would otherwise keep the residuals of
  # both branches (zeros for the one not taken), which cost more than the factorised form.
  return jax.lax.cond(factorisable(G, bound), jax.checkpoint(factorised),
                      jax.checkpoint(sub_chunked), qc, kc, G)


def reference(G):
  """B x H x N x 1 x K: the middle of each chunk's and channel's range of G (no gradient)."""
  G = jax.lax.stop_gradient(G)
  return 0.5 * (jnp.max(G, axis=3, keepdims=True) + jnp.min(G, axis=3, keepdims=True))


def factorisable(G, bound: float = BOUND):
  """Whether every factor's exponent G - R (and R - G) lies in [-bound, bound]: a scalar
  boolean (False where G holds a NaN or an infinity)."""
  return jnp.max(jnp.abs(G - reference(G))) <= bound


def factorised(qc, kc, G):
  """The scores as one masked matmul per chunk (module docstring: exact while factorisable)."""
  R = reference(G)
  q_hat, k_hat = qc * jnp.exp(G - R), kc * jnp.exp(R - G)
  size = G.shape[3]
  causal = jnp.tril(jnp.ones((size, size), bool))[None, None, None]
  return jnp.where(causal, jnp.einsum("bhntk,bhnjk->bhntj", q_hat, k_hat), 0.0)


def _sub_size(size: int) -> int:
  """The sub-chunk: the largest divisor of the chunk <= SUB."""
  return max(d for d in range(1, min(size, SUB) + 1) if size % d == 0)


def sub_chunked(qc, kc, G):
  """The scores by sub-chunks of c positions (GLA's secondary chunking): between sub-chunks
  a > b the weight splits at R_a, the cumulative decay where sub-chunk a starts, into
  exp(G_t - R_a) exp(R_a - G_j), both <= 1 (a matmul); inside a sub-chunk it is formed
  channel by channel (c x c x K). Exact whatever the decay's strength."""
  size, width = G.shape[3], G.shape[-1]
  c = _sub_size(size)
  subs = size // c
  shape = G.shape[:3] + (subs, c, width)
  Gs, qs, ks = G.reshape(shape), qc.reshape(shape), kc.reshape(shape)
  # R: B x H x N x S x K, the cumulative decay before each sub-chunk's first position.
  R = jnp.concatenate([jnp.zeros_like(Gs[:, :, :, :1, 0]), Gs[:, :, :, :-1, -1]], axis=3)
  q_hat = qs * jnp.exp(Gs - R[:, :, :, :, None])  # B x H x N x S x c x K
  # k_j exp(R_a - G_j) for j before sub-chunk a (else 0): B x H x N x S x C x K.
  before = (jnp.arange(size)[None, :] < c * jnp.arange(subs)[:, None])[None, None, None]
  gap = R[:, :, :, :, None] - G[:, :, :, None]
  k_hat = kc[:, :, :, None] * jnp.exp(jnp.where(before[..., None], gap, -jnp.inf))
  scores = jnp.einsum("bhnsik,bhnsjk->bhnsij", q_hat, k_hat)  # B x H x N x S x c x C
  diff = Gs[..., :, None, :] - Gs[..., None, :, :]  # B x H x N x S x c x c x K
  inside = jnp.tril(jnp.ones((c, c), bool))[None, None, None, None, :, :, None]
  weights = jnp.exp(jnp.where(inside, diff, -jnp.inf))
  diagonal = jnp.einsum("bhnsik,bhnsjk,bhnsijk->bhnsij", qs, ks, weights)
  own = jnp.eye(subs, dtype=bool)[None, None, None, :, None, :, None]  # block s, columns s
  scores = scores.reshape(shape[:5] + (subs, c)) + jnp.where(
      own, diagonal[:, :, :, :, :, None, :], 0.0)
  return scores.reshape(G.shape[:3] + (size, size))
