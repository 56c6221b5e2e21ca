"""Mamba (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces"):
the selective state space block as a token mixer.

The block (the paper's figure 3 and the official state-spaces/mamba `Mamba` module), with
D = the input width, E = expand * D inner channels and N = state_size:
    x, z   = in_proj(h)                                   D -> 2E, no bias
    u      = SiLU(conv(x))                                depthwise causal conv1d, kernel
                                                          `conv_kernel`, with bias
    dt     = softplus(dt_proj(x_proj_dt(u)) + dt_bias)    low rank: E -> R -> E (R = dt_rank)
    B, C   = x_proj_B(u), x_proj_C(u)                     E -> N each, per position
    s_t    = exp(dt_t A) s_{t-1} + dt_t B_t u_t           per channel e: an N-state recurrence
    y_t    = C_t s_t + D u_t                              (A: E x N, D: E)
    out    = out_proj(y * SiLU(z))                        E -> D, no bias
x_proj is one matrix E -> R + 2N (no bias) whose outputs are split into dt's low-rank input,
B and C. The discretisation is Mamba's: zero-order hold for A (A_bar = exp(dt A)) and the
Euler simplification B_bar = dt B for B. The recurrence is selective (dt, B, C depend on the
position's input), so it is not a convolution.

The form (setting `form`, the recurrent family's name; models/ops/selective_scan.py):
"chunked", the default, runs the recurrence by chunks of `chunk_size` positions, all chunks at
once, with the state passed between chunks by a scan over them (and the adjoint likewise in a
custom VJP): no batch x L x E x N array in a train step, and about 2 x chunk + L / chunk
sequential steps instead of L. "associative" (the reference, the same function; where the
family's reference is "recurrent", a step loop) runs jax.lax.associative_scan over the whole
sequence: O(log L) depth, but batch x L x E x N float32 states at every level (the official
CUDA kernel keeps the state on chip; that fused kernel is not reproduced here). The setting
was called `scan`; a config that sets it is refused with a line naming `form`.

Negative eigenvalues (setting `allow_neg_eigval`, off by default; Grazzi et al. 2025, "Unlocking
State-Tracking in Linear RNNs Through Negative Eigenvalues"): the transition exp(dt A) in (0, 1]
becomes 2 exp(dt A) - 1 in (-1, 1], as their code has it (adankow/unlocking_state_tracking:
mamba_dev's selective_scan_ref, deltaA = 2 * torch.exp(delta A) - 1, and its CUDA kernel's
2 exp2f(delta A) - 1; xlstm/mamba/mamba.py, deltaA * 2 - 1). B, C, D and the input term dt B u
are unchanged. A padded step (dt = 0) stays the identity, 2 - 1 = 1.

Initialisation (the official module's defaults):
  - A: S4D-real, A[e, n] = -(n + 1) for every channel, stored as A_log = log(n + 1)
    (A = -exp(A_log) stays negative, so |exp(dt A)| < 1 for every dt > 0).
  - dt_bias: dt drawn log-uniformly in [dt_min, dt_max] (floored at DT_FLOOR = 1e-4, the
    official dt_init_floor), and dt_bias = softplus^-1(dt) = dt + log(-expm1(-dt)), so that
    softplus(dt_bias) lies in [dt_min, dt_max] at init.
  - dt_proj's kernel: uniform in [-R^-1/2, R^-1/2] (the official dt_init "random").
  - D = 1.
  - in_proj, x_proj kernels and the conv's weight and bias: PyTorch's defaults, which the
    official module keeps: uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (fan_in of the
    depthwise conv = its kernel size).
  - out_proj: the same, divided by sqrt(num_layers), as both peers' _init_weights
    (mamba_ssm/models/mixer_seq_simple.py and Vim's models_mamba.py, rescale_prenorm_residual
    with one residual per layer: no MLP sub-block).
dt_rank "auto" is ceil(D / 16), as the official module computes it.

Bidirectional (setting; off by default, Mamba is causal): the scheme of Vision Mamba's
bidirectional block (Zhu et al. 2024, "v2"): in_proj (so x and z) and out_proj are shared;
the backward direction has its own conv, x_proj, dt_proj, dt_bias, A_log and D and runs the same
causal path over the reversed sequence, its output reversed back; the two directions are
averaged before the gate, out = out_proj((y_fwd + y_bwd) / 2 * SiLU(z)). Parameters: one
"forward" and one "backward" submodule. As in Vim's mamba_simple.py, only the forward dt_bias
gets the dt initialisation; the backward one starts at 0 (dt = softplus(0) = ln 2: Vim builds
dt_proj_b without it, and _init_weights zeroes that bias).

Padding: the input is zeroed at padded positions, and dt is set to 0 there, so a padded step
of the recurrence is the identity (exp(0 A) = 1, 0 * B u = 0). The conv sees a padded position
as a zero input, which is what it sees past either end of a sequence. LRA pads at the end: the
forward direction never looks ahead, and the backward direction runs over the reversed
sequence, where the padding comes first: the conv reads zeros, as at the start of any
sequence, and the recurrence passes its zero state through the padded steps unchanged. Real
outputs therefore equal those of the sequence truncated to its real tokens.

Dtypes: the projections run in the compute dtype; the conv, dt, the scan, the D skip and the
gate run in float32 (as the official selective scan does), then out_proj in the compute dtype.

Optimiser: A_log, D and dt_bias are OPTIMIZER_GROUP: no weight decay (the official module
marks A_log and D `_no_weight_decay`, Mamba-2 also its dt_bias), trained at
config.ssm_learning_rate (0 = the global rate; Mamba trains them at the global rate).
The mixer has no attention weights and no dropout inside (ATTENTION_DROPOUT = False), as the
official block; the encoder's residual dropout still applies to its output.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import dt_bias_init, symmetric_uniform, torch_default
from lra.models.blocks.inputs import masked_input
from lra.models.blocks.ssm import SSMMixer
from lra.models.ops.convolution import causal_depthwise_conv
from lra.models.ops.selective_scan import chunked_selective_scan, selective_scan
from lra.models.registry import register

FORMS = ("chunked", "associative")  # how the selective scan runs (models/ops/selective_scan.py)


class DtRank:
  """dt_rank: "auto" (ceil(D / 16)) or an integer >= 1 (a value rule, as those of lra/rules.py)."""

  def allowed(self) -> str:
    return "'auto' or an integer >= 1"

  def ok(self, value) -> bool:
    return (isinstance(value, str) and value == "auto") or (s.is_int(value) and value >= 1)

  def bad_values(self) -> list:
    return ["Auto", 0, 1.5, True, None]


def rank_of(dt_rank, width: int) -> int:
  """The rank R of dt's projection for a D = `width` input."""
  return math.ceil(width / 16) if dt_rank == "auto" else int(dt_rank)


