"""What the state space mixers (S4D, S5, LRU) share: complex parameters stored as real pairs,
the diagonal linear recurrence by associative scan, the real products in and out of a complex
state, and the masked float32 input every SSM starts from."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.common import Mixer


class SSMMixer(Mixer):
  """Base of the state space mixers. One that calls `tied_dropout` (S4D, S5, LRU) declares the
  setting tie_dropout: one dropout mask per channel for the whole sequence, as the official
  S4/S5 layers do (Mamba has no dropout inside, and no such setting)."""

  # The SSMs form no L x L array (they encode positions themselves, too).
  SUBQUADRATIC = True

  def causal_reading(self) -> str | None:
    # Each SSM here (S4D, S5, LRU, Mamba) declares `bidirectional`; without it, one causal pass.
    return None if self.bidirectional else f"{s.attention_key('bidirectional')}=False"

  def tied_dropout(self, h_BxLxH, *, deterministic: bool):
    drop = nn.Dropout(self.dropout_rate, broadcast_dims=(1,) if self.tie_dropout else ())
    return drop(h_BxLxH, deterministic=deterministic)

  def check_dt_range(self) -> None:
    """dt_min <= dt_max (each already checked > 0)."""
    if self.dt_min > self.dt_max:
      s.fail(s.attention_key("dt_min"), self.dt_min,
             f"a number <= config.model.attention.dt_max={self.dt_max!r}")


def masked_input(x_BxLxD, mask_BxL):
  """The input in float32 (whatever the compute dtype: long sums and products of complex
  numbers) with padded positions zeroed."""
  return jnp.where(mask_BxL[..., None], x_BxLxD, 0).astype(jnp.float32)


def log_uniform(low: float, high: float):
  """Initialiser: the log of a value uniform in [low, high] in log space, i.e. uniform in
  [log low, log high]."""
  return lambda key, shape: jax.random.uniform(key, shape, jnp.float32, np.log(low),
                                               np.log(high))


def as_complex(pair_Xx2):
  """A complex parameter stored as its (real, imaginary) parts in a last axis of 2."""
  return jax.lax.complex(pair_Xx2[..., 0], pair_Xx2[..., 1])


def as_pair(z):
  """The inverse of as_complex, float32."""
  return jnp.stack([z.real, z.imag], axis=-1).astype(jnp.float32)


def _compose(earlier, later):
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
  _, x_BxLxN = jax.lax.associative_scan(_compose, (a_BxLxN, b_BxLxN), reverse=reverse, axis=1)
  return x_BxLxN


def project_in(u_BxLxH, B_NxH):
  """B u for complex B and real u, as two real products (no complex matmul of a real input)."""
  return jax.lax.complex(jnp.einsum("blh,nh->bln", u_BxLxH, B_NxH.real),
                         jnp.einsum("blh,nh->bln", u_BxLxH, B_NxH.imag))


def real_part_out(x_BxLxN, C_HxNx2):
  """Re(C x) as two real products."""
  return (jnp.einsum("bln,hn->blh", x_BxLxN.real, C_HxNx2[..., 0])
          - jnp.einsum("bln,hn->blh", x_BxLxN.imag, C_HxNx2[..., 1]))


def recurrence_out(lam_N, bu_BxLxN, mask_BxL, C_HxNx2, C2_HxNx2=None):
  """Re(C x_fwd) (+ Re(C2 x_bwd) when C2 is given: the same recurrence from the end)."""
  y_BxLxH = real_part_out(diagonal_recurrence(lam_N, bu_BxLxN, mask_BxL), C_HxNx2)
  if C2_HxNx2 is not None:
    x2_BxLxN = diagonal_recurrence(lam_N, bu_BxLxN, mask_BxL, reverse=True)
    y_BxLxH = y_BxLxH + real_part_out(x2_BxLxN, C2_HxNx2)
  return y_BxLxH


def glu(g_BxLxH, dtype: str):
  """W1 g * sigmoid(W2 g) (Dense "value" and "gate" in the caller's scope)."""
  dense = lambda name: nn.Dense(g_BxLxH.shape[-1], dtype=dtype, name=name)
  return dense("value")(g_BxLxH) * jax.nn.sigmoid(dense("gate")(g_BxLxH))
