"""Shared pieces of the block-sparse mixers: padding to whole blocks, gathering key blocks,
and softmax attention over the gathered keys only (no L x L matrix anywhere)."""
from __future__ import annotations

import jax.numpy as jnp

from lra.models.common import masked_softmax


def pad_to_blocks(x_BxLx___, block: int, value=0):
  """Pads the length axis (1) up to a multiple of `block`; returns (padded, original length)."""
  length = x_BxLx___.shape[1]
  extra = -length % block
  if extra:
    widths = [(0, 0), (0, extra)] + [(0, 0)] * (x_BxLx___.ndim - 2)
    x_BxLx___ = jnp.pad(x_BxLx___, widths, constant_values=value)
  return x_BxLx___, length


def to_blocks(x_BxLx___, block: int):
  """BxLx... -> BxNxbx... (L must be a multiple of block)."""
  b, length = x_BxLx___.shape[:2]
  return x_BxLx___.reshape(b, length // block, block, *x_BxLx___.shape[2:])


def padded_blocks(x_BxLx___, block: int, value=0):
  """pad_to_blocks then to_blocks: BxLx... -> BxNxbx... (N = ceil(L / block))."""
  return to_blocks(pad_to_blocks(x_BxLx___, block, value)[0], block)


def gather_blocks(x_BxNxbx___, index_NxR):
  """For every query block n, the R key blocks index[n] side by side: BxNx(R*b)x..."""
  g_BxNxRxbx___ = jnp.take(x_BxNxbx___, index_NxR, axis=1)
  b, n, r, blk = g_BxNxRxbx___.shape[:4]
  return g_BxNxRxbx___.reshape(b, n, r * blk, *g_BxNxRxbx___.shape[4:])


def attend(q_BxNxQxHxK, k_BxNxMxHxK, v_BxNxMxHxK, allowed_BxNxQxM, *, dropout_rng=None,
           dropout_rate: float = 0.0):
  """Softmax attention of each query block over its own M gathered keys (logits in float32).

  `allowed` (broadcastable to BxNxQxM) says which query-key pairs the pattern keeps; padded keys
  must already be False in it.
  """
  scale = q_BxNxQxHxK.shape[-1] ** -0.5
  logits_BxNxHxQxM = jnp.einsum("bnqhk,bnmhk->bnhqm", q_BxNxQxHxK * scale, k_BxNxMxHxK,
                                preferred_element_type=jnp.float32)
  weights_BxNxHxQxM = masked_softmax(logits_BxNxHxQxM, allowed_BxNxQxM[:, :, None],
                                     dropout_rng=dropout_rng, dropout_rate=dropout_rate)
  return jnp.einsum("bnhqm,bnmhk->bnqhk", weights_BxNxHxQxM.astype(v_BxNxMxHxK.dtype),
                    v_BxNxMxHxK)
