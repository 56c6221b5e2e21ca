"""RWKV's token shift: each position's input beside the previous position's, the difference
x_{t-1} - x_t that RWKV's time mix interpolates along (fla's token_shift: ZeroPad2d((0, 0, 1,
-1)) - x). With padding, "previous" is the previous REAL position, as the recurrent core treats
padding (a padded position neither decays nor writes the state): a real token after a hole
reads the last real token before it, the first real token reads 0, so the real outputs are
those of the sequence with its padded positions removed. Without padding this is fla's shift;
with left padding (fla's convention: the inputs zeroed there) it equals fla's too. It reads
the previous position in both passes of a bidirectional mixer (as the family's short
convolutions stay causal)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def previous_real(x_BxLxD, mask_BxL):
  """B x L x D: x at the last real position before each position (0 where there is none)."""
  batch, length = mask_BxL.shape
  position_L = jnp.arange(length)
  last_BxL = jax.lax.cummax(jnp.where(mask_BxL, position_L[None, :], -1), axis=1)  # <= t
  before_BxL = jnp.concatenate([jnp.full((batch, 1), -1, last_BxL.dtype), last_BxL[:, :-1]],
                               axis=1)  # < t
  gathered_BxLxD = jnp.take_along_axis(x_BxLxD, jnp.maximum(before_BxL, 0)[..., None], axis=1)
  return jnp.where((before_BxL >= 0)[..., None], gathered_BxLxD, 0)


def shift_difference(x_BxLxD, mask_BxL):
  """x_{t-1} - x_t with x_{t-1} the previous real position's input (previous_real)."""
  return previous_real(x_BxLxD, mask_BxL) - x_BxLxD
