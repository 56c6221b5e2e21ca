"""Mamba-2 (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms
Through Structured State Space Duality"): the SSD layer as a token mixer.

The layer (the official state-spaces/mamba `Mamba2` module, mamba_ssm/modules/mamba2.py), with
D the input width, E = expand * D inner channels in H = E / head_dim heads of P = head_dim,
N = d_state and G = groups groups of B and C (the official ngroups):
    z, x, B, C, dt = in_proj(h)              D -> E + E + G N + G N + H, no bias, that order
    x, B, C        = SiLU(conv(x, B, C))     one depthwise causal conv1d over the E + 2 G N
                                             channels, kernel conv_kernel, with bias
    dt             = softplus(dt + dt_bias)  one step per head and position
    S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T,   y_t = S_t^T C_t + D x_t   per head (S: N x P)
    out            = out_proj(RMSNorm(y * SiLU(z)))   the gated norm, then E -> D, no bias
A = -exp(A_log) and D are one scalar per head; a head h reads group h // (H / G)'s B and C.
The norm is the official RMSNormGated with norm_before_gate=False: the gated y is
normalised over each group's E / G channels (eps 1e-5), times a weight per channel.
In the core's terms (models/ops/matrix_recurrence.py): q = C, k = B, v = dt x, log_decay = dt A
(a scalar per head and position), the chunked form being SSD's block decomposition.

Negative eigenvalues (setting `allow_neg_eigval`, off by default; Grazzi et al. 2025): the
per-head transition exp(dt A) in (0, 1] becomes 2 exp(dt A) - 1 in (-1, 1], the rule of their
Mamba (adankow/unlocking_state_tracking, mamba_dev's selective_scan_ref: deltaA =
2 * torch.exp(delta A) - 1); their code has no Mamba-2 variant, so this is their rule carried
to SSD's scalar decay. The core takes it as log|2a - 1| and its sign (models/ops/signed.py).

Initialisation (the official module's defaults):
  - A_log = log A, A uniform in A_INIT_RANGE = (1, 16) per head (the official A_init_range).
  - dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max], floored at 1e-4 (as Mamba).
  - D = 1 per head; the norm's weight 1.
  - in_proj and the conv's weight and bias: PyTorch's defaults (uniform in
    +-1/sqrt(fan_in), the conv's fan_in its kernel); out_proj the same divided by
    sqrt(num_layers): mamba_ssm's _init_weights (rescale_prenorm_residual), with one residual
    per layer as our Mamba counts it.
Defaults: d_state 128 (the official default; the paper's models use 64 to 128), head_dim 64,
expand 2, conv_kernel 4, groups 1. chunk_size is the core's (64; the official kernel's 256):
the same function whatever its value.

Deviations: the official module computes E = expand * D and asserts E % head_dim == 0; here a
width that does not split is a one-line error naming head_dim (and groups must divide H).
dt_limit (off by default), D_has_hdim, rmsnorm=False and d_ssm < E (the gated-MLP part) are
not built. The encoder's num_heads / qkv_dim are not used (head_dim sets the heads, as in the
official module).

Bidirectional (setting, off by default: the official layer is causal): the RecurrentMixer's
two passes, the core run forward and from the end with the same q, k, v and decays (every
parameter shared, the conv still causal), averaged before the D skip and the gated norm;
position t's own write counts in both directions. Hydra (Hwang et al. 2024, the authors'
bidirectional Mamba-2) instead gives the backward pass its own B, C and dt, shifts both
passes by one so neither sees the diagonal, adds a separate input-dependent diagonal term
(x * (fc_D(x) + D)), sums them and uses a non-causal conv. We keep the shared-parameter
average: one parameter set for either direction setting, the family's common scheme, and no
extra projections (Hydra is a matrix mixer of its own, not this layer).

Padding: the input is zeroed at padded positions (so the conv reads zeros there, as past
either end), and padded positions neither decay nor write the state (the core's mask, so
their dt does not matter): real outputs equal those of the sequence cut to its real tokens.

Dtypes: the projections run in the compute dtype; the conv, dt, the recurrence, the D skip and
the gated norm in float32. Optimiser: A_log, D and dt_bias are OPTIMIZER_GROUP (the official
module marks the three _no_weight_decay), at config.ssm_learning_rate. No attention weights,
no dropout inside (ATTENTION_DROPOUT = False).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.init import dt_bias_init, torch_default
from lra.models.blocks.norms import gated_rms_norm
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.blocks.short_conv import ShortConv
from lra.models.ops.signed import extended
from lra.models.registry import register

A_INIT_RANGE = (1.0, 16.0)  # the official A_init_range: A uniform in it per head
NORM_EPS = 1e-5  # the official RMSNormGated's eps
AUTO_HEAD = 64  # head_dim 0: the largest divisor of E up to this (the official headdim)


@register("mamba2")
class Mamba2(RecurrentMixer):
  """Mamba-2 layer: in_proj to (z, x, B, C, dt), conv + SiLU over (x, B, C), the SSD
  recurrence per head (+ D skip), the gated RMS norm, out_proj (see the module docstring)."""
  d_state: int = s.setting(128, s.Int(1), "N: the state's rows per head (the official d_state)")
  head_dim: int = s.setting(64, s.Int(0), "P: channels per head, H = E / P (the official "
                            "headdim); 0 = the largest divisor of E up to 64")
  expand: int = s.setting(2, s.Int(1), "E = expand * D inner channels")
  conv_kernel: int = s.setting(4, s.Int(1), "the depthwise causal conv's kernel (the official "
                               "d_conv)")
  groups: int = s.setting(1, s.Int(1), "G: groups of heads sharing B and C (the official "
                          "ngroups)")
  dt_min: float = s.setting(0.001, s.Float(0.0, open="low"),
                            "dt starts log-uniform in [dt_min, dt_max] (through dt_bias)")
  dt_max: float = s.setting(0.1, s.Float(0.0, open="low"),
                            "the upper end of dt's initial range (see dt_min)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "the transition exp(dt A) becomes "
                                     "2 exp(dt A) - 1, in (-1, 1] (Grazzi et al. 2025)")
  num_layers: int = 1  # the encoder's depth (filled in): out_proj starts / sqrt(num_layers)

  # Leaf names trained with config.ssm_learning_rate and no weight decay (as Mamba's).
  OPTIMIZER_GROUP = ("A_log", "D", "dt_bias")
  ATTENTION_DROPOUT = False  # no attention weights, no dropout inside (as the official layer)

  def check_settings(self) -> None:
    super().check_settings()
    if self.dt_min > self.dt_max:
      s.fail(s.attention_key("dt_min"), self.dt_min,
             f"a number <= config.model.attention.dt_max={self.dt_max!r}")

  def check_width(self, width: int) -> tuple[int, int]:
    """(E, H) for a D = `width` input, or a one-line SettingError when E or H does not split."""
    inner = self.expand * width
    head = self.head_dim or max(p for p in range(1, AUTO_HEAD + 1) if inner % p == 0)
    if inner % head:
      s.fail(s.attention_key("head_dim"), self.head_dim,
             f"a divisor of the inner width expand x width = {inner}")
    heads = inner // head
    if heads % self.groups:
      s.fail(s.attention_key("groups"), self.groups,
             f"a divisor of the number of heads expand x width / head_dim = {heads}")
    return inner, heads

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, N, P): S is N x P per head, H P N = E N in all (head_dim sets the heads)."""
    inner, heads = self.check_width(width)
    return heads, self.d_state, inner // heads

  def _ssd_parameters(self, heads: int):
    """(dt_bias, A_log, D), one of each per head, at the official initialisation."""
    def init_A_log(key, shape):
      return jnp.log(jax.random.uniform(key, shape, jnp.float32, *A_INIT_RANGE))

    return (self.param("dt_bias", dt_bias_init(self.dt_min, self.dt_max), (heads,)),
            self.param("A_log", init_A_log, (heads,)),
            self.param("D", nn.initializers.ones, (heads,)))

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    (batch, length, width), f32 = x_BxLxD.shape, lambda a: a.astype(jnp.float32)
    inner, heads = self.check_width(width)
    n, g, p = self.d_state, self.groups, inner // heads
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    proj = nn.Dense(2 * inner + 2 * g * n + heads, use_bias=False, dtype=self.dtype,
                    kernel_init=torch_default, name="in_proj")(h_BxLxD)
    z_BxLxE, xBC_BxLxF, dt_BxLxH = jnp.split(proj, [inner, 2 * inner + 2 * g * n], axis=-1)
    xBC_BxLxF = ShortConv(self.conv_kernel, bias=True, activation=True, name="conv")(
        xBC_BxLxF, mask_BxL)
    x_BxLxE, B_BxLxGN, C_BxLxGN = jnp.split(xBC_BxLxF, [inner, inner + g * n], axis=-1)
    # Head h reads group h // (H / G): the core takes each group's B and C once.
    per_group = lambda a: a.reshape(batch, length, g, n)
    dt_bias_H, A_log_H, D_H = self._ssd_parameters(heads)
    dt_BxLxH = jax.nn.softplus(f32(dt_BxLxH) + dt_bias_H[None, None])
    x_BxLxHxP = x_BxLxE.reshape(batch, length, heads, p)
    decay = dict(log_decay=-jnp.exp(A_log_H)[None, None] * dt_BxLxH)
    if self.allow_neg_eigval:  # 2 exp(dt A) - 1: its log magnitude and sign
      decay = dict(zip(("log_decay", "negative"), extended(decay["log_decay"])))
    y_BxLxHxP = self.run(per_group(C_BxLxGN), per_group(B_BxLxGN),
                         x_BxLxHxP * dt_BxLxH[..., None], mask_BxL, **decay)
    y_BxLxHxP = y_BxLxHxP + D_H[None, None, :, None] * x_BxLxHxP
    # RMSNorm(y * SiLU(z)) over each group's E / G channels, a weight per channel (the
    # official RMSNormGated, norm_before_gate=False).
    norm_E = self.param("norm", nn.initializers.ones, (inner,))
    y_BxLxE = gated_rms_norm(y_BxLxHxP.reshape(batch, length, inner), norm_E, z_BxLxE,
                             groups=g, eps=NORM_EPS, norm_before_gate=False)
    out_init = nn.initializers.variance_scaling(1 / (3 * self.num_layers), "fan_in", "uniform")
    return nn.Dense(width, use_bias=False, dtype=self.dtype, kernel_init=out_init,
                    name="out_proj")(y_BxLxE.astype(self.dtype))
