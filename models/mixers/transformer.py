"""Full softmax multi-head attention: the Transformer's token mixer."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.ops.chunked_attention import chunked_attention
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, softmax_attention
from lra.models.registry import register

IMPLEMENTATIONS = ("dense", "chunked", "cudnn", "auto")


def resolve_implementation(implementation: str, *, backend: str, dtype: str,
                           dropout_rate: float, head_dim: int) -> str:
  """The implementation FullAttention runs: "auto" becomes "cudnn" where cuDNN's fused kernel
  applies (GPU, 16-bit compute, no attention dropout, head dim a multiple of 8 up to 128), else
  "chunked"; "cudnn" where it does not apply is an error naming the reason."""
  problems = []
  if backend != "gpu":
    problems.append(f"a GPU (this run's backend is {backend!r})")
  if dtype not in ("bfloat16", "float16"):
    problems.append(f"dtype bfloat16 or float16 (got {dtype!r})")
  if dropout_rate > 0.0:
    problems.append(f"no attention-weight dropout (got attention_dropout_rate={dropout_rate})")
  if head_dim % 8 or head_dim > 128:
    problems.append(f"a head dim (qkv_dim / num_heads) that is a multiple of 8 up to 128 "
                    f"(got {head_dim})")
  if implementation == "auto":
    return "chunked" if problems else "cudnn"
  if implementation == "cudnn" and problems:
    s.fail(s.attention_key("implementation"), implementation,
           "'cudnn' needs " + "; ".join(problems) +
           ". Use implementation 'chunked' (exact, O(N) memory) or 'auto'")
  return implementation


def cudnn_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, key_mask_BxM, *, fallback,
                    implementation: str = "cudnn", causal: bool = False):
  """softmax_attention through cuDNN's fused kernel (jax.nn.dot_product_attention).

  The kernel takes padding as per-example key counts (a boolean mask would become an L x L
  bias, with its gradient). Counts describe trailing padding, as in every LRA task; a batch
  with a hole in its mask, or an example without a real key, runs `fallback()` instead (an
  exact implementation), so the result never depends on the padding being trailing.
  `implementation` is for the tests: "xla" is the same call on any backend.
  """
  lengths_B = jnp.sum(key_mask_BxM, axis=1, dtype=jnp.int32)
  positions_M = jnp.arange(key_mask_BxM.shape[1])
  trailing = jnp.all(key_mask_BxM == (positions_M[None, :] < lengths_B[:, None]))
  fused = lambda: jax.nn.dot_product_attention(
      q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, key_value_seq_lengths=lengths_B, is_causal=causal,
      implementation=implementation)
  return jax.lax.cond(trailing & jnp.all(lengths_B > 0), fused, fallback)


@register("transformer")
class FullAttention(HeadsMixer):
  """Vaswani et al. 2017: every token attends to every non-padded token.

  `implementation` picks how the same attention is computed; the parameters are the same in
  all, so a checkpoint trained with one runs with any other:
    "dense": the LxL logits at once (softmax_attention).
    "chunked": exact, memory O(L) (Rabe and Staats 2021; models/ops/chunked_attention.py), chunks
      of query_chunk queries by key_chunk keys. Attention dropout draws its mask per chunk,
      so with dropout it is the same distribution but not the same mask as "dense".
    "cudnn": cuDNN's fused kernel through jax.nn.dot_product_attention: GPU only, bfloat16 or
      float16 compute, no attention dropout; padding other than trailing runs "chunked".
    "auto": "cudnn" where it applies, else "chunked".
  """
  implementation: str = s.setting("dense", s.Choice(IMPLEMENTATIONS),
                                  '"dense", "chunked", "cudnn" or "auto" (see above)')
  # Chunk sizes of "chunked": any length works (it is split into equal chunks of at most this
  # size). The default was the fastest size measured on a CPU (docs/results.md); accelerators
  # may prefer larger chunks.
  query_chunk: int = s.setting(256, s.Int(1), 'queries per chunk of "chunked"')
  key_chunk: int = s.setting(256, s.Int(1), 'keys per chunk of "chunked"')
  # Zoology's MQAR attention is causal (a language model's); LRA's is not. Causal, a CLS token
  # in front sees only itself: pool with MEAN.
  causal: bool = s.setting(False, s.Bool(), "each token attends to itself and earlier tokens "
                           "only (a causal language model's attention)")

  def check_settings(self) -> None:
    super().check_settings()
    # cuDNN's conditions are all known now (backend, dtype, dropout, head size).
    resolve_implementation(self.implementation, backend=jax.default_backend(),
                           dtype=self.dtype, dropout_rate=self.dropout_rate,
                           head_dim=self.head_dim)

  @property
  def SUBQUADRATIC(self) -> bool:  # noqa: N802  (the flag every mixer has)
    return self.implementation == "chunked"

  def causal_reading(self) -> str | None:
    return f"{s.attention_key('causal')}=True" if self.causal else None

  def carried_state(self, width: int, length: int) -> int:
    """The key-value cache, 2 x length x qkv_dim: every key may be read (causal or not)."""
    del width
    return 2 * length * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype, self.rotary)(x_BxLxD)
    implementation = resolve_implementation(
        self.implementation, backend=jax.default_backend(), dtype=self.dtype,
        dropout_rate=self.dropout_rate, head_dim=self.head_dim)
    rng = self.attention_rng(deterministic)
    if implementation == "dense":
      y_BxLxHxK = softmax_attention(q, k, v, mask_BxL, dropout_rng=rng,
                                    dropout_rate=self.dropout_rate, causal=self.causal)
    elif implementation == "chunked":
      y_BxLxHxK = chunked_attention(q, k, v, mask_BxL, query_chunk=self.query_chunk,
                                    key_chunk=self.key_chunk, dropout_rng=rng,
                                    dropout_rate=self.dropout_rate, causal=self.causal)
    else:
      y_BxLxHxK = cudnn_attention(q, k, v, mask_BxL, causal=self.causal,
                                  fallback=lambda: chunked_attention(
                                      q, k, v, mask_BxL, query_chunk=self.query_chunk,
                                      key_chunk=self.key_chunk, causal=self.causal))
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