class Direction(nn.Module):
  """One direction of the block, causal over L: conv, SiLU, dt / B / C from the input, the
  selective scan and the D skip. x_BxLxE: the x branch (zero at padded positions); returns
  y_BxLxE in float32, before the gate. form "chunked": the recurrence by chunks
  (chunked_selective_scan); "associative": the whole sequence at once (selective_scan), the
  reference."""
  state_size: int
  conv_kernel: int
  dt_rank: int
  dt_min: float
  dt_max: float
  dtype: str
  dt_init: bool = True  # False: dt_bias starts at 0 (Vim's backward direction)
  form: str = "chunked"
  chunk_size: int = 32
  signed: bool = False  # decays 2 exp(dt A) - 1 (allow_neg_eigval)

  @nn.compact
  def __call__(self, x_BxLxE, mask_BxL):
    inner, n, rank = x_BxLxE.shape[-1], self.state_size, self.dt_rank
    conv_init = symmetric_uniform(1 / np.sqrt(self.conv_kernel))  # fan_in = K (depthwise)
    w_KxE = self.param("conv_weight", conv_init, (self.conv_kernel, inner))
    b_E = self.param("conv_bias", conv_init, (inner,))

    init_dt_bias = dt_bias_init(self.dt_min, self.dt_max) if self.dt_init else \
        nn.initializers.zeros
    dt_bias_E = self.param("dt_bias", init_dt_bias, (inner,))
    A_log_ExN = self.param("A_log", lambda _, shape: jnp.broadcast_to(
        jnp.log(jnp.arange(1, n + 1, dtype=jnp.float32)), shape), (inner, n))
    D_E = self.param("D", nn.initializers.ones, (inner,))

    keep_BxLx1 = mask_BxL.astype(bool)[..., None]
    u_BxLxE = jax.nn.silu(causal_depthwise_conv(x_BxLxE.astype(jnp.float32), w_KxE, b_E))
    u_BxLxE = jnp.where(keep_BxLx1, u_BxLxE, 0.0)
    proj_BxLxF = nn.Dense(rank + 2 * n, use_bias=False, dtype=self.dtype,
                          kernel_init=torch_default, name="x_proj")(u_BxLxE)
    proj_BxLxF = proj_BxLxF.astype(jnp.float32)
    low_BxLxR, B_BxLxN, C_BxLxN = jnp.split(proj_BxLxF, [rank, rank + n], axis=-1)
    dt_proj = nn.Dense(inner, use_bias=False, dtype=self.dtype, name="dt_proj",
                       kernel_init=symmetric_uniform(1 / np.sqrt(rank)))
    dt_BxLxE = jax.nn.softplus(dt_proj(low_BxLxR).astype(jnp.float32) + dt_bias_E[None, None])
    dt_BxLxE = jnp.where(keep_BxLx1, dt_BxLxE, 0.0)  # a padded step is the identity
    A_ExN = -jnp.exp(A_log_ExN)
    if self.form == "associative":
      return selective_scan(u_BxLxE, dt_BxLxE, A_ExN, B_BxLxN, C_BxLxN, D_E, signed=self.signed)
    return chunked_selective_scan(u_BxLxE, dt_BxLxE, A_ExN, B_BxLxN, C_BxLxN, D_E,
                                  self.chunk_size, signed=self.signed)


