"""The diagonal linear recurrence x_k = a_k x_{k-1} + b_k by an associative scan over the
positions: the state space mixers' (S5, LRU: a fixed complex diagonal), and the combine step
that Mamba's selective scan (models/ops/selective_scan.py) shares. O(log L) depth."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def compose(earlier, later):
  """Two steps x -> a x + b, the earlier applied first: (a_i, b_i) o (a_j, b_j)."""
  a_i, b_i = earlier
  a_j, b_j = later
  return a_j * a_i, a_j * b_i + b_j


def diagonal_recurrence(lam_N, bu_BxLxN, mask_BxL, *, reverse: bool = False):
  """States x_k = lam x_{k-1} + bu_k (x_0 = 0) for every k, by an associative scan over L.

  Padded positions (mask False) are skipped: their step is the identity (a = 1, b = 0), so
  real positions see exactly the recurrence over the real positions alone. reverse=True runs
  from the end: x_k = lam x_{k+1} + bu_k.
  """
  keep_BxLx1 = mask_BxL.astype(bool)[..., None]
  a_BxLxN = jnp.where(keep_BxLx1, lam_N[None, None, :], jnp.ones((), lam_N.dtype))
  b_BxLxN = jnp.where(keep_BxLx1, bu_BxLxN, jnp.zeros((), bu_BxLxN.dtype))
  _, x_BxLxN = jax.lax.associative_scan(compose, (a_BxLxN, b_BxLxN), reverse=reverse, axis=1)
  return x_BxLxN
