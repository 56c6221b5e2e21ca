"""Mamba's selective scan, y_t = C_t s_t + D u_t with s_t = exp(dt_t A) s_{t-1} + dt_t B_t u_t
(s_0 = 0) per inner channel e and state n, in float32, two ways:

- selective_scan: jax.lax.associative_scan over the whole sequence, the reference. O(log L)
  depth, but batch x L x E x N states at every level of the scan (and kept for the gradient).
- chunked_selective_scan: the same function by chunks of T positions, with no array of
  batch x L x E x N numbers in the forward or the backward pass. Three passes, each either a
  loop of T steps over every chunk at once or a scan over the L / T chunks:
    1. each chunk's end state from a zero start (T steps, all chunks at once), and the
       chunk's total decay exp(A x the chunk's summed dt);
    2. the true start state of every chunk, S_{k+1} = decay_k S_k + end_k (an associative
       scan over the chunks: L / T of them);
    3. the chunk's states again from S_k, y read off at each step (T steps, all chunks).
  The backward pass (a custom VJP) does the same for the adjoint g_t = dL/ds_t, which obeys
  g_t = C_t dy_t + exp(dt_{t+1} A) g_{t+1} backwards in time: each chunk's outgoing adjoint from
  a zero end, the true incoming one of every chunk by a reverse scan over the chunks, then,
  a group of chunks at a time (`group` positions), the group's states forward from their kept
  starts and the adjoint back over them, which gives dA, d dt, dB, dC and du. A train step so
  holds the L / T chunk starts (batch x L/T x N x E) and one group's states, not L x E x N.

Why not Mamba-2's chunked "SSD" form (a chunk's outputs as matmuls with a masked T x T matrix
of decays): it needs one decay per head (a scalar A). Mamba-1's A is per channel and state,
so the decay from position s to t, exp(A[e, n] (cumsum dt[t, e] - cumsum dt[s, e])), is a
T x T x E x N tensor, and factoring it into exp(A cumsum dt[t]) exp(-A cumsum dt[s]) overflows
float32 once |A| x a chunk's total dt passes ~88: not exact. Passes 1 and 3 are the plain
recurrence, exact, and they run T + L / T + T sequential steps instead of L (the loop's cost
on a CPU is its step count: 2 x 64 + 64 steps at 4K tokens and T = 64, not 4,096).

Signed (`signed=True`; Grazzi et al. 2025, their Mamba's 2 exp(dt A) - 1): each step's decay is
a_t = 2 exp(dt_t A) - 1 in (-1, 1] instead of exp(dt_t A) in (0, 1]. The scan multiplies the
decays themselves, not their logarithms, so a negative one needs no sign carried apart, with one
exception: a chunk's total decay, exp(A x the chunk's summed dt) unsigned, is no function of the
summed dt once signed; it is the product of the chunk's a_t, carried by a loop of T steps (all
chunks at once) in the forward and again in the backward pass. The gradient through a step's
decay is d a_t / d(dt_t A) = 2 exp(dt_t A) = a_t + 1 (exp(dt_t A) = a_t unsigned). A padded or
identity step (dt = 0) still has a = 2 - 1 = 1. Unsigned, none of this runs.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from lra.models.ops.diagonal_recurrence import compose

GROUP = 512  # positions per group in the backward pass: the states it keeps at a time


def selective_scan(u_BxLxE, dt_BxLxE, A_ExN, B_BxLxN, C_BxLxN, D_E, *, signed: bool = False):
  """The reference: every state at once by an associative scan over L; float32. `signed`:
  decays 2 exp(dt A) - 1 (module docstring)."""
  a_BxLxExN = jnp.exp(dt_BxLxE[..., None] * A_ExN[None, None])
  if signed:
    a_BxLxExN = 2.0 * a_BxLxExN - 1.0
  b_BxLxExN = (dt_BxLxE * u_BxLxE)[..., None] * B_BxLxN[:, :, None, :]
  _, s_BxLxExN = jax.lax.associative_scan(compose, (a_BxLxExN, b_BxLxExN), axis=1)
  return jnp.einsum("blen,bln->ble", s_BxLxExN, C_BxLxN) + D_E[None, None] * u_BxLxE


def chunked_selective_scan(u_BxLxE, dt_BxLxE, A_ExN, B_BxLxN, C_BxLxN, D_E, chunk: int,
                           group: int = GROUP, *, signed: bool = False):
  """selective_scan's function by chunks of `chunk` positions (module docstring). The
  sequence is padded with identity steps (dt = 0, u = 0) to whole groups of chunks; their
  outputs are dropped."""
  length = u_BxLxE.shape[1]
  chunk = max(1, min(chunk, length))
  count = -(-length // chunk)  # chunks
  per_group = max(1, min(group // chunk, count))
  count = -(-count // per_group) * per_group
  padded = count * chunk

  def to_chunks(v_BxLxF):  # B x L x F -> T x B x K x F (positions in a chunk first)
    v_BxPxF = jnp.pad(v_BxLxF, ((0, 0), (0, padded - length), (0, 0)))
    return v_BxPxF.reshape(v_BxPxF.shape[0], count, chunk, -1).transpose(2, 0, 1, 3)

  seqs = tuple(to_chunks(v.astype(jnp.float32)) for v in (u_BxLxE, dt_BxLxE, B_BxLxN, C_BxLxN))
  y_TxBxKxE = _scan_by_chunks(per_group, signed, *seqs, A_ExN.T.astype(jnp.float32))
  batch = u_BxLxE.shape[0]
  y_BxLxE = y_TxBxKxE.transpose(1, 2, 0, 3).reshape(batch, padded, -1)[:, :length]
  return y_BxLxE + D_E[None, None] * u_BxLxE


def _decay(dt_BxKxE, A_NxE, signed: bool = False):
  """exp(dt A) (2 exp(dt A) - 1 when signed) for every chunk at one position: B x K x N x E."""
  a = jnp.exp(dt_BxKxE[:, :, None, :] * A_NxE[None, None])
  return 2.0 * a - 1.0 if signed else a


def _chunk_decays(dt, A_NxE, signed: bool):
  """Each chunk's total decay, the product of its steps' (B x K x N x E): exp(A x the summed
  dt) unsigned; signed, the product itself, by a loop over the chunk's T positions."""
  if not signed:
    return _decay(jnp.sum(dt, axis=0), A_NxE)
  step = lambda total, dt_t: (total * _decay(dt_t, A_NxE, True), None)
  return jax.lax.scan(step, jnp.ones(dt.shape[1:3] + A_NxE.shape, jnp.float32), dt)[0]


