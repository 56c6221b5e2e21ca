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

A vector decay's four C x C score matrices (A, B and those of q) take one of
models/ops/vector_decay.py's two routes, chosen for the whole call by its guard (jax.lax.cond:
only the chosen one runs): factorised, one matmul each, exp(Gx_t - G_j) = exp(Gx_t - R)
exp(R - G_j) with R the middle of each chunk's and channel's range of G and Gx, where every
exponent lies within +-60 (no factor leaves float32's range); else exact, by sub-chunks, every
factor exp of a non-positive difference, for decays of any strength (a chunk's product may
underflow). Both give the same function; the factorised route runs 3-4x faster here.
Everything in float32. Signed decays are not taken here (the rank-one part carries negative
eigenvalues).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from lra.models.ops import vector_decay
from lra.models.ops.chunking import chunks, unchunk, unit_lower_inverse


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


def _scalar_scores(x, Gx, y, Gy, strict: bool):
  """B x H x N x C x C scores x_t . y_j exp(Gx_t - Gy_j) for j < t (`strict`) or j <= t, 0
  elsewhere, under a scalar decay (Gx, Gy: B x H x N x C): one matmul, every weight exp of a
  non-positive difference."""
  size = x.shape[3]
  keep = jnp.tril(jnp.ones((size, size), bool), -1 if strict else 0)[None, None, None]
  gap = jnp.exp(jnp.where(keep, Gx[..., :, None] - Gy[..., None, :], -jnp.inf))
  return jnp.einsum("bhntk,bhnjk->bhntj", x, y) * gap


def _scores(qc, kc, ec, fc, G, Gx):
  """The chunk's four score matrices: f with e and with k (j < t), q with k and with e
  (j <= t); a vector decay's by the route `vector_decay.factorisable(G, Gx)` picks. Each
  route is rematerialised in the backward pass, so that the cond keeps only its inputs (not
  the exact route's c x c x K weights) for the gradient."""
  def using(pair):
    return jax.checkpoint(lambda qc, kc, ec, fc, G, Gx: (
        pair(fc, Gx, ec, G, True), pair(fc, Gx, kc, G, True),
        pair(qc, G, kc, G, False), pair(qc, G, ec, G, False)))(qc, kc, ec, fc, G, Gx)

  if G.ndim == 4:  # a scalar decay: exact as one matmul
    return using(_scalar_scores)
  R = vector_decay.reference(G, Gx)  # one reference for the four: the guard checks it
  factorised = lambda x, Gx, y, Gy, strict: vector_decay.factorised(x, Gx, y, Gy, R, strict)
  return jax.lax.cond(vector_decay.factorisable(G, Gx), lambda: using(factorised),
                      lambda: using(vector_decay.sub_chunked))


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
