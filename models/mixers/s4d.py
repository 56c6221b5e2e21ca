"""S4D (Gu, Gupta, Goel & Re 2022, "On the Parameterization and Initialization of Diagonal
State Space Models"): a diagonal state space model per channel, applied as a long convolution.

Each of the D channels (D = the input width) is a linear SSM x' = A x + B u, y = C x + D u with
a diagonal complex A of N/2 modes (N = state_size; the other N/2 are their complex conjugates,
whence the 2 Re(.) below). Discretised by zero-order hold with a learned step dt per channel:
    dA = exp(dt A),   dB = (exp(dt A) - 1) / A * B,
the SSM is the convolution y = K * u + D u with the kernel
    K[l] = 2 Re( sum_n C_n dB_n dA_n^l ),   l = 0 .. L-1,
computed as one Vandermonde product exp(dt A * l) (no sequential powers) and applied by FFT
over 2L points (zero padding, so no circular wrap): O(D N L + D L log L), never L x L.
The Vandermonde matrix is materialised once per step whatever the batch (D x N/2 x L complex:
1 GiB per layer at Path-X's 256 x 32 x 16K), where S4 uses fused CUDA/KeOps kernels.

Parameterisation (as the paper's S4D): A = -exp(log_A_re) + i A_im keeps the real part
negative, so |dA| = exp(dt Re A) < 1 for every dt > 0 (stable); log_dt ~ U[log dt_min,
log dt_max]; B = 1; C complex normal (variance 1); D standard normal; A, B and dt per channel.
Initialisations of A (setting A_init; n = 0 .. N/2-1):
    "lin": A_n = -1/2 + i pi n                          (S4D-Lin)
    "inv": A_n = -1/2 + i N/pi (N/(2n+1) - 1)           (S4D-Inv)
The default is "inv": the S4D row the LRA reference table reports (60.18 / 87.34 / 91.09 /
87.83 / 93.78 / 92.80) is S4D-Inv. (The paper also reports S4D-LegS, the diagonal of the
HiPPO-LegS normal part, which the official LRA configs' `init: legs` selects; it is not
implemented here.)

Bidirectional (default True, as every official LRA config `configs/experiment/lra/s4-lra-*`
of the state-spaces repository): as S4 does it, a second C (the directions share A, B and dt)
gives a second kernel that runs backwards over strictly later positions,
    y[t] = sum_{s<=t} K_f[t-s] u[s] + sum_{s>t} K_b[s-t-1] u[s] + D u[t],
which is one FFT convolution with the 2L-point kernel [K_f, reversed K_b].

The layer is the paper's whole SSM block for LRA: SSM, GELU, dropout, then a linear map
D -> 2D and a GLU (S4's `final_act: glu`), returning B x L x D. Padding: the input is zeroed
at padded positions before the convolution, so they add exactly nothing to real positions in
either direction (trailing padding is only ever seen by the backward kernel, as zeros); the
rest of the block is per position.

Optimiser: log_dt, log_A_re, A_im and B are OPTIMIZER_GROUP: trained with
config.ssm_learning_rate and no weight decay (lra/training/optim.py), as S4 registers them.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import log_uniform
from lra.models.blocks.inputs import as_complex, masked_input
from lra.models.blocks.ssm import SSMMixer
from lra.models.ops.convolution import fft_convolve
from lra.models.registry import register

INITS = ("lin", "inv")


def initial_A_imag(init: str, state_size: int) -> np.ndarray:
  """The imaginary parts of the N/2 modes of A (their real part starts at -1/2)."""
  n = np.arange(state_size // 2, dtype=np.float64)
  if init == "lin":
    return np.pi * n
  if init == "inv":
    return state_size / np.pi * (state_size / (2 * n + 1) - 1)
  raise ValueError(f"unknown s4d A_init {init!r}; valid: {', '.join(INITS)}")


def discretize(log_dt_D, log_A_re_DxN, A_im_DxN, B_DxNx2):
  """Zero-order hold: (dt A, dA, dB), each D x N complex."""
  a_DxN = jax.lax.complex(-jnp.exp(log_A_re_DxN), A_im_DxN)
  dtA_DxN = jnp.exp(log_dt_D)[:, None] * a_DxN
  # (exp(dt A) - 1) / A with expm1: exp - 1 would lose digits for the small dt A of slow modes.
  dB_DxN = jnp.expm1(dtA_DxN) / a_DxN * as_complex(B_DxNx2)
  return dtA_DxN, jnp.exp(dtA_DxN), dB_DxN


def ssm_kernel(log_dt_D, log_A_re_DxN, A_im_DxN, B_DxNx2, C_KxDxNx2, length: int):
  """K x L x D real kernels K[l] = 2 Re(sum_n C_n dB_n dA_n^l), one per direction K."""
  dtA_DxN, _, dB_DxN = discretize(log_dt_D, log_A_re_DxN, A_im_DxN, B_DxNx2)
  cdB_KxDxN = as_complex(C_KxDxNx2) * dB_DxN[None]
  # Vandermonde matrix dA^l = exp(l dt A): every power at once, exact in the exponent.
  position_1x1xL = jnp.arange(length, dtype=jnp.float32)[None, None]
  vandermonde_DxNxL = jnp.exp(dtA_DxN[..., None] * position_1x1xL)
  return 2 * jnp.einsum("kdn,dnl->kld", cdB_KxDxN, vandermonde_DxNxL).real


@register("s4d")
class S4D(SSMMixer):
  """S4D layer: per-channel diagonal SSM convolution (+ D skip), GELU, dropout, linear + GLU."""
  # dropout_rate (the encoder's attention_dropout_rate) is the dropout after the GELU.
  state_size: int = s.setting(64, s.Int(2), "N: N/2 complex conjugate pairs of modes per channel")
  A_init: str = s.setting("inv", s.Choice(INITS),
                          "A's initialisation: \"lin\" (S4D-Lin) or \"inv\" (S4D-Inv)")
  dt_min: float = s.setting(0.001, s.Float(0.0, open="low"),
                            "log_dt starts uniform in [log dt_min, log dt_max]")
  dt_max: float = s.setting(0.1, s.Float(0.0, open="low"),
                            "the upper end of log_dt's initial range (see dt_min)")
  bidirectional: bool = s.setting(True, s.Bool(),
                                  "add a kernel over later positions (S4's LRA setting)")
  tie_dropout: bool = s.setting(False, s.Bool(),
                                "one dropout mask per channel for the whole sequence")

  # Leaf names that train with config.ssm_learning_rate and no weight decay
  # (lra/training/optim.py).
  OPTIMIZER_GROUP = ("log_dt", "log_A_re", "A_im", "B")
  # The encoder adds no absolute positions to S4D: the convolution encodes order itself, as
  # S4's LRA models do.
  ENCODER_SETTINGS = {"positions": "none"}

  def check_settings(self) -> None:
    super().check_settings()
    if self.state_size % 2:
      s.fail(s.attention_key("state_size"), self.state_size,
             "an even integer >= 2 (N/2 conjugate pairs)")
    self.check_dt_range()

  def carried_state(self, width: int, length: int) -> int:
    """N/2 complex modes per channel (their conjugates implied): N numbers per channel, per
    direction, width x N x directions; computed as the equal convolution, by FFT."""
    del length
    return (2 if self.bidirectional else 1) * width * self.state_size

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    _, length, width = x_BxLxD.shape
    modes, directions = self.state_size // 2, 2 if self.bidirectional else 1
    log_dt_D = self.param("log_dt", log_uniform(self.dt_min, self.dt_max), (width,))
    log_A_re_DxN = self.param("log_A_re", nn.initializers.constant(np.log(0.5)),
                              (width, modes))
    a_im_N = jnp.asarray(initial_A_imag(self.A_init, self.state_size), jnp.float32)
    A_im_DxN = self.param("A_im", lambda _, shape: jnp.broadcast_to(a_im_N, shape),
                          (width, modes))
    B_DxNx2 = self.param("B", lambda _, shape: jnp.zeros(shape).at[..., 0].set(1.0),
                         (width, modes, 2))
    # Complex standard normal: each part has variance 1/2.
    C_KxDxNx2 = self.param("C", nn.initializers.normal(np.sqrt(0.5)),
                           (directions, width, modes, 2))
    D_D = self.param("D", nn.initializers.normal(1.0), (width,))

    # float32 whatever the compute dtype: long sums, complex exponentials, FFTs.
    u_BxLxD = masked_input(x_BxLxD, mask_BxL)
    k_KxLxD = ssm_kernel(log_dt_D, log_A_re_DxN, A_im_DxN, B_DxNx2, C_KxDxNx2, length)
    y_BxLxD = fft_convolve(u_BxLxD, k_KxLxD[0], k_KxLxD[1] if self.bidirectional else None)
    y_BxLxD = y_BxLxD + D_D[None, None] * u_BxLxD
    y_BxLxD = nn.gelu(y_BxLxD, approximate=False).astype(self.dtype)
    y_BxLxD = self.tied_dropout(y_BxLxD, deterministic=deterministic)
    y_BxLx2D = nn.Dense(2 * width, dtype=self.dtype, name="output_linear")(y_BxLxD)
    return nn.glu(y_BxLx2D, axis=-1)
