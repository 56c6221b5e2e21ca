"""The recurrent family's norms: the RMS norm over each head's channels with its optional SiLU
gate, and the gated norm and output projection that finishes a layer.

One computation, gated_rms_norm, in the two orders the authors use: norm then gate (fla's
FusedRMSNormGated: RetNet, GLA, DeltaNet, Gated DeltaNet, through gated_output; its
activation SiLU, or sigmoid for KDA and Comba) or gate then norm (Mamba-2's RMSNormGated with
norm_before_gate=False). Mamba-2 calls it directly: it
genuinely differs, normalising the gated output over each group's E / G channels with a weight
per channel (not one shared by the heads), stored as its own `norm` parameter, and its output
projection has its own initialisation. Each mixer keeps its own output projection (its kernel's
shape and initialisation are its authors'): fla's layers (RetNet, GLA) a DenseGeneral over the
heads, N(0, 0.02), inside an "output" scope (GatedOutput); DeltaNet's a Dense over the flattened
heads, PyTorch's default. Everything in float32.
"""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.blocks.init import fla_init

NORM_EPS = 1e-5  # fla's layers' default, Mamba-2's RMSNormGated's


def gated_rms_norm(y, weight, gate=None, *, axes=(-1,), groups: int = 0,
                   eps: float = NORM_EPS, norm_before_gate: bool = True,
                   activation: Callable = jax.nn.silu):
  """y over its root mean square along `axes` (+ eps inside the root; with `groups`, over each
  of that many equal parts of the last axis), times `weight` (over y's last axes), then times
  activation(gate), SiLU by default (norm_before_gate False: y times the gate first, the
  product normalised). No gate: the plain RMS norm. Float32."""
  y = y.astype(jnp.float32)
  if gate is not None and not norm_before_gate:
    y = y * activation(gate.astype(jnp.float32))
  shape = y.shape
  if groups:
    y = y.reshape(shape[:-1] + (groups, shape[-1] // groups))
  y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=axes, keepdims=True) + eps)
  if groups:
    y = y.reshape(shape)
  y = y * weight.reshape((1,) * (y.ndim - weight.ndim) + weight.shape)
  if gate is not None and norm_before_gate:
    y = y * activation(gate.astype(jnp.float32))
  return y


class HeadRMSNorm(nn.Module):
  """RMS norm over each head's last axis, one learned weight per channel shared by the heads
  (fla's RMSNorm over head_v_dim; over the whole H x V when `per_head` is False, HGRN2's),
  optionally gated: RMSNorm(y) * SiLU(gate) (fla's FusedRMSNormGated; `activation` another
  gate function, KDA's and Comba's sigmoid). In float32."""
  eps: float = NORM_EPS
  per_head: bool = True
  activation: Callable = jax.nn.silu

  @nn.compact
  def __call__(self, y_BxLxHxV, gate_BxLxHxV=None):
    shape = y_BxLxHxV.shape[-1:] if self.per_head else y_BxLxHxV.shape[-2:]
    axes = (-1,) if self.per_head else (-2, -1)
    weight = self.param("scale", nn.initializers.ones, shape)
    return gated_rms_norm(y_BxLxHxV, weight, gate_BxLxHxV, axes=axes, eps=self.eps,
                          activation=self.activation)


def gated_output(o_BxLxHxV, gate_BxLxHxV, out_proj: nn.Module, *, norm: str, dtype: str,
                 flat: bool = False, activation: Callable = jax.nn.silu):
  """out_proj(RMSNorm(o) * activation(gate)) (no gate: out_proj(RMSNorm(o))), the norm a
  HeadRMSNorm named `norm` built in the calling module's scope, `out_proj` the mixer's own
  projection, given the heads (flat: merged, B x L x H V) in the compute dtype."""
  y = HeadRMSNorm(activation=activation, name=norm)(o_BxLxHxV, gate_BxLxHxV)
  if flat:
    y = y.reshape(y.shape[:2] + (-1,))
  return out_proj(y.astype(dtype))


class GatedOutput(nn.Module):
  """fla's layers' end (RetNet, GLA): out = o_proj(RMSNorm(o) * swish(g)), its
  FusedRMSNormGated and o_proj: o the heads' outputs BxLxHxV (float32), g the gate's
  projection BxLxHxV; o_proj over the heads, no bias, N(0, 0.02)."""
  width: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, o_BxLxHxV, g_BxLxHxV):
    o_proj = nn.DenseGeneral(self.width, axis=(-2, -1), use_bias=False, dtype=self.dtype,
                             kernel_init=fla_init, name="o_proj")
    return gated_output(o_BxLxHxV, g_BxLxHxV, o_proj, norm="norm", dtype=self.dtype)