@register("mamba")
class Mamba(SSMMixer):
  """Mamba block: in_proj to (x, z), causal conv + SiLU, selective scan (+ D skip), gate
  SiLU(z), out_proj; optionally bidirectional (see the module docstring)."""
  state_size: int = s.setting(16, s.Int(1), "N: states per inner channel (the official d_state)")
  expand: int = s.setting(2, s.Int(1), "E = expand * D inner channels")
  conv_kernel: int = s.setting(4, s.Int(1),
                               "the depthwise causal conv's kernel size (the official d_conv)")
  dt_rank: int | str = s.setting("auto", DtRank(),
                                 "R, the rank of dt's projection; \"auto\" = ceil(D / 16)")
  dt_min: float = s.setting(0.001, s.Float(0.0, open="low"),
                            "dt starts log-uniform in [dt_min, dt_max] (through dt_bias)")
  dt_max: float = s.setting(0.1, s.Float(0.0, open="low"),
                            "the upper end of dt's initial range (see dt_min)")
  bidirectional: bool = s.setting(False, s.Bool(),
                                  "add a backward scan with its own parameters (averaged)")
  # How the selective scan runs (the recurrent family's `form`): "chunked" (chunks of
  # chunk_size positions, no batch x L x E x N array) or "associative" (one
  # jax.lax.associative_scan over the whole sequence, which holds batch x L x E x N states:
  # the reference). The same function.
  form: str = s.setting("chunked", s.Choice(FORMS),
                        '"chunked" (chunk by chunk) or "associative" (the reference), see above')
  chunk_size: int = s.setting(32, s.Int(1),
                              "positions per chunk of the chunked scan (docs/results.md: its "
                              "speed)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "the transition exp(dt A) becomes "
                                     "2 exp(dt A) - 1, in (-1, 1] (Grazzi et al. 2025)")
  num_layers: int = 1  # the encoder's depth (filled in): out_proj starts / sqrt(num_layers)

  # Leaf names trained with config.ssm_learning_rate and no weight decay
  # (lra/training/optim.py).
  OPTIMIZER_GROUP = ("A_log", "D", "dt_bias")
  # `scan` is the family's `form` (one name for one idea): the old name is refused.
  RENAMED_SETTINGS = {"scan": "form"}
  # No attention weights, and the official block has no dropout inside.
  ATTENTION_DROPOUT = False
  # The encoder adds no absolute positions (the conv and the recurrence encode order) and
  # mean-pools the real tokens without a CLS token (a causal scan would give a CLS token at
  # position 0 nothing to see).
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    self.check_dt_range()

  def _direction(self, width: int, name: str) -> Direction:
    return Direction(self.state_size, self.conv_kernel, rank_of(self.dt_rank, width),
                     self.dt_min, self.dt_max, self.dtype, dt_init=name == "forward",
                     form=self.form, chunk_size=self.chunk_size,
                     signed=self.allow_neg_eigval, name=name)

  def carried_state(self, width: int, length: int) -> int:
    """N states per inner channel, per direction: expand x width x N x directions (the conv's
    window not counted), Zoology's 2 x width x N at expand 2."""
    del length
    return (2 if self.bidirectional else 1) * self.expand * width * self.state_size

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside the block
    width = x_BxLxD.shape[-1]
    inner = self.expand * width
    h_BxLxD = masked_input(x_BxLxD, mask_BxL).astype(self.dtype)
    xz_BxLx2E = nn.Dense(2 * inner, use_bias=False, dtype=self.dtype,
                         kernel_init=torch_default, name="in_proj")(h_BxLxD)
    x_BxLxE, z_BxLxE = jnp.split(xz_BxLx2E, 2, axis=-1)
    y_BxLxE = self._direction(width, "forward")(x_BxLxE, mask_BxL)
    if self.bidirectional:
      flip = lambda a: a[:, ::-1]
      y_back_BxLxE = flip(self._direction(width, "backward")(flip(x_BxLxE), flip(mask_BxL)))
      y_BxLxE = 0.5 * (y_BxLxE + y_back_BxLxE)
    y_BxLxE = y_BxLxE * jax.nn.silu(z_BxLxE.astype(jnp.float32))
    out_init = nn.initializers.variance_scaling(1 / (3 * self.num_layers), "fan_in", "uniform")
    return nn.Dense(width, use_bias=False, dtype=self.dtype, kernel_init=out_init,
                    name="out_proj")(y_BxLxE.astype(self.dtype))
