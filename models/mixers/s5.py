"""S5 (Smith, Warrington & Linderman, ICLR 2023, "Simplified State Space Layers for Sequence
Modeling"): one multi-input multi-output diagonal state space model over all D channels.

The continuous system x' = A x + B u, y = C x + D u has a P-dimensional state shared by the
H = D input and output channels (not one small SSM per channel as in S4/S4D). A is stored
diagonalised, A = V diag(Lambda) V^-1, and B, C in the eigenbasis (B~ = V^-1 B, C~ = C V).

Initialisation (the paper's section 4.3 and the official lindermanlab/S5 code):
  - HiPPO-N: the normal part of HiPPO-LegS, A_LegS + p p^T with p_n = sqrt(n + 1/2), which is
    -1/2 I plus a skew-symmetric matrix. Its eigendecomposition is computed once, in numpy at
    init time (never in the traced graph), with np.linalg.eigh on the Hermitian matrix
    -i (A_N + I/2): that gives the eigenvalues -1/2 + i w and an orthonormal V, so V^-1 = V^H
    exactly (np.linalg.eig would give a non-unitary basis for these paired eigenvalues).
  - Block-diagonal: A starts as J = `blocks` copies of HiPPO-N of size P/J on the diagonal,
    so Lambda is the block's spectrum tiled J times and V is block-diagonal.
  - Conjugate symmetry: the real system's eigenvalues come in conjugate pairs, so only one of
    each pair is kept (P/2 complex states); the output is y = 2 Re(C~ x) + D u. `state_size`
    is P, the size of the real system (the official `ssm_size_base`), so P/J must be even.
  - B: a real P x H matrix, truncated normal with variance 1/P (lecun normal as the official
    code applies it, with the state axis as fan-in), projected to B~ = V^H B.
  - C (setting c_init, the official options): "trunc_standard_normal" draws a complex H x P
    matrix whose parts have variance 1/P, "lecun_normal" one with variance 1/(P H) (fan-in as
    the official code computes it for its H x P x 2 array), both projected to C~ = C V;
    "complex_normal" draws C~ directly (each part variance 1/2, no projection).
  - D: standard normal. log_dt: one per state, uniform in [log dt_min, log dt_max].
Discretisation (setting `discretization`), per state with step dt = exp(log_dt):
    zoh:      Lambda_bar = exp(Lambda dt),  B_bar = (Lambda_bar - 1) / Lambda B~
    bilinear: Lambda_bar = (1 + dt Lambda/2) / (1 - dt Lambda/2),  B_bar = dt / (1 - dt Lambda/2) B~
and the recurrence x_k = Lambda_bar x_{k-1} + B_bar u_k runs as jax.lax.associative_scan with
(a_i, b_i) o (a_j, b_j) = (a_j a_i, a_j b_i + b_j): O(L log L) depth, O(L P) memory, no L x L.
`clip_eigs` (the official option, used for Image) clips Re(Lambda) at -1e-4, which keeps
|Lambda_bar| < 1 whatever training does.

Bidirectional (the official LRA runs all set it): a second scan over the reversed sequence
with the same Lambda_bar and B_bar and its own output matrix C2; y = 2 Re(C~ x_fwd + C2~ x_bwd)
+ D u, i.e. the official code's concatenated [C1, C2] acting on [x_fwd, x_bwd].

The layer (the official SequenceLayer minus its norm and residual, which the encoder owns):
SSM, GELU, dropout, then `activation`:
    gelu:       h = drop(gelu(y))
    full_glu:   h = W1 g * sigmoid(W2 g),  g = drop(gelu(y))
    half_glu1:  h = g * sigmoid(W2 g)          (the official default)
    half_glu2:  h = y * sigmoid(W2 g)          (official ListOps and Text runs)
returning B x L x D. The official layer's last dropout is the encoder's residual dropout here.
Dropout masks are tied over the sequence by default (tie_dropout), as the official layer does.

Padding: padded positions are skipped by the recurrence (their input is zero and their
transition is the identity), so every real output equals that of the sequence with its padded
positions removed, in both directions; with LRA's trailing padding that is truncation.

Optimiser: Lambda_re, Lambda_im, B and log_dt are OPTIMIZER_GROUP: trained with
config.ssm_learning_rate and no weight decay (the official "standard" opt_config), the
default; the official runs vary it per task (ListOps and Image train B with the global rate and
weight decay; Text and Retrieval put log_dt there), which configs/published/s5.py sets through
the trainer's ssm_params / ssm_decay_params.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import log_uniform
from lra.models.blocks.inputs import (as_complex, as_pair, glu, masked_input, project_in,
                                      recurrence_out)
from lra.models.blocks.ssm import SSMMixer
from lra.models.registry import register

DISCRETIZATIONS = ("zoh", "bilinear")
ACTIVATIONS = ("gelu", "full_glu", "half_glu1", "half_glu2")
C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")
CLIP_RE = -1e-4  # clip_eigs: the largest real part an eigenvalue may have


def hippo_n(n: int) -> np.ndarray:
  """HiPPO-N, n x n: -1/2 on the diagonal, -/+ sqrt((2i+1)(2j+1))/2 below/above it."""
  half_QxQ = 0.5 * np.outer(np.sqrt(2 * np.arange(n) + 1.0), np.sqrt(2 * np.arange(n) + 1.0))
  return np.triu(half_QxQ, 1) - np.tril(half_QxQ, -1) - 0.5 * np.eye(n)


def hippo_n_eigen(n: int) -> tuple[np.ndarray, np.ndarray]:
  """(Lambda, V) with HiPPO-N = V diag(Lambda) V^H, V unitary; Im(Lambda) ascending."""
  skew_NxN = hippo_n(n) + 0.5 * np.eye(n)
  w_N, v_NxN = np.linalg.eigh(-1j * skew_NxN)  # Hermitian, so real w and orthonormal V
  return -0.5 + 1j * w_N, v_NxN


@functools.lru_cache(maxsize=None)
def eigenbasis(state_size: int, blocks: int) -> tuple[np.ndarray, np.ndarray]:
  """The kept half of the block-diagonal HiPPO-N system: Lambda (P/2,), V (P x P/2).

  Each of the J blocks of size n = P/J keeps the n/2 eigenvalues with negative imaginary part
  (eigh sorts them first; the rest are their conjugates) and their eigenvectors.
  """
  n = state_size // blocks
  lam_n, v_nxn = hippo_n_eigen(n)
  keep = n // 2
  v_PxN = np.zeros((state_size, state_size // 2), np.complex128)
  for j in range(blocks):
    v_PxN[j * n:(j + 1) * n, j * keep:(j + 1) * keep] = v_nxn[:, :keep]
  lam_N = np.tile(lam_n[:keep], blocks)
  lam_N.flags.writeable = v_PxN.flags.writeable = False  # cached: shared by every caller
  return lam_N, v_PxN


def truncated_normal(key, shape, variance: float):
  """Normal truncated to two standard deviations, rescaled to have `variance` (lecun style)."""
  # 0.8796... is the standard deviation of a standard normal truncated to [-2, 2].
  std = np.sqrt(variance) / 0.87962566103423978
  return jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) * std


def discretize(lambda_re_N, lambda_im_N, log_dt_N, B_NxHx2, method: str, clip_eigs: bool):
  """(Lambda_bar (N,), B_bar (N x H)) complex, for N = P/2 kept states."""
  re_N = jnp.minimum(lambda_re_N, CLIP_RE) if clip_eigs else lambda_re_N
  lam_N = jax.lax.complex(re_N, lambda_im_N)
  dt_N = jnp.exp(log_dt_N)
  if method == "zoh":
    lam_bar_N = jnp.exp(lam_N * dt_N)
    # (exp(dt Lambda) - 1) / Lambda with expm1: exp - 1 loses digits for small dt Lambda.
    scale_N = jnp.expm1(lam_N * dt_N) / lam_N
  elif method == "bilinear":
    denominator_N = 1.0 - 0.5 * dt_N * lam_N
    lam_bar_N = (1.0 + 0.5 * dt_N * lam_N) / denominator_N
    scale_N = dt_N / denominator_N
  else:
    raise ValueError(f"unknown s5 discretization {method!r}; valid: {', '.join(DISCRETIZATIONS)}")
  return lam_bar_N, scale_N[:, None] * as_complex(B_NxHx2)


@register("s5")
class S5(SSMMixer):
  """S5 layer: MIMO diagonal SSM by parallel scan (+ D skip), GELU, dropout, GLU output."""
  # dropout_rate (the encoder's attention_dropout_rate) is the dropout after the GELU.
  state_size: int = s.setting(256, s.Int(2),
                              "P, the real system's state size (P/2 complex states are kept)")
  blocks: int = s.setting(8, s.Int(1),
                          "J HiPPO-N blocks of size P/J on A's diagonal at init (P/J even)")
  discretization: str = s.setting("zoh", s.Choice(DISCRETIZATIONS), '"zoh" or "bilinear"')
  dt_min: float = s.setting(0.001, s.Float(0.0, open="low"),
                            "log_dt starts uniform in [log dt_min, log dt_max]")
  dt_max: float = s.setting(0.1, s.Float(0.0, open="low"),
                            "the upper end of log_dt's initial range (see dt_min)")
  c_init: str = s.setting("trunc_standard_normal", s.Choice(C_INITS),
                          "C's initialisation (see the module docstring)")
  bidirectional: bool = s.setting(True, s.Bool(),
                                  "a second scan from the end with its own C (official LRA runs)")
  clip_eigs: bool = s.setting(False, s.Bool(), "keep Re(Lambda) <= -1e-4 (official Image run)")
  activation: str = s.setting("half_glu1", s.Choice(ACTIVATIONS),
                              '"gelu", "full_glu", "half_glu1" or "half_glu2"')
  tie_dropout: bool = s.setting(True, s.Bool(),
                                "one dropout mask per channel for the whole sequence (official)")

  # Leaf names that train with config.ssm_learning_rate and no weight decay
  # (lra/training/optim.py).
  OPTIMIZER_GROUP = ("Lambda_re", "Lambda_im", "B", "log_dt")
  # The encoder adds no absolute positions to S5 and mean-pools the real tokens without a CLS
  # token: the recurrence encodes order itself, and the official S5 pools the mean.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    p, j = self.state_size, self.blocks
    if p % j or (p // j) % 2:
      s.fail(s.attention_key("blocks"), j,
             f"a divisor of config.model.attention.state_size={p!r} into blocks of even size "
             "(conjugate pairs)")
    self.check_dt_range()

  def _init_C(self, key, width: int):
    p = self.state_size
    lam_N, v_PxN = eigenbasis(p, self.blocks)
    if self.c_init == "complex_normal":  # drawn in the eigenbasis directly
      return jax.random.normal(key, (width, p // 2, 2), jnp.float32) * np.sqrt(0.5)
    variance = 1.0 / p if self.c_init == "trunc_standard_normal" else 1.0 / (p * width)
    c_HxP = as_complex(truncated_normal(key, (width, p, 2), variance))
    return as_pair(c_HxP @ jnp.asarray(v_PxN, jnp.complex64))

  def carried_state(self, width: int, length: int) -> int:
    """P/2 complex states (their conjugates implied): P numbers, per direction."""
    del width, length
    return (2 if self.bidirectional else 1) * self.state_size

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    width, p = x_BxLxD.shape[-1], self.state_size
    lam_N, v_PxN = eigenbasis(p, self.blocks)  # numpy, cached: not part of the traced graph

    lambda_re_N = self.param("Lambda_re", lambda _: jnp.asarray(lam_N.real, jnp.float32))
    lambda_im_N = self.param("Lambda_im", lambda _: jnp.asarray(lam_N.imag, jnp.float32))

    def init_B(key):
      b_PxH = truncated_normal(key, (p, width), 1.0 / p)
      return as_pair(jnp.asarray(v_PxN.conj().T, jnp.complex64) @ b_PxH)  # V^-1 B = V^H B

    B_NxHx2 = self.param("B", init_B)
    C_HxNx2 = self.param("C", lambda key: self._init_C(key, width))
    C2_HxNx2 = (self.param("C_reverse", lambda key: self._init_C(key, width))
                if self.bidirectional else None)
    D_H = self.param("D", nn.initializers.normal(1.0), (width,))
    log_dt_N = self.param("log_dt", log_uniform(self.dt_min, self.dt_max), (p // 2,))

    u_BxLxH = masked_input(x_BxLxD, mask_BxL)
    lam_bar_N, B_bar_NxH = discretize(lambda_re_N, lambda_im_N, log_dt_N, B_NxHx2,
                                      self.discretization, self.clip_eigs)
    bu_BxLxN = project_in(u_BxLxH, B_bar_NxH)
    # The dropped conjugates give the factor 2.
    y_BxLxH = 2 * recurrence_out(lam_bar_N, bu_BxLxN, mask_BxL, C_HxNx2, C2_HxNx2)
    y_BxLxH = (y_BxLxH + D_H[None, None, :] * u_BxLxH).astype(self.dtype)

    g_BxLxH = self.tied_dropout(nn.gelu(y_BxLxH), deterministic=deterministic)
    if self.activation == "gelu":
      return g_BxLxH
    if self.activation == "full_glu":
      return glu(g_BxLxH, self.dtype)
    gate_BxLxH = jax.nn.sigmoid(nn.Dense(width, dtype=self.dtype, name="gate")(g_BxLxH))
    if self.activation == "half_glu1":
      return g_BxLxH * gate_BxLxH
    return y_BxLxH * gate_BxLxH  # half_glu2: the GELU only feeds the gate
