"""The core's diagonal-plus-rank-one kind (fla's generalised delta rule, "DPLR"): per example
and head a K x V state runs over the positions as
    S_t = (diag(a_t) + e_t f_t^T) S_{t-1} + k_t v_t^T,    o_t = S_t^T q_t
with a_t = exp(log_decay_t) a decay per head (scalar, B x L x H; or fixed, H) or per key
channel (vector, B x L x H x K) or none, and e_t, f_t (B x L x H x K) the rank-one part: f_t
reads the value the state holds at f_t (f_t^T S_{t-1}, before the decay), e_t writes it back.
Special cases: the delta rule with a scalar decay (e = -a beta k, f = k, the write beta k v^T),
KDA's (I - beta k k^T) diag(a) (e = -beta k, f = a k), Comba's erase key p apart from the
write key k (e = -beta k, f = a p), RWKV-7's separate erase and write vectors (e = b, f = a).
models/ops/matrix_recurrence.py's `recurrence` runs it (its `dplr=(e, f)`), with its masking,
directions and forms; this module holds the two forms.

The chunked form (the UT/WY form of Yang et al. 2024, generalised as fla's DPLR kernels):
inside a chunk of C positions, with G_t the cumulative log decay up to t (Gamma_t = exp G_t),
Gx_t = G_t - log a_t (up to t - 1) and S_0 the state entering the chunk,
    S_t = Gamma_t S_0 + sum_{j<=t} Gamma_t / Gamma_j (e_j u_j^T + k_j v_j^T)
    u_t = f_t^T S_{t-1} = (f_t Gamma_{t-1})^T S_0 + sum_{j<t} A_tj u_j + sum_{j<t} B_tj v_j
with A_tj = sum_k f_tk e_jk exp(Gx_tk - G_jk) and B_tj the same with k_j: a unit
lower-triangular system (I - A) U = F S_0 + B V, solved once per chunk (T = (I - A)^-1) for
the parts that do not depend on S_0, so that the scan over chunks only multiplies. The
outputs and the next chunk's state follow from U by the same decayed scores with q (j <= t).

A vector decay's four C x C score matrices (A, B and those of q) take one of two routes,
chosen for the whole call by `factorisable` (jax.lax.cond: only the chosen one runs):
- factorised, one matmul each: exp(Gx_t - G_j) = exp(Gx_t - R) exp(R - G_j) with R the
  cumulative decay at the chunk's middle, so every exponent lies within [-X, X], X the larger
  of -R and R - G_end. When X <= BOUND in every chunk and channel, no factor leaves float32's
  normal range (e^40 = 2.4e17) and the product is the true weight to round-off;
- exact, by sub-chunks (models/ops/matrix_recurrence.py's secondary chunking: a matmul
  between sub-chunks after splitting the decay at the sub-chunk boundary, channel by channel
  inside one), where every factor is exp of a non-positive difference: for decays of any
  strength (a chunk's product may underflow).
Both give the same function; the factorised route runs 3-4x faster here. Everything in float32. Signed decays are not taken here (the rank-one part carries negative eigenvalues).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from lra.models.ops.chunking import chunks, unchunk, unit_lower_inverse

SUB = 16  # a vector decay's sub-chunk (pair_scores)
BOUND = 40.0  # the largest |exponent| the factorised route forms (module docstring)


def recurrent(q, k, v, g, e, f):
  """The reference, one position at a time: B x L x H x V outputs of the recurrence above for
  per-head q, k, e, f (B x L x H x K), v (B x L x H x V) and g the log decay (None,
  B x L x H or B x L x H x K; padding already made inert by the caller)."""
  batch, _, heads, width = q.shape
  state = jnp.zeros((batch, heads, width, v.shape[-1]), jnp.float32)
  g = jnp.zeros(q.shape[:3], jnp.float32) if g is None else g

  def step(S, xs):
    q_t, k_t, v_t, g_t, e_t, f_t = xs
    decay = jnp.exp(g_t)[..., None] if g_t.ndim == 2 else jnp.exp(g_t)  # B x H x (1|K)
    held = jnp.einsum("bhk,bhkv->bhv", f_t, S)  # f_t^T S_{t-1}, before the decay
    S = (decay[..., None] * S + jnp.einsum("bhk,bhv->bhkv", e_t, held)
         + jnp.einsum("bhk,bhv->bhkv", k_t, v_t))
    return S, jnp.einsum("bhkv,bhk->bhv", S, q_t)

  xs = [jnp.moveaxis(a, 1, 0) for a in (q, k, v, g, e, f)]
  _, o = jax.lax.scan(step, state, xs)
  return jnp.moveaxis(o, 0, 1)


def _sub_size(size: int) -> int:
  """The largest divisor of the chunk that is <= SUB."""
  return max(d for d in range(1, min(size, SUB) + 1) if size % d == 0)


def pair_scores(x, Gx, y, Gy, strict: bool):
  """B x H x N x C x C scores sum_k x_tk y_jk exp(Gx_tk - Gy_jk) for j < t (`strict`) or
  j <= t, 0 elsewhere; x, y: B x H x N x C x K; Gx, Gy: B x H x N x C (a scalar decay) or
  x's shape (a vector decay), with Gx_t <= Gy_j wherever a score is kept (both cumulative
  log decays, Gx up to t or t - 1, Gy up to j). A vector decay goes by sub-chunks of c
  positions: between sub-chunks s > r the weight splits at R_s = Gy where sub-chunk s
  begins (its previous position's), exp(Gx_t - R_s) exp(R_s - Gy_j), both <= 1 (a matmul);
  inside one it is formed channel by channel (c x c x K)."""
  size = x.shape[3]
  keep = jnp.tril(jnp.ones((size, size), bool), -1 if strict else 0)[None, None, None]
  if Gx.ndim == 4:
    gap = jnp.exp(jnp.where(keep, Gx[..., :, None] - Gy[..., None, :], -jnp.inf))
    return jnp.einsum("bhntk,bhnjk->bhntj", x, y) * gap
  c, width = _sub_size(size), x.shape[-1]
  subs = size // c
  shape = x.shape[:3] + (subs, c, width)
  xs, ys, Gxs, Gys = (a.reshape(shape) for a in (x, y, Gx, Gy))
  R = jnp.concatenate([jnp.zeros_like(Gys[:, :, :, :1, 0]), Gys[:, :, :, :-1, -1]], axis=3)
  x_hat = xs * jnp.exp(Gxs - R[:, :, :, :, None])  # B x H x N x S x c x K
  before = (jnp.arange(size)[None, :] < c * jnp.arange(subs)[:, None])[None, None, None]
  gap = R[:, :, :, :, None] - Gy[:, :, :, None]  # B x H x N x S x C x K
  y_hat = y[:, :, :, None] * jnp.exp(jnp.where(before[..., None], gap, -jnp.inf))
  scores = jnp.einsum("bhnsik,bhnsjk->bhnsij", x_hat, y_hat)  # B x H x N x S x c x C
  inside = jnp.tril(jnp.ones((c, c), bool), -1 if strict else 0)[None, None, None, None]
  diff = Gxs[..., :, None, :] - Gys[..., None, :, :]  # B x H x N x S x c x c x K
  weights = jnp.exp(jnp.where(inside[..., None], diff, -jnp.inf))
  diagonal = jnp.einsum("bhnsik,bhnsjk,bhnsijk->bhnsij", xs, ys, weights)
  own = jnp.eye(subs, dtype=bool)[None, None, None, :, None, :, None]  # block s, columns s
  scores = scores.reshape(shape[:5] + (subs, c)) + jnp.where(
      own, diagonal[:, :, :, :, :, None, :], 0.0)
  return scores.reshape(x.shape[:3] + (size, size))


def factorisable(G_BxHxNxCxK):
  """True when the factorised route's exponents stay within BOUND in every chunk and channel:
  about the middle of each chunk, max(-R, R - G_end) <= BOUND (module docstring)."""
  size = G_BxHxNxCxK.shape[3]
  R, end = G_BxHxNxCxK[:, :, :, size // 2], G_BxHxNxCxK[:, :, :, -1]
  return jnp.all(jnp.maximum(-R, R - end) <= BOUND)


def _factorised_scores(x, Gx, y, Gy, strict: bool):
  """pair_scores of a vector decay as one matmul about the chunk's middle (exact only where
  `factorisable`)."""
  size = x.shape[3]
  R = Gy[:, :, :, size // 2:size // 2 + 1]
  scores = jnp.einsum("bhntk,bhnjk->bhntj", x * jnp.exp(Gx - R), y * jnp.exp(R - Gy))
  keep = jnp.tril(jnp.ones((size, size), bool), -1 if strict else 0)[None, None, None]
  return jnp.where(keep, scores, 0.0)


def _scores(qc, kc, ec, fc, G, Gx):
  """The chunk's four score matrices: f with e and with k (j < t), q with k and with e
  (j <= t); a vector decay's by the route `factorisable` picks. Each route is rematerialised
  in the backward pass, so that the cond keeps only its inputs (not the exact route's
  c x c x K weights) for the gradient."""
  def using(pair):
    return jax.checkpoint(lambda qc, kc, ec, fc, G, Gx: (
        pair(fc, Gx, ec, G, True), pair(fc, Gx, kc, G, True),
        pair(qc, G, kc, G, False), pair(qc, G, ec, G, False)))(qc, kc, ec, fc, G, Gx)

  if G.ndim == 4:  # a scalar decay: exact as one matmul
    return using(pair_scores)
  return jax.lax.cond(factorisable(G), lambda: using(_factorised_scores),
                      lambda: using(pair_scores))


def chunked(q, k, v, g, e, f, size: int):
  """The recurrence by chunks of `size` (module docstring); arguments as `recurrent`'s."""
  length = q.shape[1]
  qc, kc, vc, ec, fc = (chunks(a, size) for a in (q, k, v, e, f))  # B x H x N x C x K|V
  if g is None:
    gc = jnp.zeros(qc.shape[:4], jnp.float32)
  else:
    gc = chunks(g, size)
  G = jnp.cumsum(gc, axis=3)  # up to t
  Gx = G - gc  # up to t - 1
  per_key = (lambda a: a) if G.ndim == 5 else (lambda a: a[..., None])
  A, B, O, P = _scores(qc, kc, ec, fc, G, Gx)
  T = unit_lower_inverse(-A)  # (I - A)^-1
  matmul = lambda a, b: jnp.einsum("bhntj,bhnjx->bhntx", a, b)
  U0 = matmul(T, matmul(B, vc))  # T B V
  W = matmul(T, fc * jnp.exp(per_key(Gx)))  # T F: U = U0 + W S_0
  O0 = matmul(O, vc)
  q_in = qc * jnp.exp(per_key(G))
  to_end = jnp.exp(per_key(G[:, :, :, -1:] - G))
  e_out = ec * to_end
  written = jnp.einsum("bhnck,bhncv->bhnkv", kc * to_end, vc)
  decay = jnp.broadcast_to(jnp.exp(per_key(G[:, :, :, -1])), qc.shape[:3] + qc.shape[-1:])

  def step(S, xs):
    U0_n, W_n, P_n, q_n, O0_n, e_n, w_n, d_n = xs
    U = U0_n + jnp.einsum("bhck,bhkv->bhcv", W_n, S)
    o = jnp.einsum("bhck,bhkv->bhcv", q_n, S) + jnp.einsum("bhcj,bhjv->bhcv", P_n, U) + O0_n
    return d_n[..., None] * S + jnp.einsum("bhck,bhcv->bhkv", e_n, U) + w_n, o

  xs = [jnp.moveaxis(a, 2, 0) for a in (U0, W, P, q_in, O0, e_out, written, decay)]
  state = jnp.zeros(kc.shape[:2] + (kc.shape[-1], vc.shape[-1]), jnp.float32)
  _, o = jax.lax.scan(step, state, xs)
  return unchunk(jnp.moveaxis(o, 0, 2), length)
