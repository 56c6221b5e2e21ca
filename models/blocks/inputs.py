"""What a mixer's input goes through first, and the state space mixers' (S4D, S5, LRU) real
products in and out of a complex state: the masked float32 input, complex parameters stored as
real pairs, B u and Re(C x) as real products, and the GLU their outputs pass."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.ops.diagonal_recurrence import diagonal_recurrence


def masked_input(x_BxLxD, mask_BxL):
  """The input in float32 (whatever the compute dtype: long sums and products of complex
  numbers) with padded positions zeroed."""
  return jnp.where(mask_BxL[..., None], x_BxLxD, 0).astype(jnp.float32)


def as_complex(pair_Xx2):
  """A complex parameter stored as its (real, imaginary) parts in a last axis of 2."""
  return jax.lax.complex(pair_Xx2[..., 0], pair_Xx2[..., 1])


def as_pair(z):
  """The inverse of as_complex, float32."""
  return jnp.stack([z.real, z.imag], axis=-1).astype(jnp.float32)


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
