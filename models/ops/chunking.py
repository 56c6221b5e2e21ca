"""The chunk bookkeeping the chunked forms of the recurrent core share
(models/ops/matrix_recurrence.py, models/ops/dplr.py): splitting positions into chunks and back,
the causal mask of a chunk, the scan that passes a state from chunk to chunk, and the inverse of
a unit lower-triangular matrix (the UT form's per-chunk solve)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def chunks(a, size: int, fill: float = 0.0):
  """B x L x H x ... -> B x H x N x C x ... (L padded at the end to N C with `fill`)."""
  length = a.shape[1]
  pad = -length % size
  a = jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2), constant_values=fill)
  a = a.reshape((a.shape[0], -1, size) + a.shape[2:])
  return jnp.moveaxis(a, 3, 1)


def unchunk(a_BxHxNxCxV, length: int):
  a = jnp.moveaxis(a_BxHxNxCxV, 1, 3)
  return a.reshape((a.shape[0], -1) + a.shape[3:])[:, :length]


def causal(size: int):
  """1 x 1 x 1 x C x C: j <= t (the rank of a chunked B x H x N x C x C array)."""
  return jnp.tril(jnp.ones((size, size), bool))[None, None, None]


def pass_states(decay_BxHxNxK, write_BxHxNxKxV):
  """The state entering each chunk: S_{n+1} = decay_n S_n (rows) + write_n, S_0 = 0."""
  def step(S, xs):
    decay, write = xs
    return decay[..., None] * S + write, S

  xs = (jnp.moveaxis(decay_BxHxNxK, 2, 0), jnp.moveaxis(write_BxHxNxKxV, 2, 0))
  _, entering = jax.lax.scan(step, jnp.zeros_like(write_BxHxNxKxV[:, :, 0]), xs)
  return jnp.moveaxis(entering, 0, 2)


@jax.custom_vjp
def unit_lower_inverse(A_XxCxC):
  """(I + A)^-1 for strictly lower-triangular A (the last two axes), by forward
  substitution, row by row: row t of the inverse is e_t - sum_{j<t} A_tj (row j). Neither
  jax.lax.linalg.triangular_solve (its CPU kernel hung one run in three inside a larger
  program here, jax 0.10.2) nor a power series ((I - A)(I + A^2)..., whose terms grow like
  binomials for aligned keys) is used. The gradient is the inverse's own:
  d A = -T^T dT T^T, kept strictly lower."""
  return _inverse(A_XxCxC)


def _inverse(A):
  size = A.shape[-1]
  eye = jnp.broadcast_to(jnp.eye(size, dtype=A.dtype), A.shape)

  def row(t, T):
    r = eye[..., t, :] - jnp.einsum("...j,...jc->...c", A[..., t, :], T)
    return T.at[..., t, :].set(r)

  return jax.lax.fori_loop(1, size, row, eye)


def _inverse_fwd(A):
  T = _inverse(A)
  return T, T


def _inverse_bwd(T, dT):
  dA = -jnp.einsum("...jt,...jc,...dc->...td", T, dT, T)
  strictly = jnp.tril(jnp.ones(dA.shape[-2:], bool), -1)
  return (jnp.where(strictly.reshape((1,) * (dA.ndim - 2) + strictly.shape), dA, 0.0),)


unit_lower_inverse.defvjp(_inverse_fwd, _inverse_bwd)
