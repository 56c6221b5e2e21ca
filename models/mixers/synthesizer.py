"""Synthesizer (Tay et al. 2021): attention weights synthesised instead of (only) q.k dot products.

Modes, per head (N = the length the mixer was initialised with, the model's max length):
  dense:             B_i = W2 relu(W1 x_i + b1) + b2, one MLP per head from token i to N logits.
  random:            a learned N x N logits matrix R, the same for every input.
  factorized_dense:  two MLPs give A_i (a values) and B_i (b values), a * b >= N; the logits are
                     tile(A_i) * repeat(B_i), i.e. the flattened outer product A_i B_i^T, cut to N.
  factorized_random: R = R1 R2^T with R1, R2 of shape N x factor_rank.
With `mix_dot_product` (LRA's "random, mixed with dot product") the logits are
alpha * synthetic + (1 - alpha) * q.k / sqrt(d), where (alpha, 1 - alpha) is a softmax over two
learned scalars per head (`mix_logits`, initialised equal: alpha = 0.5).

Every mode is quadratic by design: it materialises H x L x L logits (and the random modes hold
an N x N matrix per head), so it is no faster than full attention. Shorter inputs use the
leading L x L block (the first L outputs of the MLPs); inputs longer than N are an error.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, masked_softmax
from lra.models.registry import register

MODES = ("dense", "random", "factorized_dense", "factorized_random")


def _fixed_normal(key, num_heads: int, rows: int, cols: int):
  """HxRxC standard normals, entry (h, i, j) drawn from its own folded key.

  Entry-wise keys make the matrix for a shorter input the leading block of the longer one, so a
  fixed matrix needs no storage: it is regenerated on every call. Stored as a parameter it would
  still be shrunk by AdamW's weight decay, which applies to every leaf even with a zero gradient.
  """
  h_HxRxC, i_HxRxC, j_HxRxC = np.meshgrid(np.arange(num_heads), np.arange(rows),
                                          np.arange(cols), indexing="ij")

  def entry(h, i, j):
    k = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, h), i), j)
    return jax.random.normal(k, (), jnp.float32)

  flat = jax.vmap(entry)(jnp.asarray(h_HxRxC.ravel()), jnp.asarray(i_HxRxC.ravel()),
                         jnp.asarray(j_HxRxC.ravel()))
  return flat.reshape(num_heads, rows, cols)


def factor_sizes(length: int) -> tuple[int, int]:
  """(a, b) with a * b >= length and both near sqrt(length); a prime length has no exact split."""
  a = math.isqrt(max(length - 1, 0)) + 1
  return a, -(-length // a)


@register("synthesizer")
class SynthesizerAttention(HeadsMixer):
  """Synthesised (optionally dot-product-mixed) softmax attention; see the module docstring."""
  layer_index: int = 0  # seeds the fixed matrices of trainable_random=False
  mode: str = s.setting("random", s.Choice(MODES),
                        "how the logits are synthesised (LRA: random)")
  mix_dot_product: bool = s.setting(True, s.Bool(),
                                    "LRA mixed random synthetic logits with dot-product ones")
  trainable_random: bool = s.setting(True, s.Bool(),
                                     "False: random matrices fixed (regenerated, never trained)")
  factor_rank: int = s.setting(8, s.Int(1), "factorized_random: R = R1 R2^T with rank factor_rank")

  # Quadratic by design: H x L x L synthetic logits.

  def check_settings(self) -> None:
    super().check_settings()
    if not self.mix_dot_product:
      self.refuse_rotary("its logits are synthetic, with no queries and keys to rotate")

  def _sized_param(self, name, init, shape):
    """A parameter sized at init (the max length); later calls keep the stored shape."""
    if self.has_variable("params", name):
      shape = self.get_variable("params", name).shape
    return self.param(name, init, shape)

  def _mlp(self, x_BxLxD, out: int, name: str):
    """Per-head 2-layer MLP (hidden width head_dim) from each token: BxLxD -> BxHxLxO float32."""
    head_dim = self.qkv_dim // self.num_heads
    hidden_BxLxHxK = nn.relu(nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype,
                                             name=f"{name}_hidden")(x_BxLxD))
    w2_HxKxO = self._sized_param(f"{name}_kernel", nn.initializers.lecun_normal(
        in_axis=1, out_axis=2, batch_axis=(0,)), (self.num_heads, head_dim, out))
    b2_HxO = self._sized_param(f"{name}_bias", nn.initializers.zeros, (self.num_heads, out))
    logits_BxHxLxO = jnp.einsum("blhk,hko->bhlo", hidden_BxLxHxK,
                                w2_HxKxO.astype(hidden_BxLxHxK.dtype),
                                preferred_element_type=jnp.float32)
    return logits_BxHxLxO + b2_HxO[None, :, None, :]

  def _synthetic_logits(self, x_BxLxD):
    """The synthetic logits BxHxLxL (or HxLxL, input independent) in float32."""
    length, heads = x_BxLxD.shape[1], self.num_heads
    fixed_key = jax.random.fold_in(jax.random.PRNGKey(0), self.layer_index)
    if self.mode == "dense":
      logits_BxHxLxN = self._mlp(x_BxLxD, length, "dense")
      self._check_length(length, logits_BxHxLxN.shape[-1])
      return logits_BxHxLxN[..., :length]
    if self.mode == "factorized_dense":
      a, b = factor_sizes(length)
      a_BxHxLxA = self._mlp(x_BxLxD, a, "factor_a")
      b_BxHxLxB = self._mlp(x_BxLxD, b, "factor_b")
      a, b = a_BxHxLxA.shape[-1], b_BxHxLxB.shape[-1]  # the init-time sizes
      self._check_length(length, a * b)
      # Column j pairs A[j % a] with B[j // a]: every (A, B) product once, as a flat outer product.
      column_L = np.arange(length)
      return a_BxHxLxA[..., column_L % a] * b_BxHxLxB[..., column_L // a]
    if self.mode == "random":
      if not self.trainable_random:
        return _fixed_normal(fixed_key, heads, length, length)
      r_HxNxN = self._sized_param("random_logits", nn.initializers.normal(stddev=1.0),
                                  (heads, length, length))
      self._check_length(length, r_HxNxN.shape[-1])
      return r_HxNxN[:, :length, :length]
    # factorized_random: entries of R1 R2^T keep unit variance with factors of std rank^-1/4.
    rank = self.factor_rank
    if self.trainable_random:
      init = nn.initializers.normal(stddev=rank ** -0.25)
      r1_HxNxR = self._sized_param("random_factor1", init, (heads, length, rank))
      r2_HxNxR = self._sized_param("random_factor2", init, (heads, length, rank))
      self._check_length(length, r1_HxNxR.shape[1])
    else:
      r1_HxNxR = _fixed_normal(jax.random.fold_in(fixed_key, 1), heads, length, rank)
      r2_HxNxR = _fixed_normal(jax.random.fold_in(fixed_key, 2), heads, length, rank)
      r1_HxNxR, r2_HxNxR = r1_HxNxR * rank ** -0.25, r2_HxNxR * rank ** -0.25
    return jnp.einsum("hir,hjr->hij", r1_HxNxR[:, :length], r2_HxNxR[:, :length],
                      preferred_element_type=jnp.float32)

  @staticmethod
  def _check_length(length: int, created: int):
    if length > created:
      raise ValueError(f"synthesizer input length {length} exceeds the length {created} its "
                       f"synthetic logits were initialised for (the model's max length)")

  def carried_state(self, width: int, length: int) -> int:
    """The values of every position (synthetic weights reach them all) and, with
    mix_dot_product, the keys: (2 or 1) x length x qkv_dim. The synthetic logits are
    parameters or come from the query alone: not carried."""
    del width
    return (2 if self.mix_dot_product else 1) * length * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    synthetic = self._synthetic_logits(x_BxLxD)
    # Input-independent modes give HxLxL; broadcast over the batch.
    synthetic_BxHxLxL = synthetic if synthetic.ndim == 4 else synthetic[None]
    if self.mix_dot_product:
      q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                      self.dtype, self.rotary)(x_BxLxD)
      # The same scaled product as softmax_attention, so alpha = 0 is full attention.
      scale = q_BxLxHxK.shape[-1] ** -0.5
      dot_BxHxLxL = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK * scale, k_BxLxHxK,
                               preferred_element_type=jnp.float32)
      mix_Hx2 = jax.nn.softmax(self.param("mix_logits", nn.initializers.zeros,
                                          (self.num_heads, 2)), axis=-1)
      alpha_1xHx1x1, beta_1xHx1x1 = (mix_Hx2[None, :, i, None, None] for i in (0, 1))
      logits_BxHxLxL = alpha_1xHx1x1 * synthetic_BxHxLxL + beta_1xHx1x1 * dot_BxHxLxL
    else:
      # No dot product: only values are needed, so no unused query/key parameters.
      v_BxLxHxK = nn.DenseGeneral((self.num_heads, self.qkv_dim // self.num_heads),
                                  use_bias=False, dtype=self.dtype,
                                  kernel_init=nn.initializers.xavier_uniform(),
                                  name="value")(x_BxLxD)
      logits_BxHxLxL = synthetic_BxHxLxL
    weights_BxHxLxL = masked_softmax(logits_BxHxLxL.astype(jnp.float32),
                                     mask_BxL[:, None, None, :].astype(bool),
                                     dropout_rng=self.attention_rng(deterministic),
                                     dropout_rate=self.dropout_rate)
    y_BxLxHxK = jnp.einsum("bhlm,bmhk->blhk", weights_BxHxLxL.astype(v_BxLxHxK.dtype),
                           v_BxLxHxK)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
