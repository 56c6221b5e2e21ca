"""The scores inside a chunk under a vector decay (a decay per key channel), for the recurrent
core's chunked form (models/ops/matrix_recurrence.py: GLA, HGRN2) and for the four score
matrices of its diagonal-plus-rank-one kind (models/ops/dplr.py: KDA, RWKV-7):
    scores_tj = sum_k q_tk k_jk exp(G_tk - G_jk)   for j <= t, else 0,
G (B x H x N x C x K) the cumulative log decay inside each chunk; `factorised` and
`sub_chunked` take the general pair, sum_k x_tk y_jk exp(Gx_tk - Gy_jk) for j <= t (or j < t),
with two cumulative decays. Two forms and a guard:

- factorised (GLA's chunkwise form, Yang et al. 2023): with a reference R per chunk and
  channel, scores = (q exp(G - R)) (k exp(R - G))^T, masked: one C x K by K x C matmul a
  chunk. A kept term is the product of two float32 factors whose exponents add up to
  G_t - G_j, so it carries float32's relative round-off, as a term formed from
  exp(G_t - G_j) does; only the factors' range can fail (overflow, or a subnormal factor).
- sub-chunked (GLA's secondary chunking, `sub_chunked`): exact whatever the decay's
  strength, at C x C x K work inside its sub-chunks (several times the factorised form's
  time and memory).

The guard: R is the middle of the chunk's range of G (of Gx and Gy together, for a pair) in
each channel ((max + min) / 2; for decays <= 1, (G_first + G_last) / 2), so no exponent
exceeds half the chunk's total decay. When every exponent of every chunk and channel lies in
[-BOUND, BOUND] (`factorisable`, one predicate for the whole call) the factorised form runs,
else the sub-chunked one (jax.lax.cond: under jit only the branch taken runs, and it
differentiates). BOUND = 60 keeps a factor within
e^+-60 |q| or |k|, e^27 inside float32's range (largest number e^88.7, smallest normal one
e^-87.3): no factor overflows while |q|, |k| < 1e11, and a factor goes subnormal only where its
|q| or |k| < 1e-12, its terms then below 1e-12 times the other vector's entry (an absolute
round-off). The masked upper triangle, exp(G_t - G_j) for j > t, may overflow (up to e^(2
BOUND)): jnp.where replaces it by 0, and the factors' gradients read only the kept terms. R
carries no gradient (the scores do not depend on it). A signed decay's signs are on q and k
already (sigma_t, sigma_j), so both forms stay exact under them.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

BOUND = 60.0  # the largest |exponent| of the factorised form's factors (module docstring)
SUB = 16  # the sub-chunked form's sub-chunk


def scores(qc, kc, G, bound: float = BOUND):
  """B x H x N x C x C: the scores above, factorised when `factorisable(G, bound=bound)`, else
  sub-chunked (q, k, G: B x H x N x C x K)."""
  # Each branch rematerialised: lax.cond's gradient would otherwise keep the residuals of
  # both branches (zeros for the one not taken), which cost more than the factorised form.
  factorised_qk = lambda qc, kc, G: factorised(qc, G, kc, G, reference(G))
  sub_chunked_qk = lambda qc, kc, G: sub_chunked(qc, G, kc, G)
  return jax.lax.cond(factorisable(G, bound=bound), jax.checkpoint(factorised_qk),
                      jax.checkpoint(sub_chunked_qk), qc, kc, G)


def reference(*Gs):
  """B x H x N x 1 x K: the middle of each chunk's and channel's range over the cumulative
  decays `Gs` (B x H x N x C x K each; no gradient)."""
  Gs = [jax.lax.stop_gradient(G) for G in Gs]
  top = functools.reduce(jnp.maximum, [jnp.max(G, axis=3, keepdims=True) for G in Gs])
  low = functools.reduce(jnp.minimum, [jnp.min(G, axis=3, keepdims=True) for G in Gs])
  return 0.5 * (top + low)


def factorisable(*Gs, bound: float = BOUND):
  """Whether every factor's exponent G - R (and R - G), R = reference(*Gs), lies in
  [-bound, bound] for each G of `Gs`: a scalar boolean (False where one holds a NaN or an
  infinity)."""
  R = reference(*Gs)
  return functools.reduce(jnp.maximum, [jnp.max(jnp.abs(G - R)) for G in Gs]) <= bound


def factorised(x, Gx, y, Gy, R, strict: bool = False):
  """sum_k x_tk y_jk exp(Gx_tk - Gy_jk) for j <= t (j < t if `strict`), else 0, as one masked
  matmul a chunk about the reference R (module docstring: exact while factorisable)."""
  size = Gx.shape[3]
  keep = jnp.tril(jnp.ones((size, size), bool), -1 if strict else 0)[None, None, None]
  return jnp.where(keep, jnp.einsum("bhntk,bhnjk->bhntj", x * jnp.exp(Gx - R),
                                    y * jnp.exp(R - Gy)), 0.0)


def _sub_size(size: int) -> int:
  """The sub-chunk: the largest divisor of the chunk <= SUB."""
  return max(d for d in range(1, min(size, SUB) + 1) if size % d == 0)


def sub_chunked(x, Gx, y, Gy, strict: bool = False):
  """`factorised`'s scores by sub-chunks of c positions (GLA's secondary chunking), for any
  Gx_t <= Gy_j wherever a score is kept (cumulative log decays: Gx up to t, or t - 1, Gy up
  to j): between sub-chunks s > r the weight splits at R_s, Gy where sub-chunk s begins (its
  previous position's), into exp(Gx_t - R_s) exp(R_s - Gy_j), both <= 1 (a matmul); inside
  a sub-chunk it is formed channel by channel (c x c x K). Exact whatever the decay's
  strength."""
  size, width = Gx.shape[3], Gx.shape[-1]
  c = _sub_size(size)
  subs = size // c
  shape = Gx.shape[:3] + (subs, c, width)
  xs, ys, Gxs, Gys = (a.reshape(shape) for a in (x, y, Gx, Gy))
  # R: B x H x N x S x K, the cumulative decay before each sub-chunk's first position.
  R = jnp.concatenate([jnp.zeros_like(Gys[:, :, :, :1, 0]), Gys[:, :, :, :-1, -1]], axis=3)
  x_hat = xs * jnp.exp(Gxs - R[:, :, :, :, None])  # B x H x N x S x c x K
  # y_j exp(R_s - Gy_j) for j before sub-chunk s (else 0): B x H x N x S x C x K.
  before = (jnp.arange(size)[None, :] < c * jnp.arange(subs)[:, None])[None, None, None]
  gap = R[:, :, :, :, None] - Gy[:, :, :, None]
  y_hat = y[:, :, :, None] * jnp.exp(jnp.where(before[..., None], gap, -jnp.inf))
  scores = jnp.einsum("bhnsik,bhnsjk->bhnsij", x_hat, y_hat)  # B x H x N x S x c x C
  diff = Gxs[..., :, None, :] - Gys[..., None, :, :]  # B x H x N x S x c x c x K
  keep = jnp.tril(jnp.ones((c, c), bool), -1 if strict else 0)
  weights = jnp.exp(jnp.where(keep[None, None, None, None, :, :, None], diff, -jnp.inf))
  diagonal = jnp.einsum("bhnsik,bhnsjk,bhnsijk->bhnsij", xs, ys, weights)
  own = jnp.eye(subs, dtype=bool)[None, None, None, :, None, :, None]  # block s, columns s
  scores = scores.reshape(shape[:5] + (subs, c)) + jnp.where(
      own, diagonal[:, :, :, :, :, None, :], 0.0)
  return scores.reshape(Gx.shape[:3] + (size, size))
