"""The one computation of the recurrent family (Mamba-2, RetNet, GLA, HGRN2, DeltaNet, Gated
DeltaNet, mLSTM): a matrix state per head, decayed and written position by position, read by
the queries. In two forms that compute the same function: "recurrent", one position at a time
(the reference), and "chunked", the fast one.

For each example and head a state S (K x V) starts at 0 and runs over the positions:
    plain:  S_t = a_t S_{t-1} + w_t k_t v_t^T
    delta:  S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    dplr:   S_t = (diag(a_t) + e_t f_t^T) S_{t-1} + k_t v_t^T   (models/ops/dplr.py: KDA,
            RWKV-7, Comba; fla's generalised delta rule, any decay kind)
    read:   o_t = S_t^T q_t                     (after position t's write)
with a_t = exp(log_decay_t), one of: none (1); a fixed scalar per head (shape H: RetNet); an
input-dependent scalar per head (B x L x H: Mamba-2, mLSTM, Gated DeltaNet); an input-dependent
vector over the key channels (B x L x H x K, diag(a_t) S: GLA, HGRN2). w_t = exp(log_write_t)
(B x L x H, mLSTM's exponential input gate) or 1. The delta rule (DeltaNet, Gated DeltaNet)
takes beta (B x L x H) and a scalar decay or none.

Gates stay in log space: every factor formed is exp of a difference of cumulative log decays
that is <= 0 (a later position minus an earlier one), but for a vector decay's scores, whose
factors a guard keeps inside float32's range (models/ops/vector_decay.py). With log_write the weights
exp(sum log a + log_write) can overflow, so the outputs are returned scaled by exp(-m_t), m_t a
stabiliser (xLSTM's): at least the largest exponent of a write that position t reads, floored
at FLOOR, carried by the max-plus recurrence m_t = max(log a_t + m_{t-1}, log_write_t, FLOOR).
The mixer divides it out (mLSTM: o / max(|n|, exp(-m)), where scaling cancels but for xLSTM's
eps on the denominator), and m is differentiated, as xLSTM differentiates its max_log_D: the
gradient is that of the function computed, eps term included.

Signed decays (Grazzi et al. 2025; models/ops/signed.py): a decay may be negative, a_t in
[-1, 1]. log_decay is then log|a_t| and `negative` (log_decay's shape, boolean) marks a_t < 0;
every factor the core forms, a product of decays between two positions, is its sign times exp
of the same non-positive difference of cumulative log magnitudes. Inside a chunk the sign of
the product over (j, t] is sigma_t sigma_j, sigma_t = (-1)^(negatives in the chunk up to t):
t's sign times j's, so each masked C x C product, each write into the chunk's end state
(sigma_end sigma_j), each read of the entering state (sigma_t) and each chunk's decay
(sigma_end) takes its sign exactly, in the scalar, vector and delta forms alike (a vector
decay's sigma is per key channel: q_t sigma_t and k_j sigma_j, so its sub-chunk split stays
exact). The stabiliser's max-plus recurrence bounds magnitudes, so it
runs on log|a| unchanged. A log magnitude of -inf (a decay of 0) is raised to signed.LOG_ZERO
(exp of it is 0 in float32): a difference -inf - (-inf) would be NaN. Without `negative` none
of this runs (the outputs are bit for bit those of the unsigned core).

Padding: a padded position (mask False) neither decays nor writes the state (a = +1, k = 0,
beta = 0, no write), so the outputs of real positions equal those of the sequence cut to its
real tokens, and padded positions output 0.

The chunked form (Yang et al. 2023, GLA's chunkwise form; Dao & Gu 2024, SSD): chunks of C
positions; inside a chunk an attention-like masked C x C product, between chunks the state
passed on by a scan over the chunks (L / C sequential steps of K x V matmuls instead of L).
A vector decay weighs each key channel separately inside a chunk (models/ops/vector_decay.py:
one matmul a chunk, q exp(G_t - R) by k exp(R - G_j), where a guard shows those factors stay
inside float32's range, else a C x C x K product by sub-chunks, exact for any decay). The
delta rule uses the UT form (Yang et al. 2024, "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length"): inside a chunk, with
Gamma_t = exp(sum of log a up to t inside the chunk) and S_0 the state entering the chunk,
    u_t = beta_t (v_t - Gamma_t S_0^T k_t) - beta_t sum_{j<t} Gamma_t / Gamma_j (k_t . k_j) u_j
is a unit lower-triangular system (I + A) U = beta (V - Gamma K S_0), solved once per chunk for
the parts that do not depend on S_0 (U = T beta V - T beta Gamma K S_0, T = (I + A)^-1); then
S_C = Gamma_C S_0 + sum_j Gamma_C / Gamma_j k_j u_j^T and o_t = Gamma_t S_0^T q_t +
sum_{j<=t} Gamma_t / Gamma_j (q_t . k_j) u_j. Everything in float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from lra.models.ops.chunking import causal as _causal
from lra.models.ops.chunking import chunks as _chunks
from lra.models.ops.chunking import pass_states as _pass_states
from lra.models.ops.chunking import unchunk as _unchunk
from lra.models.ops.chunking import unit_lower_inverse
from lra.models.ops import dplr as _dplr
from lra.models.ops import vector_decay
from lra.models.ops.signed import LOG_ZERO, chunk_signs

FLOOR = -60.0  # the stabiliser's floor: exp(-FLOOR) stays finite in float32
_NO_WRITE = -1e30  # log_write of a padded position: exp() = 0 after any finite shift
FORMS = ("chunked", "recurrent")


def recurrence(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, *, log_decay=None, negative=None,
               beta=None, log_write=None, dplr=None, form: str = "chunked",
               chunk_size: int = 64, reverse: bool = False):
  """(o_BxLxHxV, m_BxLxH): the outputs o_t = S_t^T q_t of the recurrence above (from the end
  when `reverse`), and the stabiliser m (None without log_write; then o is the true output,
  else the true output times exp(-m)). Shapes: see the module docstring; q and k may have
  G heads for v's H (H a multiple of G: head h reads q and k of group h // (H / G), as
  Mamba-2's groups of B and C), and the chunked form of a scalar decay then forms each
  group's C x C product once. `negative` (log_decay's shape): the decays' signs, log_decay
  then their log magnitudes (module docstring). `dplr` = (e, f), each B x L x H x K: the
  diagonal-plus-rank-one transition diag(a_t) + e_t f_t^T (models/ops/dplr.py), with any
  decay kind but no beta, log_write or negative."""
  batch, length, groups, width = q_BxLxHxK.shape
  heads = v_BxLxHxV.shape[2]
  _check_gates(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, log_decay, negative, beta, log_write, dplr,
               form)
  keep_BxL = mask_BxL.astype(bool)
  f32 = lambda a: a.astype(jnp.float32)
  masked = lambda a, fill=0.0: jnp.where(
      keep_BxL.reshape(keep_BxL.shape + (1,) * (a.ndim - 2)), f32(a), fill)
  q, k, v = f32(q_BxLxHxK), masked(k_BxLxHxK), masked(v_BxLxHxV)
  if log_decay is None:
    g = None
  elif log_decay.ndim == 1:  # fixed per head
    g = masked(jnp.broadcast_to(f32(log_decay)[None, None, :], (batch, length, heads)))
  else:
    g = masked(log_decay)
  n = None  # 1.0 where a decay is negative (padding: +1)
  if negative is not None:
    n = masked(jnp.broadcast_to(negative, (batch, length, heads)) if negative.ndim == 1
               else negative)
    g = jnp.maximum(g, LOG_ZERO)  # a decay of 0: -inf would make NaN of -inf - (-inf)
  b = None if beta is None else masked(beta)
  w = None if log_write is None else masked(log_write, _NO_WRITE)
  flip = (lambda a: None if a is None else jnp.flip(a, axis=1)) if reverse else (lambda a: a)
  q, k, v, g, n, b, w = map(flip, (q, k, v, g, n, b, w))
  m = None if w is None else stabiliser(g, w)
  if groups != heads and (form == "recurrent" or b is not None or dplr is not None
                          or (g is not None and g.ndim == 4)):
    q, k = (jnp.repeat(a, heads // groups, axis=2) for a in (q, k))  # per head
  if dplr is not None:  # padding: e = 0 (no rank-one part), a = 1, k = 0
    e, f = (flip(masked(a)) for a in dplr)
    o = (_dplr.recurrent(q, k, v, g, e, f) if form == "recurrent"
         else _dplr.chunked(q, k, v, g, e, f, min(chunk_size, length)))
  elif form == "recurrent":
    o = _recurrent(q, k, v, g, b, w, m, None if n is None else 1.0 - 2.0 * n)
  elif b is not None:
    o = _chunked_delta(q, k, v, g, b, min(chunk_size, length), n)
  else:
    o = _chunked(q, k, v, g, w, m, min(chunk_size, length), n)
  o, m = flip(o), flip(m)
  # A padded position reads nothing: its stabiliser is the floor (a finite exp(-m)).
  return masked(o), (None if m is None else masked(m, FLOOR))


def _check_gates(q, k, v, log_decay, negative, beta, log_write, dplr, form):
  """A ValueError for gates the core does not combine, or shapes that do not fit."""
  groups, width, heads = q.shape[2], q.shape[3], v.shape[2]
  if heads % groups or k.shape[2] != groups:
    raise ValueError(f"q and k have {groups} heads (groups), v {heads}: a multiple of them")
  if beta is not None and (log_write is not None
                           or (log_decay is not None and log_decay.ndim == 4)):
    raise ValueError("the delta rule takes a scalar decay or none, and no log_write")
  if log_write is not None and log_decay is not None and log_decay.ndim == 4:
    raise ValueError("log_write takes a scalar decay or none")
  if negative is not None and (log_decay is None or negative.shape != log_decay.shape):
    raise ValueError("negative marks the signs of log_decay's decays: log_decay's shape")
  if dplr is not None and (beta is not None or log_write is not None or negative is not None
                           or any(a.shape != k.shape[:2] + (heads, width)
                                  for a in dplr)):
    raise ValueError("dplr = (e, f), each B x L x H x K (v's heads), takes a decay alone")
  if form not in FORMS:
    raise ValueError(f"form {form!r} is none of {FORMS}")


def stabiliser(g_BxLxH, w_BxLxH):
  """m_t = max(g_t + m_{t-1}, w_t, FLOOR) by an associative (max, +) scan over L;
  differentiated (the mixer's result depends on it through xLSTM's eps)."""
  g = jnp.zeros_like(w_BxLxH) if g_BxLxH is None else g_BxLxH

  def compose(earlier, later):  # x -> max(a + x, b), the earlier applied first
    a1, b1 = earlier
    a2, b2 = later
    return a1 + a2, jnp.maximum(a2 + b1, b2)

  a, b = jax.lax.associative_scan(compose, (g, w_BxLxH), axis=1)
  return jnp.maximum(jnp.maximum(a + FLOOR, b), FLOOR)


def _recurrent(q, k, v, g, b, w, m, sign):
  """The reference: one position at a time (lax.scan over L), state B x H x K x V; `sign`
  (g's shape, +-1) the decays' signs or None."""
  batch, _, heads, width = q.shape
  state = jnp.zeros((batch, heads, width, v.shape[-1]), jnp.float32)
  zero_BxLxH = jnp.zeros(q.shape[:3], jnp.float32)
  delta = b is not None
  g = zero_BxLxH if g is None else g
  if m is None:  # no stabiliser: m = 0 throughout
    m = m_prev = w = zero_BxLxH
  else:  # the state before position 0 is 0: any stabiliser fits it
    m_prev = jnp.concatenate([jnp.full_like(m[:, :1], FLOOR), m[:, :-1]], axis=1)
  b = zero_BxLxH if b is None else b

  def step(S, xs):
    q_t, k_t, v_t, g_t, b_t, w_t, m_t, mp_t = xs[:8]
    decay = jnp.exp(g_t) if g_t.ndim == 3 else jnp.exp(g_t + mp_t - m_t)
    if sign is not None:
      decay = decay * xs[8]
    S = S * (decay[..., None] if g_t.ndim == 3 else decay[..., None, None])
    if delta:  # a (I - beta k k^T) S + beta k v^T = S' + beta k (v - S'^T k)^T
      v_t = b_t[..., None] * (v_t - jnp.einsum("bhkv,bhk->bhv", S, k_t))
    else:
      v_t = v_t * jnp.exp(w_t - m_t)[..., None]
    S = S + jnp.einsum("bhk,bhv->bhkv", k_t, v_t)
    return S, jnp.einsum("bhkv,bhk->bhv", S, q_t)

  signs = () if sign is None else (sign,)
  xs = [jnp.moveaxis(a, 1, 0) for a in (q, k, v, g, b, w, m, m_prev) + signs]
  _, o = jax.lax.scan(step, state, xs)
  return jnp.moveaxis(o, 0, 1)


def _chunked(q, k, v, g, w, m, size: int, n=None):
  """The plain recurrence by chunks (no delta rule); n: 1.0 where a decay is negative."""
  length = q.shape[1]
  qc, kc, vc = _chunks(q, size), _chunks(k, size), _chunks(v, size)  # B x H|G x N x C x K|V
  zero = jnp.zeros(vc.shape[:4], jnp.float32)  # B x H x N x C
  if g is None:
    G = zero
  else:  # cumulative log decay inside each chunk (padding: 0, no decay)
    G = jnp.cumsum(_chunks(g, size), axis=3)
  sig = None if n is None else chunk_signs(_chunks(n, size))  # G's shape, +-1
  if G.ndim == 5:
    return _unchunk(_chunked_vector(qc, kc, vc, G, sig), length)
  if w is None:
    W, M, M_in = zero, zero, zero[..., 0]
  else:
    # The padding _chunks adds writes nothing and reads nothing (a huge stabiliser).
    W, M = _chunks(w, size, _NO_WRITE), _chunks(m, size, -_NO_WRITE)
    M_in = jnp.concatenate([jnp.full_like(M[:, :, :1, -1], FLOOR), M[:, :, :-1, -1]], axis=2)
  # Scalar factors per head and position (each <= 1), applied to values and outputs so that
  # q and k stay per group: a write into the chunk's end state exp(G_end - G_j + w_j - M_end),
  # a read of the entering state exp(G_t + M_in - M_t), the state's decay over the chunk.
  G_end, M_end = G[..., -1:], M[..., -1:]
  write = jnp.exp(G_end - G + W - M_end)
  read = jnp.exp(G + M_in[..., None] - M)
  decay = jnp.exp(G_end[..., 0] + M_in - M_end[..., 0])  # B x H x N
  if sig is not None:  # the signs of those products (module docstring)
    write, read, decay = write * sig[..., -1:] * sig, read * sig, decay * sig[..., -1]
  grouped = lambda a: a.reshape((a.shape[0], qc.shape[1], -1) + a.shape[2:])  # B x G x R ...
  writes = jnp.einsum("bgnjk,bgrnjv->bgrnkv", kc, grouped(vc * write[..., None]))
  entering = _pass_states(jnp.broadcast_to(decay[..., None], decay.shape + kc.shape[-1:]),
                          writes.reshape(vc.shape[:3] + writes.shape[-2:]))
  inter = jnp.einsum("bgntk,bgrnkv->bgrntv", qc, grouped(entering))
  diff = G[..., :, None] - G[..., None, :] + W[..., None, :] - M[..., :, None]
  weights = grouped(jnp.exp(jnp.where(_causal(size), diff, -jnp.inf)))  # B x G x R x N x C x C
  if sig is not None:
    weights = weights * grouped(sig[..., :, None] * sig[..., None, :])
  scores = jnp.einsum("bgntk,bgnjk->bgntj", qc, kc)[:, :, None] * weights
  intra = jnp.einsum("bgrntj,bgrnjv->bgrntv", scores, grouped(vc))
  o = (intra + inter * grouped(read)[..., None]).reshape(vc.shape)
  return _unchunk(o, length)


def _chunked_vector(qc, kc, vc, G, sig=None):
  """The plain recurrence by chunks under a vector decay (per head: q and k per head); sig
  (G's shape) the chunk's cumulative signs or None."""
  G_end = G[:, :, :, -1:]  # B x H x N x 1 x K
  k_out, chunk_decay = kc * jnp.exp(G_end - G), jnp.exp(G_end[:, :, :, 0])
  if sig is not None:  # sigma_t sigma_j splits: q_t sigma_t, k_j sigma_j; the end's sign
    qc, kc = qc * sig, kc * sig
    k_out, chunk_decay = k_out * sig * sig[:, :, :, -1:], chunk_decay * sig[:, :, :, -1]
  entering = _pass_states(chunk_decay, jnp.einsum("bhnck,bhncv->bhnkv", k_out, vc))
  o = (jnp.einsum("bhntj,bhnjv->bhntv", vector_decay.scores(qc, kc, G), vc)
       + jnp.einsum("bhntk,bhnkv->bhntv", qc * jnp.exp(G), entering))
  return o




def _chunked_delta(q, k, v, g, b, size: int, n=None):
  """The delta rule by chunks (the UT form in the module docstring); n: 1.0 where a decay is
  negative. Gamma_t and the ratios Gamma_t / Gamma_j carry their signs."""
  length = q.shape[1]
  qc, kc, vc, bc = _chunks(q, size), _chunks(k, size), _chunks(v, size), _chunks(b, size)
  G = jnp.zeros(qc.shape[:4], jnp.float32) if g is None else jnp.cumsum(_chunks(g, size), 3)
  causal = _causal(size)
  # Signed: each factor times its sign (sigma_t sigma_j, sigma_t, ...), else as it is; the
  # factors are formed in the unsigned core's order (its gradients' sums keep their order).
  sig = None if n is None else chunk_signs(_chunks(n, size))
  signed = lambda x, sign=lambda s: s: x if sig is None else x * sign(sig)
  # exp(G_t - G_j) for j <= t (0 above the diagonal).
  gap = signed(jnp.exp(jnp.where(causal, G[..., :, None] - G[..., None, :], -jnp.inf)),
               lambda s: s[..., :, None] * s[..., None, :])
  kk = jnp.einsum("bhntk,bhnjk->bhntj", kc, kc)
  eye = jnp.eye(size, dtype=bool)[None, None, None]
  A = jnp.where(causal & ~eye, bc[..., None] * gap * kk, 0.0)
  T = unit_lower_inverse(A)  # (I + A)^-1
  U0 = jnp.einsum("bhntj,bhnjv->bhntv", T, bc[..., None] * vc)  # T beta V
  gamma_k = (bc * signed(jnp.exp(G)))[..., None] * kc  # beta Gamma K
  Wk = jnp.einsum("bhntj,bhnjk->bhntk", T, gamma_k)  # T beta Gamma K
  P = jnp.einsum("bhntk,bhnjk->bhntj", qc, kc) * gap  # (q_t . k_j) Gamma_t / Gamma_j, j <= t
  q_in = qc * signed(jnp.exp(G))[..., None]
  G_end = G[..., -1:]
  k_out = kc * signed(jnp.exp(G_end - G), lambda s: s * s[..., -1:])[..., None]
  decay = signed(jnp.exp(G_end[..., 0]), lambda s: s[..., -1])  # B x H x N

  def step(S, xs):
    U0_n, Wk_n, P_n, q_n, k_n, d_n = xs
    U = U0_n - jnp.einsum("bhck,bhkv->bhcv", Wk_n, S)
    o = jnp.einsum("bhck,bhkv->bhcv", q_n, S) + jnp.einsum("bhcj,bhjv->bhcv", P_n, U)
    return d_n[..., None, None] * S + jnp.einsum("bhck,bhcv->bhkv", k_n, U), o

  xs = [jnp.moveaxis(a, 2, 0) for a in (U0, Wk, P, q_in, k_out, decay)]
  state = jnp.zeros(kc.shape[:2] + (kc.shape[-1], vc.shape[-1]), jnp.float32)
  _, o = jax.lax.scan(step, state, xs)
  return _unchunk(jnp.moveaxis(o, 0, 2), length)
