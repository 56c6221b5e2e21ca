"""Convolutions over the sequence: the short depthwise causal one (Mamba's conv1d, the recurrent
family's short convolutions, Hyena's short filter, Based's BaseConv) as K shifted products, and
the long one by FFT (S4D's kernels, Hyena's implicit filters, Mega's EMA), causal or two-sided.
Pure functions; their references are the tests' loops."""
from __future__ import annotations

import jax.numpy as jnp


def causal_depthwise_conv(x_BxLxE, w_KxE, b_E):
  """y[t] = b + sum_k w[k] x[t - (K - 1) + k] per channel, zeros before the start: the
  official conv1d (padding K - 1, output cut to L) as K shifted products (K is small)."""
  kernel, length = w_KxE.shape[0], x_BxLxE.shape[1]
  x_BxPxE = jnp.pad(x_BxLxE, ((0, 0), (kernel - 1, 0), (0, 0)))
  y_BxLxE = jnp.broadcast_to(b_E[None, None, :], x_BxLxE.shape)
  for k in range(kernel):
    y_BxLxE = y_BxLxE + w_KxE[k][None, None, :] * x_BxPxE[:, k:k + length]
  return y_BxLxE


def fft_convolve(u_BxLxD, forward_LxD, backward_LxD=None):
  """y[t] = sum_{s<=t} forward[t-s] u[s] (+ sum_{s>t} backward[s-t-1] u[s]) by FFT.

  Over 2L points, so the causal part never wraps around; the backward kernel sits reversed
  in the upper half, where (t - s) mod 2L lands for s > t.
  """
  length = u_BxLxD.shape[1]
  kernel_KxD = forward_LxD
  if backward_LxD is not None:
    kernel_KxD = jnp.concatenate([forward_LxD, backward_LxD[::-1]], axis=0)  # K = 2L
  u_FxD = jnp.fft.rfft(u_BxLxD, n=2 * length, axis=1)  # F = L + 1 frequencies
  k_FxD = jnp.fft.rfft(kernel_KxD, n=2 * length, axis=0)
  return jnp.fft.irfft(u_FxD * k_FxD[None], n=2 * length, axis=1)[:, :length]
