"""The short depthwise causal convolution the recurrent family puts before its recurrences
(fla's ShortConvolution, Mamba-2's and xLSTM's conv1d), which the encoder's `short_conv`
setting also puts before any mixer."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.models.blocks.init import symmetric_uniform
from lra.models.ops.convolution import causal_depthwise_conv


class ShortConv(nn.Module):
  """The short depthwise causal convolution (kernel `kernel`, over each of the input's
  channels), optionally followed by SiLU. The input is zeroed at padded positions first: a
  padded position reads as the zeros past either end."""
  kernel: int = 4
  bias: bool = False
  activation: bool = True

  @nn.compact
  def __call__(self, x_BxLxC, mask_BxL):
    channels = x_BxLxC.shape[-1]
    init = symmetric_uniform(1 / np.sqrt(self.kernel))  # PyTorch's Conv1d: fan_in = kernel
    w_KxC = self.param("weight", init, (self.kernel, channels))
    b_C = self.param("bias", init, (channels,)) if self.bias else jnp.zeros((channels,))
    x = jnp.where(mask_BxL[..., None], x_BxLxC.astype(jnp.float32), 0.0)
    y = causal_depthwise_conv(x, w_KxC, b_C)
    return jax.nn.silu(y) if self.activation else y