def _input(u_BxKxE, dt_BxKxE, B_BxKxN):
  """dt u B, what a step adds to the state: B x K x N x E."""
  return B_BxKxN[..., None] * (dt_BxKxE * u_BxKxE)[:, :, None, :]


def _states_before(s_BxKxNxE, u, dt, B, A_NxE, signed: bool):
  """The state before each of the T steps from s (all chunks at once): T x B x K x N x E."""
  def step(s, inputs):
    u_t, dt_t, B_t = inputs
    return _decay(dt_t, A_NxE, signed) * s + _input(u_t, dt_t, B_t), s
  return jax.lax.scan(step, s_BxKxNxE, (u, dt, B))[1]


def _chunk_starts(u, dt, B, A_NxE, signed: bool):
  """Pass 1 and 2: the true state at each chunk's start, B x K x N x E (the first zero)."""
  def step(s, inputs):
    u_t, dt_t, B_t = inputs
    return _decay(dt_t, A_NxE, signed) * s + _input(u_t, dt_t, B_t), None
  shape = u.shape[1:3] + A_NxE.shape
  ends, _ = jax.lax.scan(step, jnp.zeros(shape, jnp.float32), (u, dt, B))
  decays = _chunk_decays(dt, A_NxE, signed)  # the product of a chunk's decays
  _, starts = jax.lax.associative_scan(compose, (decays, ends), axis=1)  # after chunk k
  return jnp.concatenate([jnp.zeros_like(starts[:, :1]), starts[:, :-1]], axis=1)


def _forward(u, dt, B, C, A_NxE, signed: bool):
  """Pass 3: y at every position (T x B x K x E), and the chunk starts for the backward."""
  starts = _chunk_starts(u, dt, B, A_NxE, signed)

  def step(s, inputs):
    u_t, dt_t, B_t, C_t = inputs
    s = _decay(dt_t, A_NxE, signed) * s + _input(u_t, dt_t, B_t)
    return s, jnp.sum(s * C_t[..., None], axis=2)
  return jax.lax.scan(step, starts, (u, dt, B, C))[1], starts


