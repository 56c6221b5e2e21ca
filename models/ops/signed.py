"""Signed decays (Grazzi et al. 2025, "Unlocking State-Tracking in Linear RNNs Through Negative
Eigenvalues"): a state transition a in [-1, 1] instead of [0, 1], kept in log space as its log
magnitude log|a| beside a boolean `negative` (a < 0).

The extension is the authors' a -> 2a - 1 of a decay a in (0, 1] (their Mamba: 2 exp(dt A) - 1;
their GLA: 2 exp(g) - 1 of the log gate g), computed here from log a:
    2a - 1 = 1 + y,  y = 2 expm1(log a) when a >= 1/2, y = -2a when a < 1/2,
so log|2a - 1| = log1p(y) keeps full float32 precision at both ends (a near 1, the long
memories, and a near 0, where 2a - 1 nears -1). 2a - 1 = 0 (a = 1/2) has no logarithm: its log
magnitude is LOG_ZERO, the log of float32's smallest normal number (about -87.3; exp of it is
a zero for every float32 purpose), with zero gradient, so neither a value nor a gradient is
NaN. A product of signed decays is the parity of its negatives times exp of its summed log
magnitudes; between two positions j < t of one chunk, with sigma_t = (-1)^(negatives up to t),
the sign is sigma_t sigma_j (chunk_signs).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

LOG_ZERO = float(np.log(np.finfo(np.float32).tiny))  # log|a| of a = 0


def extended(log_a):
  """(log|2a - 1|, 2a - 1 < 0) for decays a = exp(log_a) in (0, 1], float32: the range [0, 1]
  stretched to [-1, 1] (module docstring)."""
  log_a = log_a.astype(jnp.float32)
  a = jnp.exp(log_a)
  negative = a < 0.5
  y = jnp.where(negative, -2.0 * a, 2.0 * jnp.expm1(log_a))  # 2a - 1 = 1 + y, y in [-1, 0]
  zero = y <= -1.0
  log_magnitude = jnp.where(zero, LOG_ZERO, jnp.log1p(jnp.where(zero, 0.0, y)))
  return log_magnitude, negative


def chunk_signs(negative_BxHxNxC):
  """sigma = (-1)^(negatives so far in the chunk) along axis 3 (the positions of a chunk), as
  +-1.0 (any trailing axes: a vector decay's channels). `negative` is 1.0 or 0.0."""
  parity = jnp.mod(jnp.cumsum(negative_BxHxNxC, axis=3), 2.0)
  return 1.0 - 2.0 * parity
