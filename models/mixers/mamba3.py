"""Mamba-3 (Lahoti et al. 2026, "Mamba-3: Improved Sequence Modeling using State Space
Principles"): the SISO layer as a token mixer.

The layer (the authors' state-spaces/mamba `Mamba3` module, mamba_ssm/modules/mamba3.py at
e9594ce1, is_mimo=False), with D the input width, E = expand * D inner channels in H = E / head_dim heads
of P = head_dim, N = d_state, G = groups groups of B and C (the authors' ngroups) and
A_r = rotary angles (rope_fraction * N rounded down to an even number, halved):
    z, x, B, C, dd_dt, dd_A, trap, ang = in_proj(h)   D -> E + E + G N + G N + H + H + H + A_r,
                                                      no bias, that order; no short conv
    dt    = softplus(dd_dt + dt_bias)                 one step per head and position
    A     = min(-f(dd_A), -A_floor)                   data-dependent, f the heavy tail
                                                      (1 + u for u >= 0, 1 / (1 - u) below)
    B, C  = RMSNorm(B) + B_bias, RMSNorm(C) + C_bias  the norm over each group's N channels (a
                                                      weight of N, eps 1e-5), then a bias of
                                                      H x N: B and C per head from here on
    theta_t = sum_{s <= t} pi tanh(ang_s) dt_s        per head and angle, kept mod 2 pi
    B, C  rotated: channel pairs (2i, 2i + 1), i < A_r, by theta_{t,i}; the others as they are
    lam   = sigmoid(trap)                             the trapezoid's weight per head
    S_t = exp(dt_t A_t) S_{t-1} + (1 - lam_t) dt_t exp(dt_t A_t) B_{t-1} x_{t-1}^T
                                + lam_t dt_t B_t x_t^T         per head (S: N x P, S_0 = 0)
    y_t = S_t^T C_t + D x_t,   out = out_proj(y * SiLU(z))     (outproj_norm: RMSNorm(y) per
                                                      head, times SiLU(z); the authors'
                                                      is_outproj_norm)
D one scalar per head. The write mixes the current and the previous position's B x (the
trapezoidal rule); the rotation makes C_t . B_s depend on the angles between s and t (the
complex-valued SSM, a data-dependent RoPE).

In the core's terms (models/ops/matrix_recurrence.py, a scalar log decay per head): the
previous position's term is position t-1's write made at t-1 and decayed by exp(dt_t A_t) at t,
so the state after t is the core's with q = C, k = (lam_t dt_t + (1 - lam_{t+1}) dt_{t+1}) B_t,
v = x, log_decay = dt A, except that the core's read at t already holds t's share for t + 1:
    y_t = core_t - (1 - lam_{t+1}) dt_{t+1} (C_t . B_t) x_t      (0 after the last position)
(the authors' chunked reference and kernels use the same split). One core call, either form;
causal to float32 rounding: t + 1's share on t's write cancels in t's read up to rounding of
y_t (the family's causality test allows Mamba-3 that much), not exactly.

Padding: the input is zeroed at padded positions; a padded position neither decays nor writes
(the core's mask), turns no angle, and is no one's previous position: the previous position of
a real token is the last real one before it (none for the first), so real outputs equal those
of the sequence cut to its real tokens (as the authors' varlen path packs them).

Bidirectional (setting, off by default: the authors' layer is causal): RecurrentMixer's two
passes with every parameter shared, averaged before the D skip and the gate. The backward pass
is this layer's recurrence run over the reversed sequence: the angles are summed from the end
(theta_t = sum_{s >= t}), and the "previous" position of t is the next real one, t + 1, whose
B x enters t's state with t's own (1 - lam_t) dt_t exp(dt_t A_t). So C_t reads B_s (s > t)
turned by the angles of [t, s) in the reverse sense: the mirror image of the forward pass, as
Vision Mamba runs its layer on the flipped sequence.

Initialisation (the authors' module and mamba_ssm's _init_weights): dt_bias = softplus^-1(dt),
dt log-uniform in [dt_min, dt_max] and floored at 1e-4; B_bias = C_bias = 1; the B and C norms'
weights 1; D = 1; in_proj PyTorch's default (uniform in +-1/sqrt(D)); out_proj the same
divided by sqrt(num_layers) (rescale_prenorm_residual, one residual per layer, as Mamba-2).
Defaults: the module's (d_state 128, expand 2, rope_fraction 0.5, A_floor 1e-4), but head_dim
0: the largest divisor of E up to 64, the authors' 64 wherever 64 divides E, and a narrower
head where their layer would refuse the width (the `cpu` configs' 16 to 64 wide models).

Deviations: that head_dim default; a width that does not split a set head_dim is a one-line
error naming it (the authors assert). MIMO (is_mimo) and the
decode kernels are not built. An odd d_state leaves its last channel unrotated (the authors'
reference needs N even). The reversed pass is ours (above). `A_activation="softplus"` gives
A = -softplus(dd_A), the authors' first release (5235bdc) and fla's port (fla/layers/mamba3.py).
The angle sums are wrapped at every step of a tree of partial sums (the authors wrap their
running sum each step): the same angles mod 2 pi to float32 rounding, whatever the length.

Dtypes: in_proj and out_proj in the compute dtype, everything between in float32. Optimiser:
D and dt_bias are OPTIMIZER_GROUP (the authors mark the two _no_weight_decay), at
config.ssm_learning_rate. No attention weights, no dropout inside.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.init import dt_bias_init, torch_default
from lra.models.blocks.norms import gated_rms_norm
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.registry import register

NORM_EPS = 1e-5  # the B, C and output norms' eps (the authors' RMSNormGated)
AUTO_HEAD = 64  # head_dim 0: the largest divisor of E up to this (the authors' headdim)
TWO_PI = 2 * math.pi
A_ACTIVATIONS = ("heavy_tail", "softplus")


def heavy_tail(u):
  """1 + u for u >= 0, 1 / (1 - u) below: positive, continuous, slope 1 at 0 (the authors'
  heavy_tail_activation: a slowly vanishing A for very negative u)."""
  return jnp.maximum(u, 0.0) + 1.0 / (1.0 - jnp.minimum(u, 0.0))


def cumulative_angles(phi_BxLxHxA):
  """theta_t = phi_0 + ... + phi_t along L, mod 2 pi: an associative scan whose partial sums
  are each wrapped into [0, 2 pi), so no sum grows with the length (the authors wrap their
  running sum: the same float32 rounding, about 1e-4 rad after 20,000 turning steps, where
  an unwrapped float32 sum would be off by 1e-2). The wrap's gradient is 1: the sum's."""
  def add(a, b):
    total = a + b
    return total - TWO_PI * jnp.floor(total / TWO_PI)

  return jax.lax.associative_scan(add, phi_BxLxHxA, axis=1)


def rotate(x_BxLxHxN, theta_BxLxHxA):
  """Channel pairs (2i, 2i + 1), i < A, turned by theta_i: (x0 cos - x1 sin, x0 sin + x1 cos);
  the channels from 2A on as they are (the authors' SISO rotation, pairwise)."""
  angles = theta_BxLxHxA.shape[-1]
  head = x_BxLxHxN[..., :2 * angles].reshape(x_BxLxHxN.shape[:-1] + (angles, 2))
  cos, sin = jnp.cos(theta_BxLxHxA), jnp.sin(theta_BxLxHxA)
  turned = jnp.stack([head[..., 0] * cos - head[..., 1] * sin,
                      head[..., 0] * sin + head[..., 1] * cos], axis=-1)
  return jnp.concatenate([turned.reshape(x_BxLxHxN.shape[:-1] + (2 * angles,)),
                          x_BxLxHxN[..., 2 * angles:]], axis=-1)


def at_next_real(w_BxLxH, mask_BxL):
  """w at the next real position after each position, 0 where none follows: position t's
  write meets the trapezoid's second term there (padding is no one's neighbour)."""
  batch, length = mask_BxL.shape
  position_BxL = jnp.where(mask_BxL, jnp.arange(length)[None], length)
  later_BxL = jax.lax.cummin(position_BxL, axis=1, reverse=True)  # the first real >= t
  next_BxL = jnp.concatenate([later_BxL[:, 1:], jnp.full((batch, 1), length)], axis=1)
  w_Bx_L1_xH = jnp.concatenate([w_BxLxH, jnp.zeros_like(w_BxLxH[:, :1])], axis=1)
  return w_Bx_L1_xH[jnp.arange(batch)[:, None], next_BxL]


@register("mamba3")
class Mamba3(RecurrentMixer):
  """Mamba-3 SISO layer: in_proj to (z, x, B, C, dt, A, trapezoid, angles), B and C normed,
  biased and rotated by cumulative data-dependent angles, the trapezoidal SSM recurrence per
  head (+ D skip), the SiLU(z) gate, out_proj (see the module docstring)."""
  d_state: int = s.setting(128, s.Int(1), "N: the state's rows per head (the authors' d_state)")
  head_dim: int = s.setting(0, s.Int(0), "P: channels per head, H = E / P (the authors' "
                            "headdim); 0 = the largest divisor of E up to 64 (their 64 "
                            "wherever 64 divides E)")
  expand: int = s.setting(2, s.Int(1), "E = expand * D inner channels")
  groups: int = s.setting(1, s.Int(1), "G: groups of heads sharing B and C before their "
                          "per-head biases (the authors' ngroups)")
  rope_fraction: float = s.setting(0.5, s.Choice((0.5, 1.0)), "the share of B's and C's "
                                   "channels that rotate (the authors' rope_fraction)")
  dt_min: float = s.setting(0.001, s.Float(0.0, open="low"),
                            "dt starts log-uniform in [dt_min, dt_max] (through dt_bias)")
  dt_max: float = s.setting(0.1, s.Float(0.0, open="low"),
                            "the upper end of dt's initial range (see dt_min)")
  A_floor: float = s.setting(1e-4, s.Float(0.0), "A = min(-f(dd_A), -A_floor): every "
                             "position decays at least this much per unit dt")
  A_activation: str = s.setting("heavy_tail", s.Choice(A_ACTIVATIONS), "f of A = -f(dd_A): "
                                "the authors' heavy tail, or softplus (their first release, "
                                "fla's port)")
  outproj_norm: bool = s.setting(False, s.Bool(), "RMSNorm(y) per head before the SiLU(z) "
                                 "gate (the authors' is_outproj_norm)")
  num_layers: int = 1  # the encoder's depth (filled in): out_proj starts / sqrt(num_layers)

  # Leaf names trained with config.ssm_learning_rate and no weight decay (the authors mark
  # D and dt_bias _no_weight_decay).
  OPTIMIZER_GROUP = ("D", "dt_bias")
  ATTENTION_DROPOUT = False  # no attention weights, no dropout inside (as the authors' layer)

  def check_settings(self) -> None:
    super().check_settings()
    if self.dt_min > self.dt_max:
      s.fail(s.attention_key("dt_min"), self.dt_min,
             f"a number <= config.model.attention.dt_max={self.dt_max!r}")
    if self.rope_angles < 1:
      s.fail(s.attention_key("d_state"), self.d_state,
             f"at least {int(2 / self.rope_fraction)} with config.model.attention."
             f"rope_fraction={self.rope_fraction!r} (no channel pair would rotate)")

  @property
  def rope_angles(self) -> int:
    """A_r: the rotation's angles, rope_fraction * N rounded down to even, halved."""
    rotated = int(self.d_state * self.rope_fraction)
    return (rotated - rotated % 2) // 2

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
    """(H, N, P): S is N x P per head."""
    inner, heads = self.check_width(width)
    return heads, self.d_state, inner // heads

  def carried_state(self, width: int, length: int) -> int:
    """Per pass and head, what the authors' decode cache holds: S (N x P), the previous
    position's rotated B (N) and x (P) for the trapezoid, and the angle sums (A_r)."""
    del length  # a fixed-size state
    heads, n, p = self.head_sizes(width)
    return self.directions * heads * (n * p + n + p + self.rope_angles)

  def core(self, q_BxLxHxN, k_BxLxHxN, v_BxLxHxP, mask_BxL, *, reverse: bool, log_decay,
           dt, trap, angles):
    """One pass of the SSM on the core: (y_BxLxHxP, None). q, k: C and B after their norms
    and biases (not yet rotated); dt, trap (lam) B x L x H; angles B x L x A_r (pi tanh).
    `reverse`: the same recurrence over the reversed sequence (flipped here, the core run
    forward: the module docstring's backward pass)."""
    flip = (lambda a: jnp.flip(a, axis=1)) if reverse else (lambda a: a)
    q, k, v, mask, log_decay, dt, trap, angles = map(
        flip, (q_BxLxHxN, k_BxLxHxN, v_BxLxHxP, mask_BxL, log_decay, dt, trap, angles))
    keep_BxLxH = jnp.broadcast_to(mask[..., None], dt.shape)
    dt = jnp.where(keep_BxLxH, dt, 0.0)  # a padded position turns no angle, writes nothing
    theta_BxLxHxA = cumulative_angles(angles[:, :, None] * dt[..., None])
    own_BxLxH = trap * dt
    shared_BxLxH = at_next_real((1.0 - trap) * dt, mask)  # met at the next real position
    y, _ = super().core(rotate(q, theta_BxLxHxA),
                        rotate(k, theta_BxLxHxA) * (own_BxLxH + shared_BxLxH)[..., None],
                        v, mask, reverse=False, log_decay=log_decay)
    # The core's read at t holds t's share for t + 1 already (C_t . B_t: no turn between).
    early_BxLxH = jnp.where(keep_BxLxH, shared_BxLxH * jnp.sum(q * k, axis=-1), 0.0)
    return flip(y - early_BxLxH[..., None] * v), None

  def _parameters(self, heads: int, n: int):
    """(dt_bias, D, B_norm, C_norm, B_bias, C_bias) at the authors' initialisation."""
    return (self.param("dt_bias", dt_bias_init(self.dt_min, self.dt_max), (heads,)),
            self.param("D", nn.initializers.ones, (heads,)),
            self.param("B_norm", nn.initializers.ones, (n,)),
            self.param("C_norm", nn.initializers.ones, (n,)),
            self.param("B_bias", nn.initializers.ones, (heads, n)),
            self.param("C_bias", nn.initializers.ones, (heads, n)))

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    (batch, length, width), f32 = x_BxLxD.shape, lambda a: a.astype(jnp.float32)
    inner, heads = self.check_width(width)
    n, g, p, angles = self.d_state, self.groups, inner // heads, self.rope_angles
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    sizes = (inner, inner, g * n, g * n, heads, heads, heads, angles)
    proj = nn.Dense(sum(sizes), use_bias=False, dtype=self.dtype, kernel_init=torch_default,
                    name="in_proj")(h_BxLxD)
    z, x, B, C, dd_dt, dd_A, trap, angle = jnp.split(
        f32(proj), [sum(sizes[:i]) for i in range(1, len(sizes))], axis=-1)
    dt_bias_H, D_H, B_norm_N, C_norm_N, B_bias_HxN, C_bias_HxN = self._parameters(heads, n)
    dt_BxLxH = jax.nn.softplus(dd_dt + dt_bias_H[None, None])
    f = heavy_tail if self.A_activation == "heavy_tail" else jax.nn.softplus
    A_BxLxH = jnp.minimum(-f(dd_A), -self.A_floor)
    group_of = jnp.arange(heads) // (heads // g)  # head h reads group h // (H / G)
    per_head = lambda a, w: gated_rms_norm(a.reshape(batch, length, g, n), w,
                                           eps=NORM_EPS)[:, :, group_of]
    k_BxLxHxN = per_head(B, B_norm_N) + B_bias_HxN[None, None]
    q_BxLxHxN = per_head(C, C_norm_N) + C_bias_HxN[None, None]
    x_BxLxHxP = x.reshape(batch, length, heads, p)
    y_BxLxHxP = self.run(q_BxLxHxN, k_BxLxHxN, x_BxLxHxP, mask_BxL,
                         log_decay=A_BxLxH * dt_BxLxH, dt=dt_BxLxH, trap=jax.nn.sigmoid(trap),
                         angles=math.pi * jnp.tanh(angle))
    y_BxLxHxP = y_BxLxHxP + D_H[None, None, :, None] * x_BxLxHxP
    z_BxLxHxP = z.reshape(batch, length, heads, p)
    if self.outproj_norm:  # the authors' RMSNormGated, group_size = head_dim, norm then gate
      norm_E = self.param("norm", nn.initializers.ones, (inner,))
      y_BxLxHxP = gated_rms_norm(y_BxLxHxP, norm_E.reshape(heads, p), z_BxLxHxP, eps=NORM_EPS)
    else:
      y_BxLxHxP = y_BxLxHxP * jax.nn.silu(z_BxLxHxP)
    out_init = nn.initializers.variance_scaling(1 / (3 * self.num_layers), "fan_in", "uniform")
    return nn.Dense(width, use_bias=False, dtype=self.dtype, kernel_init=out_init,
                    name="out_proj")(y_BxLxHxP.reshape(batch, length, inner).astype(self.dtype))