def _incoming_adjoints(dt, C, dy, A_NxE, signed: bool):
  """The backward pass's passes 1 and 2: r_k = exp(dt A) g summed back into chunk k's last
  position from the chunks after it, B x K x N x E (the last chunk's zero)."""
  def step(r, inputs):  # back over a chunk's positions: g_t = r + C_t dy_t, r <- exp(dt_t A) g_t
    dt_t, C_t, dy_t = inputs
    return _decay(dt_t, A_NxE, signed) * (r + C_t[..., None] * dy_t[:, :, None, :]), None
  shape = dt.shape[1:3] + A_NxE.shape
  out, _ = jax.lax.scan(step, jnp.zeros(shape, jnp.float32), (dt, C, dy), reverse=True)
  decays = _chunk_decays(dt, A_NxE, signed)
  _, sent = jax.lax.associative_scan(compose, (decays, out), axis=1, reverse=True)
  return jnp.concatenate([sent[:, 1:], jnp.zeros_like(sent[:, :1])], axis=1)


def _group_gradients(A_NxE, signed: bool, inputs):
  """One group of chunks: its states from the kept starts, then the adjoint back over them.
  Returns du, d dt, dB, dC (T x B x G x F) and this group's dA (N x E)."""
  u, dt, B, C, dy, start, incoming = inputs
  s_before = _states_before(start, u, dt, B, A_NxE, signed)  # T x B x G x N x E: s_{t-1}

  def step(r, inputs):
    u_t, dt_t, B_t, C_t, dy_t, s_prev = inputs
    g = r + C_t[..., None] * dy_t[:, :, None, :]  # dL/ds_t
    a = _decay(dt_t, A_NxE, signed)
    decayed = a * s_prev
    dC = jnp.sum((decayed + _input(u_t, dt_t, B_t)) * dy_t[:, :, None, :], axis=3)  # s_t dy_t
    # dL/d(dt_t A) of the step's a s_{t-1}: d a / d(dt A) = a, or a + 1 when signed.
    da = g * (a + 1.0) * s_prev if signed else g * decayed
    dx = jnp.sum(g * B_t[..., None], axis=2)  # dL/d(dt_t u_t)
    ddt = dx * u_t + jnp.sum(da * A_NxE[None, None], axis=2)
    dB = jnp.sum(g * (dt_t * u_t)[:, :, None, :], axis=3)
    dA = jnp.sum(da * dt_t[:, :, None, :], axis=(0, 1))
    return a * g, (dx * dt_t, ddt, dB, dC, dA)
  _, (du, ddt, dB, dC, dA) = jax.lax.scan(step, incoming, (u, dt, B, C, dy, s_before), reverse=True)
  return du, ddt, dB, dC, jnp.sum(dA, axis=0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _scan_by_chunks(per_group, signed, u, dt, B, C, A_NxE):
  """y (T x B x K x E) of the chunked scan from T x B x K x F inputs; a custom VJP."""
  return _forward(u, dt, B, C, A_NxE, signed)[0]


def _scan_fwd(per_group, signed, u, dt, B, C, A_NxE):
  y, starts = _forward(u, dt, B, C, A_NxE, signed)
  return y, (u, dt, B, C, A_NxE, starts)


def _scan_bwd(per_group, signed, residuals, dy):
  u, dt, B, C, A_NxE, starts = residuals
  incoming = _incoming_adjoints(dt, C, dy, A_NxE, signed)
  groups = u.shape[2] // per_group

  def by_group(v, axis):  # the chunk axis split into (groups, per_group), groups first
    shape = v.shape[:axis] + (groups, per_group) + v.shape[axis + 1:]
    return jnp.moveaxis(v.reshape(shape), axis, 0)

  def ungroup(v):  # groups x T x B x per_group x F -> T x B x K x F
    v = jnp.moveaxis(v, 0, 2)
    return v.reshape(v.shape[:2] + (-1,) + v.shape[4:])

  grouped = tuple(by_group(v, 2) for v in (u, dt, B, C, dy))
  grouped += (by_group(starts, 1), by_group(incoming, 1))
  du, ddt, dB, dC, dA = jax.lax.map(lambda g: _group_gradients(A_NxE, signed, g), grouped)
  return ungroup(du), ungroup(ddt), ungroup(dB), ungroup(dC), jnp.sum(dA, axis=0)


_scan_by_chunks.defvjp(_scan_fwd, _scan_bwd)
