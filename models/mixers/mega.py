"""Mega (Ma, Zhou, Kong, He, Gui, Neubig, May & Zettlemoyer, ICLR 2023, "Mega: Moving Average
Equipped Gated Attention"): a multi-dimensional damped EMA feeding single-head gated attention.

Multi-dimensional damped EMA (the paper's section 3.1 and appendix A). Each channel j of the
input X (B x L x D) is expanded to h = `ema_dim` dimensions by beta_j, and each runs
    h_t = alpha * beta x_t + (1 - alpha * delta) * h_{t-1},   y_t = eta^T h_t / sqrt(h)
with alpha = sigmoid(.), delta = sigmoid(.) in (0, 1) learned per channel and dimension, so
the decay q = 1 - alpha * delta lies in (0, 1). Unrolled, y = K * x with the kernel
    K[l] = sum_n eta_n alpha_n beta_n q_n^l / sqrt(h),   l = 0 .. L-1,
computed as one Vandermonde product exp(l log q) and applied by FFT over 2L points (no wrap,
no L x L array). The 1/sqrt(h) and the initialisation (alpha, delta logits N(0, 0.2); beta
N(0, 0.02) plus +1, -1, +1, ... over the h dimensions; eta and omega N(0, 1)) are those of the
official facebookresearch/mega code. `truncation` > 0 keeps the first `truncation` lags of
the kernel only (the official LRA runs: 1024, Path-X 4096). Bidirectional (the paper's
encoder mode, every LRA run): a second set of alpha, delta, beta, eta runs from the end, and
    y[t] = sum_{s<=t} K_f[t-s] x[s] + sum_{s>=t} K_b[s-t] x[s]
(lag 0 in both, as the official code sums them). The EMA output is X' = silu(y + omega * x).

Gated attention (eqs. 7-15; v = `v_dim`, z = `z_dim`):
    V = silu(X W_v + b_v)                                              B x L x v
    [phi | Z | gamma | Hx] = X' W + b: phi = sigmoid(.), Z and gamma silu(.)
    Q = kappa_q * Z + mu_q,  K = kappa_k * Z + mu_k                    per-dimension scale/offset
    O = f(Q K^T / tau + b_rel) V
    H^ = silu(Hx + (gamma * O) U_h + b_h)                              the candidate, B x L x D
and the block's sub-layer is Y = X + phi * (dropout(H^) - X), a gated residual: the mixer's
`residual` (the Mixer hook the encoder's Block calls) builds it from `candidate_and_gate`, the
Block normalising X first (pre-norm) or Y after (post-norm), as the official
MovingAverageGatedAttention does; reversible layers cannot run it (Mixer.reversible).
`__call__` alone returns phi * (H^ - X) for its input X (the update, without dropout).
f (`attention_fn`): "softmax" (tau = sqrt(z), padded keys get weight 0); "laplace" (eq. 16,
0.5 (1 + erf((x - mu) / (sigma sqrt 2))) with mu = sqrt(1/2), sigma = sqrt(1/(4 pi))) or
"relu2" (relu(x)^2), both element-wise with tau = the number of real keys in the chunk and
padded keys multiplied by 0. In softmax mode mu_k would shift every logit of a query equally
and cancel, so it is not created (the official code keeps it, with zero gradient).
b_rel is the paper's LRA choice (appendix D.1): one learned scalar per relative distance j - i,
b_rel[i, j] = w[j - i + P - 1] with P = min(`max_positions`, chunk_size) (or `max_positions`
unchunked; the official P is the task's max positions, or the chunk size). Distances beyond
P - 1 take the last entry (the official code refuses such lengths instead).

Mega-chunk (section 3.4): `chunk_size` > 0 cuts Q, K, V into contiguous chunks of that many
positions (the last one filled with masked keys) and attends within each chunk only, chunk by
chunk (B x N x C x C logits, never an L x L array or mask): linear in L. An input shorter
than a chunk is one chunk of its length.

Dropout (the official's three rates): the encoder's dropout_rate on H^ (the block, before the
gate) and on the feed-forward output; `ema_dropout` on X' (the official `dropout`);
`hidden_dropout` on V (the official `act-dropout`); the encoder's attention_dropout_rate on
the attention weights. Padding: X is zeroed at padded positions before the EMA, so nothing
flows from them in either direction, and padded keys get no weight; trailing padding is
truncation. All parameters train alike (the paper gives no separate group).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.inputs import masked_input
from lra.models.common import Mixer, dropout_weights, masked_softmax
from lra.models.ops.blocked import padded_blocks
from lra.models.ops.convolution import fft_convolve
from lra.models.registry import register

ATTENTION_FNS = ("softmax", "laplace", "relu2")
LAPLACE_MU, LAPLACE_SIGMA = np.sqrt(0.5), np.sqrt(0.25 / np.pi)  # eq. 16, appendix C


def ema_kernel(alpha_KxDxN, delta_KxDxN, beta_KxDxN, eta_KxDxN, length: int):
  """K x length x D kernels K[l] = sum_n eta alpha beta q^l / sqrt(h), q = 1 - alpha delta
  (alpha, delta given as logits), one per direction K."""
  alpha, delta = jax.nn.sigmoid(alpha_KxDxN), jax.nn.sigmoid(delta_KxDxN)
  log_q_KxDxN = jnp.log1p(-alpha * delta)  # q in (0, 1)
  lag_1x1x1xL = jnp.arange(length, dtype=jnp.float32)[None, None, None]
  vandermonde_KxDxNxL = jnp.exp(log_q_KxDxN[..., None] * lag_1x1x1xL)
  weight_KxDxN = alpha * beta_KxDxN * eta_KxDxN / np.sqrt(alpha_KxDxN.shape[-1])
  return jnp.einsum("kdn,kdnl->kld", weight_KxDxN, vandermonde_KxDxNxL)


def _beta_init(key, shape):
  """N(0, 0.02) plus +1, -1, +1, ... along the EMA dimensions (the official init)."""
  signs_N = np.where(np.arange(shape[-1]) % 2, -1.0, 1.0).astype(np.float32)
  return jax.random.normal(key, shape, jnp.float32) * 0.02 + jnp.asarray(signs_N)[None, None]


class DampedEMA(nn.Module):
  """The multi-dimensional damped EMA with its skip: silu(K * u + omega u), float32 B x L x D.
  `u` must already be zero at padded positions."""
  ema_dim: int
  bidirectional: bool
  truncation: int  # 0: the kernel spans the whole length

  @nn.compact
  def __call__(self, u_BxLxD):
    length, width = u_BxLxD.shape[1:]
    shape = (2 if self.bidirectional else 1, width, self.ema_dim)
    alpha = self.param("alpha", nn.initializers.normal(0.2), shape)
    delta = self.param("delta", nn.initializers.normal(0.2), shape)
    beta = self.param("beta", _beta_init, shape)
    eta = self.param("eta", nn.initializers.normal(1.0), shape)
    omega_D = self.param("omega", nn.initializers.normal(1.0), (width,))
    lags = min(self.truncation, length) if self.truncation else length
    k_KxLxD = jnp.pad(ema_kernel(alpha, delta, beta, eta, lags),
                      ((0, 0), (0, length - lags), (0, 0)))
    if self.bidirectional:
      # fft_convolve's backward kernel covers s > t: K_b shifted by one, its lag 0 added to K_f.
      forward_LxD = k_KxLxD[0].at[0].add(k_KxLxD[1, 0])
      later_LxD = jnp.concatenate([k_KxLxD[1, 1:], jnp.zeros_like(k_KxLxD[1, :1])])
      y_BxLxD = fft_convolve(u_BxLxD, forward_LxD, later_LxD)
    else:
      y_BxLxD = fft_convolve(u_BxLxD, k_KxLxD[0])
    return nn.silu(y_BxLxD + omega_D[None, None] * u_BxLxD)


def relative_bias(table_R, chunk: int):
  """C x C: table[clip(j - i, 1 - P, P - 1) + P - 1] for query i, key j (R = 2P - 1)."""
  span = (table_R.shape[0] + 1) // 2
  offsets_CxC = np.arange(chunk)[None, :] - np.arange(chunk)[:, None]
  return table_R[np.clip(offsets_CxC, 1 - span, span - 1) + span - 1]


def element_weights(x, fn: str):
  """The element-wise attention functions: laplace (eq. 16) or relu2."""
  if fn == "laplace":
    return 0.5 * (1.0 + jax.lax.erf((x - LAPLACE_MU) / (LAPLACE_SIGMA * np.sqrt(2.0))))
  return jnp.square(jax.nn.relu(x))


def chunk_attention(q_BxLxZ, k_BxLxZ, v_BxLxV, mask_BxL, bias_table_R, *, chunk: int, fn: str,
                    dropout_rng=None, dropout_rate: float = 0.0):
  """f(Q K^T / tau + b_rel) V within contiguous chunks of `chunk` positions (chunk = L: full
  attention); logits and weights in float32. Returns B x L x V."""
  batch, length = mask_BxL.shape
  q_BxNxCxZ, k_BxNxCxZ, v_BxNxCxV = (padded_blocks(t, chunk)
                                      for t in (q_BxLxZ, k_BxLxZ, v_BxLxV))
  keep_BxNxC = padded_blocks(mask_BxL.astype(bool), chunk, value=False)  # fill keys: masked
  logits_BxNxCxC = jnp.einsum("bnqz,bnkz->bnqk", q_BxNxCxZ, k_BxNxCxZ,
                              preferred_element_type=jnp.float32)
  bias_1x1xCxC = relative_bias(bias_table_R, chunk).astype(jnp.float32)[None, None]
  keep_BxNx1xC = keep_BxNxC[:, :, None, :]
  if fn == "softmax":
    logits_BxNxCxC = logits_BxNxCxC * q_BxLxZ.shape[-1] ** -0.5 + bias_1x1xCxC
    weights = masked_softmax(logits_BxNxCxC, keep_BxNx1xC, dropout_rng=dropout_rng,
                             dropout_rate=dropout_rate)
  else:  # tau: the number of real keys in the chunk (at least 1)
    count_BxNx1x1 = jnp.maximum(jnp.sum(keep_BxNx1xC, axis=-1, keepdims=True), 1)
    weights = element_weights(logits_BxNxCxC / count_BxNx1x1.astype(jnp.float32)
                              + bias_1x1xCxC, fn)
    weights = jnp.where(keep_BxNx1xC, weights, 0.0)
    if dropout_rng is not None and dropout_rate > 0.0:
      weights = dropout_weights(dropout_rng, weights, dropout_rate)
  o_BxNxCxV = jnp.einsum("bnqk,bnkv->bnqv", weights.astype(v_BxNxCxV.dtype), v_BxNxCxV)
  return o_BxNxCxV.reshape(batch, -1, o_BxNxCxV.shape[-1])[:, :length]


@register("mega")
class Mega(Mixer):
  """Mega: bidirectional multi-dimensional damped EMA, then single-head gated attention (full,
  or within chunks: Mega-chunk); its `residual` is the gated one of eq. 15."""
  # dropout_rate (the encoder's attention_dropout_rate) drops attention weights.
  z_dim: int = s.setting(64, s.Int(1), "z: width of the shared representation Z (queries and "
                         "keys)")
  v_dim: int = s.setting(0, s.Int(0), "v: width of the values; 0 = twice the model width (the "
                         "paper's v = 2d)")
  ema_dim: int = s.setting(16, s.Int(1), "h: EMA dimensions per channel (the paper's LRA runs: "
                           "16)")
  attention_fn: str = s.setting("softmax", s.Choice(ATTENTION_FNS),
                                "\"softmax\", \"laplace\" or \"relu2\" (the paper's f)")
  chunk_size: int = s.setting(0, s.Int(0), "Mega-chunk: attend within chunks of this many "
                              "positions; 0 = all")
  max_positions: int = s.setting(1024, s.Int(1), "relative distances with their own bias: up "
                                 "to +-(P - 1)")
  bidirectional: bool = s.setting(True, s.Bool(), "a second EMA from the end (the paper's "
                                  "encoder mode)")
  truncation: int = s.setting(0, s.Int(0), "EMA kernel lags kept (the official LRA runs: "
                              "1024); 0 = all")
  ema_dropout: float = s.setting(0.0, s.Float(0.0, 1.0, open="high"),
                                 "dropout on the EMA output X' (the official `dropout`)")
  hidden_dropout: float = s.setting(0.0, s.Float(0.0, 1.0, open="high"),
                                    "dropout on the values V (the official `act-dropout`)")

  # The encoder adds no absolute positions (the EMA and the relative bias encode order) and
  # mean-pools the real tokens without a CLS token, as the official LRA encoder.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  @property
  def SUBQUADRATIC(self) -> bool:  # noqa: N802  (the flag every mixer has)
    return self.chunk_size > 0

  def idle_at(self, length: int) -> list[str]:
    if 0 < length <= self.chunk_size:
      return [f"config.model.attention.chunk_size={self.chunk_size} is at or above the input "
              f"length ({length}): one chunk holds every position, so Mega-chunk attends as "
              f"Mega does; give a chunk_size below {length} to chunk"]
    return []

  def _chunk(self, length: int) -> int:
    """The chunk used at this length: chunk_size (at most the length), or all positions."""
    return min(self.chunk_size, length) if self.chunk_size else length

  def _span(self) -> int:
    """P: relative distances up to P - 1 have their own bias."""
    return min(self.max_positions, self.chunk_size) if self.chunk_size else self.max_positions

  def carried_state(self, width: int, length: int) -> int:
    """The EMA's h dimensions per channel and direction (width x h x directions; a
    `truncation` cut is counted as the recurrence it cuts) and the keys (z) and values (v) of
    the chunk a query attends to (the whole sequence unchunked): chunk x (z + v)."""
    directions = 2 if self.bidirectional else 1
    values = self.v_dim or 2 * width
    return directions * width * self.ema_dim + self._chunk(length) * (self.z_dim + values)

  @nn.compact
  def candidate_and_gate(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    """(H^, phi), each B x L x D: the candidate output and the update gate (eqs. 6-14)."""
    width = x_BxLxD.shape[-1]
    z, v = self.z_dim, self.v_dim or 2 * width
    init = nn.initializers.normal(0.02)  # the official init of every projection
    dense = lambda features, name: nn.Dense(features, dtype=self.dtype, kernel_init=init,
                                            name=name)
    drop = lambda rate, t: nn.Dropout(rate)(t, deterministic=deterministic)
    v_BxLxV = drop(self.hidden_dropout, nn.silu(dense(v, "value")(x_BxLxD)))
    ema = DampedEMA(self.ema_dim, self.bidirectional, self.truncation, name="ema")
    x_ema_BxLxD = ema(masked_input(x_BxLxD, mask_BxL)).astype(self.dtype)
    base_BxLxE = dense(2 * width + z + v, "ema_projection")(drop(self.ema_dropout, x_ema_BxLxD))
    phi_BxLxD = jax.nn.sigmoid(base_BxLxE[..., :width])
    z_BxLxZ, gamma_BxLxV = jnp.split(nn.silu(base_BxLxE[..., width:width + z + v]), [z], -1)
    hx_BxLxD = base_BxLxE[..., width + z + v:]

    scale = lambda name: self.param(name, init, (z,)).astype(self.dtype)[None, None]
    offset = lambda name: self.param(name, nn.initializers.zeros, (z,)).astype(
        self.dtype)[None, None]
    q_BxLxZ = z_BxLxZ * scale("query_scale") + offset("query_offset")
    k_BxLxZ = z_BxLxZ * scale("key_scale")
    if self.attention_fn != "softmax":  # under softmax a key offset cancels (docstring)
      k_BxLxZ = k_BxLxZ + offset("key_offset")
    bias_R = self.param("relative_bias", init, (2 * self._span() - 1,))
    o_BxLxV = chunk_attention(q_BxLxZ, k_BxLxZ, v_BxLxV, mask_BxL, bias_R,
                              chunk=self._chunk(x_BxLxD.shape[1]), fn=self.attention_fn,
                              dropout_rng=self.attention_rng(deterministic),
                              dropout_rate=self.dropout_rate)
    h_BxLxD = nn.silu(hx_BxLxD + dense(width, "out")(gamma_BxLxV * o_BxLxV))
    return h_BxLxD, phi_BxLxD

  def residual(self, x_BxLxD, y_BxLxD, mask_BxL, *, dropout, deterministic: bool):
    """x + u * (dropout(h) - x), h and u from y (the block's norm(x), or x post-norm): the
    paper's eq. 15, in place of Mixer's x + dropout(f(y))."""
    h_BxLxD, u_BxLxD = self.candidate_and_gate(y_BxLxD, mask_BxL, deterministic=deterministic)
    return x_BxLxD + u_BxLxD * (dropout(h_BxLxD) - x_BxLxD)

  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    """phi * (H^ - x): the sub-layer's update with its own input as the residual."""
    h_BxLxD, phi_BxLxD = self.candidate_and_gate(x_BxLxD, mask_BxL, deterministic=deterministic)
    return phi_BxLxD * (h_BxLxD - x_BxLxD)
