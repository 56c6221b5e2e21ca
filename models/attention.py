"""Full softmax multi-head attention: the Transformer's token mixer."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import registry

# Added to the logits of masked keys. Finite, so a row whose keys are all masked gives a
# uniform (harmless) distribution instead of NaN.
MASK_VALUE = -1e9


class QKVProjection(nn.Module):
  """Projects BxLxD inputs to per-head queries, keys and values BxLxHxK (no bias)."""
  num_heads: int
  qkv_dim: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxD):
    if self.qkv_dim % self.num_heads:
      raise ValueError(f"qkv_dim {self.qkv_dim} is not divisible by num_heads {self.num_heads}")
    head_dim = self.qkv_dim // self.num_heads
    dense = lambda name: nn.DenseGeneral(
        (self.num_heads, head_dim), use_bias=False, dtype=self.dtype,
        kernel_init=nn.initializers.xavier_uniform(), name=name)
    return dense("query")(x_BxLxD), dense("key")(x_BxLxD), dense("value")(x_BxLxD)


class OutputProjection(nn.Module):
  """Merges heads BxLxHxK back to BxLxD."""
  out_dim: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, y_BxLxHxK):
    return nn.DenseGeneral(self.out_dim, axis=(-2, -1), dtype=self.dtype,
                           kernel_init=nn.initializers.xavier_uniform(),
                           name="out")(y_BxLxHxK)


def dropout_weights(rng, weights, rate: float):
  """Inverted dropout on attention weights (shared by every softmax mixer)."""
  keep = jax.random.bernoulli(rng, 1.0 - rate, weights.shape)
  return jnp.where(keep, weights / (1.0 - rate), 0.0)


def softmax_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, key_mask_BxM, *,
                      dropout_rng=None, dropout_rate: float = 0.0):
  """Scaled dot-product attention; logits and softmax in float32, padded keys get 0."""
  scale = q_BxLxHxK.shape[-1] ** -0.5
  logits_BxHxLxM = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK * scale, k_BxMxHxK,
                              preferred_element_type=jnp.float32)
  logits_BxHxLxM = jnp.where(key_mask_BxM[:, None, None, :], logits_BxHxLxM, MASK_VALUE)
  weights_BxHxLxM = jax.nn.softmax(logits_BxHxLxM, axis=-1)
  if dropout_rng is not None and dropout_rate > 0.0:
    weights_BxHxLxM = dropout_weights(dropout_rng, weights_BxHxLxM, dropout_rate)
  weights_BxHxLxM = weights_BxHxLxM.astype(v_BxMxHxK.dtype)
  return jnp.einsum("bhlm,bmhk->blhk", weights_BxHxLxM, v_BxMxHxK)


@registry.register("transformer")
class FullAttention(nn.Module):
  """Vaswani et al. 2017: every token attends to every non-padded token."""
  num_heads: int
  qkv_dim: int
  dropout_rate: float = 0.0  # attention-weight dropout
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype)(x_BxLxD)
    rng = None if deterministic or self.dropout_rate == 0.0 else self.make_rng("dropout")
    y_BxLxHxK = softmax_attention(q, k, v, mask_BxL, dropout_rng=rng,
                                  dropout_rate=self.dropout_rate)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
