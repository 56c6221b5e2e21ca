"""LRU (Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu & De, ICML 2023, "Resurrecting
Recurrent Neural Networks for Long Sequences"): the Linear Recurrent Unit.

A complex diagonal linear recurrence over the sequence with an N-dimensional state shared by
the H = D channels (N = state_size):
    x_k = Lambda x_{k-1} + gamma * (B u_k),     y_k = Re(C x_k) + D * u_k,
run as jax.lax.associative_scan (O(L log L) depth, O(L N) memory, never L x L).

Parameterisation and initialisation (the paper's section 3 and its appendix A code):
  - Stable exponential parameterisation: Lambda = exp(-exp(nu_log) + i exp(theta_log)), so
    |Lambda| = exp(-exp(nu_log)) < 1 for every value of nu_log: stable whatever training does.
  - Ring initialisation: |Lambda|^2 uniform in [r_min^2, r_max^2] (uniform on the ring's area,
    the paper's sampling), phase uniform in [0, max_phase]; settings r_min, r_max, max_phase.
    The defaults are the appendix code's (0, 1, 2 pi); the per-task LRA values are in
    configs/published/lru.py (e.g. Path-X: r in [0.999, 0.9999], phase <= pi/10).
  - Normalisation: gamma = sqrt(1 - |Lambda|^2), learned as gamma_log (init log of that), which
    keeps the state's variance that of the input at init however close |Lambda| is to 1.
  - B = B_re + i B_im with parts N(0, 1/(2H)) (glorot-like for a complex H -> N map);
    C = C_re + i C_im with parts N(0, 1/N); D ~ N(0, 1). Stored as (real, imaginary) pairs.

Bidirectional (setting; off by default, as the paper's appendix code is a causal recurrence):
a second recurrence over the reversed sequence sharing Lambda, gamma and B, with its own C;
y = Re(C x_fwd + C_reverse x_bwd) + D u (the way S5 and S4 make their layers bidirectional).

The layer (the paper's figure 1 block minus its norm and skip, which the encoder owns): LRU,
GELU, dropout, then a GLU  h = W1 g * sigmoid(W2 g)  (the "MLP/GLU" nonlinear projection of the
paper's LRA models), returning B x L x D. Its last dropout is the encoder's residual dropout.
Dropout masks are tied over the sequence by default (tie_dropout), as in the S5 code base the
paper's LRA setup follows.

Padding: padded positions are skipped by the recurrence (identity transition, zero input), so
real outputs equal those of the sequence with its padded positions removed.

Optimiser: nu_log, theta_log and gamma_log are OPTIMIZER_GROUP: trained with
config.ssm_learning_rate (the paper uses a smaller learning rate for the recurrence
parameters) and no weight decay. B trains with the others (the unofficial minimal-LRU code
also moves B to the smaller rate; the paper's text names the recurrence parameters).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.inputs import as_complex, glu, masked_input, project_in, recurrence_out
from lra.models.blocks.ssm import SSMMixer
from lra.models.registry import register

# Smallest uniform draw for the ring: u = 0 would put |Lambda| exactly at r_min = 0, where
# nu_log = +inf and its gradient is NaN.
_TINY = 1e-7


def magnitude_and_phase(nu_log_N, theta_log_N):
  """(|Lambda|, arg Lambda) of the exponential parameterisation."""
  return jnp.exp(-jnp.exp(nu_log_N)), jnp.exp(theta_log_N)


def eigenvalues(nu_log_N, theta_log_N):
  """Lambda = exp(-exp(nu_log) + i exp(theta_log)), complex (N,)."""
  return jnp.exp(jax.lax.complex(-jnp.exp(nu_log_N), jnp.exp(theta_log_N)))


@register("lru")
class LRU(SSMMixer):
  """Linear Recurrent Unit by parallel scan (+ D skip), GELU, dropout, GLU output."""
  # dropout_rate (the encoder's attention_dropout_rate) is the dropout after the GELU.
  state_size: int = s.setting(256, s.Int(1), "N complex states")
  r_min: float = s.setting(0.0, s.Float(0.0, 1.0, open="high"),
                           "|Lambda| starts in [r_min, r_max] (uniform on the ring's area)")
  r_max: float = s.setting(1.0, s.Float(0.0, 1.0, open="low"),
                           "|Lambda| starts at most r_max (see r_min)")
  max_phase: float = s.setting(6.283185307179586, s.Float(0.0, open="low"),
                               "2 pi: arg(Lambda) starts uniform in [0, max_phase]")
  bidirectional: bool = s.setting(False, s.Bool(), "add a recurrence from the end with its own C")
  tie_dropout: bool = s.setting(True, s.Bool(),
                                "one dropout mask per channel for the whole sequence")

  # Leaf names that train with config.ssm_learning_rate and no weight decay
  # (lra/training/optim.py).
  OPTIMIZER_GROUP = ("nu_log", "theta_log", "gamma_log")
  # The encoder adds no absolute positions to the LRU and mean-pools the real tokens without a
  # CLS token: the recurrence encodes order itself, and a causal recurrence would give a CLS
  # token at position 0 nothing to see.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    if self.r_min > self.r_max:
      s.fail(s.attention_key("r_min"), self.r_min,
             f"a number <= config.model.attention.r_max={self.r_max!r}")

  def carried_state(self, width: int, length: int) -> int:
    """N complex states: 2 N numbers, per direction."""
    del width, length
    return (2 if self.bidirectional else 1) * 2 * self.state_size

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    width, n = x_BxLxD.shape[-1], self.state_size
    r_min2, r_max2 = float(self.r_min) ** 2, float(self.r_max) ** 2

    def init_nu_log(key):
      u_N = jax.random.uniform(key, (n,), jnp.float32, _TINY, 1.0)
      # |Lambda|^2 = u (r_max^2 - r_min^2) + r_min^2 = exp(-2 nu).
      return jnp.log(-0.5 * jnp.log(u_N * (r_max2 - r_min2) + r_min2))

    def init_theta_log(key):
      return jnp.log(self.max_phase * jax.random.uniform(key, (n,), jnp.float32, _TINY, 1.0))

    nu_log_N = self.param("nu_log", init_nu_log)
    theta_log_N = self.param("theta_log", init_theta_log)
    # log sqrt(1 - |Lambda|^2) = log(1 - exp(-2 nu)) / 2, with expm1 for |Lambda| near 1.
    gamma_log_N = self.param(
        "gamma_log", lambda _: 0.5 * jnp.log(-jnp.expm1(-2 * jnp.exp(nu_log_N))))
    B_NxHx2 = self.param("B", nn.initializers.normal(np.sqrt(1 / (2 * width))), (n, width, 2))
    C_HxNx2 = self.param("C", nn.initializers.normal(np.sqrt(1 / n)), (width, n, 2))
    C2_HxNx2 = (self.param("C_reverse", nn.initializers.normal(np.sqrt(1 / n)), (width, n, 2))
                if self.bidirectional else None)
    D_H = self.param("D", nn.initializers.normal(1.0), (width,))

    u_BxLxH = masked_input(x_BxLxD, mask_BxL)
    lam_N = eigenvalues(nu_log_N, theta_log_N)
    B_NxH = jnp.exp(gamma_log_N)[:, None] * as_complex(B_NxHx2)  # gamma folded into B
    bu_BxLxN = project_in(u_BxLxH, B_NxH)
    y_BxLxH = recurrence_out(lam_N, bu_BxLxN, mask_BxL, C_HxNx2, C2_HxNx2)
    y_BxLxH = (y_BxLxH + D_H[None, None, :] * u_BxLxH).astype(self.dtype)

    g_BxLxH = self.tied_dropout(nn.gelu(y_BxLxH), deterministic=deterministic)
    return glu(g_BxLxH, self.dtype)
