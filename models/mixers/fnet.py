"""FNet (Lee-Thorp et al. 2022): token mixing by the real part of a 2-D Fourier transform.

    y = Re(FFT_sequence(FFT_hidden(x)))

over the L positions and the D features of each example: no parameters, no heads, no
attention weights (so no attention dropout: it refuses attention_dropout_rate > 0, and
configs set 0). Cost O(L D (log L + log D)) through the FFT.

use_fft=False computes the same transform as products with DFT matrices,
Re(F_L x F_D) = C_L x C_D - S_L x S_D with C = cos(2 pi j k / N), S = sin(2 pi j k / N): what the
paper did on TPUs for sequences up to 4096, where the matmul units beat the FFT. That path holds
L x L and D x D matrices (built in the graph, float32, HIGHEST precision): it is quadratic in L
by design.

Scale: the paper's transform is unnormalised: for unit-variance inputs each output entry has
standard deviation about sqrt(L D / 2). The paper's BERT-style block is post-LayerNorm,
LN(x + Fourier(x)) (the encoder's prenorm=False, set for fnet in every task config), which
removes that scale at once. In a pre-LayerNorm block (this code base's default otherwise) the
Fourier output enters the residual stream unnormalised and swamps the embeddings and the MLP
outputs; normalize=True divides by sqrt(L D) (the unitary DFT) and keeps the output at the
input's scale.

Padding: FNet mixes every position with every other, so a padded position would leak into the
real ones. Padded inputs are zeroed before the transform; real outputs then do not depend on
the padded CONTENT. They still depend on the padded LENGTH: the DFT runs over all L positions
(frequencies 2 pi k / L), and a shorter padding gives a different transform of the same real
tokens. Transforming each example over its own real length would need per-example shapes,
which a static-shape jit cannot have. Outputs at padded positions are finite and nonzero (they
mix real tokens); pooling ignores them.

Precision: computed in float32 (complex64) whatever the compute dtype, cast back after.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.common import Mixer
from lra.models.registry import register


def _dft_cos_sin(n: int):
  """cos and sin of 2 pi j k / n, n x n float32, with j k reduced mod n first (exact angles)."""
  j = jnp.arange(n, dtype=jnp.int32)
  angle_NxN = (2 * jnp.pi / n) * ((j[:, None] * j[None, :]) % n).astype(jnp.float32)
  return jnp.cos(angle_NxN), jnp.sin(angle_NxN)


def fourier_mix(x_BxLxD, *, use_fft: bool = True, normalize: bool = False):
  """Re(2-D DFT over the sequence and hidden axes), float32 in and out."""
  x_BxLxD = x_BxLxD.astype(jnp.float32)
  length, dim = x_BxLxD.shape[1:]
  if use_fft:
    y_BxLxD = jnp.fft.fftn(x_BxLxD.astype(jnp.complex64), axes=(1, 2)).real
  else:
    highest = jax.lax.Precision.HIGHEST
    cos_LxL, sin_LxL = _dft_cos_sin(length)
    cos_DxD, sin_DxD = _dft_cos_sin(dim)
    # F = C - iS, so Re(F_L x F_D) = C_L (x C_D) - S_L (x S_D).
    xc_BxLxD = jnp.einsum("bld,de->ble", x_BxLxD, cos_DxD, precision=highest)
    xs_BxLxD = jnp.einsum("bld,de->ble", x_BxLxD, sin_DxD, precision=highest)
    y_BxLxD = (jnp.einsum("ml,bld->bmd", cos_LxL, xc_BxLxD, precision=highest)
               - jnp.einsum("ml,bld->bmd", sin_LxL, xs_BxLxD, precision=highest))
  if normalize:
    y_BxLxD = y_BxLxD * (length * dim) ** -0.5
  return y_BxLxD


@register("fnet")
class FourierMixer(Mixer):
  """FNet's parameter-free Fourier token mixing, padded positions zeroed first.

  Every task runs FNet in the paper's post-LayerNorm block (ENCODER_SETTINGS below); see the
  module docstring. No weights to drop (dropout_rate must be 0), and the transform runs
  in float32 and returns the input's dtype.
  """
  use_fft: bool = s.setting(True, s.Bool(),
                            "False: DFT-matrix products (the paper's TPU path; L x L memory)")
  normalize: bool = s.setting(False, s.Bool(),
                              "True: divide by sqrt(L * D); see the module docstring")

  ATTENTION_DROPOUT = False
  ENCODER_SETTINGS = {"prenorm": False}  # the paper's post-LayerNorm block

  @property
  def SUBQUADRATIC(self) -> bool:  # noqa: N802  (the flag every mixer has)
    return self.use_fft  # the DFT-matrix path holds L x L matrices

  def carried_state(self, width: int, length: int) -> int:
    """The whole input, length x width: the Fourier transform mixes every position into
    every output, so no summary smaller than the sequence gives them."""
    return length * width

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # nothing random
    x_BxLxD_f32 = jnp.where(mask_BxL.astype(bool)[..., None], x_BxLxD.astype(jnp.float32), 0.0)
    y_BxLxD = fourier_mix(x_BxLxD_f32, use_fft=self.use_fft, normalize=self.normalize)
    return y_BxLxD.astype(x_BxLxD.dtype)
