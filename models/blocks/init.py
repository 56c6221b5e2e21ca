"""Initialisers the mixers share: PyTorch's defaults (the official Mamba, DeltaNet and HGRN2
layers keep them), fla's N(0, 0.02), the state space models' log-uniform draws and the one
dt_bias initialisation of Mamba, Mamba-2 and Gated DeltaNet (softplus(dt_bias) = dt at init)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

DT_FLOOR = 1e-4  # the official dt_init_floor: dt at init is at least this
# PyTorch's default nn.Linear / nn.Conv1d initialisation: uniform in
# [-1/sqrt(fan_in), 1/sqrt(fan_in)].
torch_default = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")
fla_init = nn.initializers.normal(stddev=0.02)  # fla's _init_weights: initializer_range


def symmetric_uniform(bound: float):
  """Initialiser: uniform in [-bound, bound]."""
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound,
                                                                 bound)


def log_uniform(low: float, high: float):
  """Initialiser: the log of a value uniform in [low, high] in log space, i.e. uniform in
  [log low, log high]."""
  return lambda key, shape: jax.random.uniform(key, shape, jnp.float32, np.log(low),
                                               np.log(high))


def inverse_softplus(y):
  """x with softplus(x) = y (y > 0): y + log(1 - exp(-y)), with expm1 for small y."""
  return y + jnp.log(-jnp.expm1(-y))


def dt_bias_init(dt_min: float, dt_max: float):
  """Initialiser of dt_bias: softplus^-1(dt), dt log-uniform in [dt_min, dt_max] and floored at
  DT_FLOOR (the official Mamba's dt init, which Mamba-2 and Gated DeltaNet keep)."""
  def init(key, shape, dtype=jnp.float32):
    dt = jnp.maximum(jnp.exp(log_uniform(dt_min, dt_max)(key, shape)), DT_FLOOR)
    return inverse_softplus(dt).astype(dtype)

  return init
