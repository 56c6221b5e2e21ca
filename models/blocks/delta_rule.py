"""What DeltaNet and Gated DeltaNet share (fla's DeltaNet and GatedDeltaNet layers): the
heads' q, k, v (projection, short causal convolution + SiLU, l2 norm of q and k, q scaled),
the writing strength beta, and the output (RMS norm, optionally gated by SiLU(g_proj(x)),
then o_proj), as the base class of both. The recurrence is the core's delta form
(models/ops/matrix_recurrence.py)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.init import torch_default
from lra.models.blocks.norms import gated_output
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.blocks.short_conv import ShortConv

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(sum x^2 + eps)


def l2_normalise(x_BxLxHxK):
  """Each head's vector over its norm, in float32 (fla's l2norm, eps inside the root)."""
  x = x_BxLxHxK.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


class DeltaRuleMixer(RecurrentMixer):
  """The base of DeltaNet and Gated DeltaNet: H = num_heads heads of K = D / H key channels
  and V = value_expand x K value channels (a subclass with V != K overrides `value_expand`)."""
  conv_kernel: int = s.setting(4, s.Int(1), "kernel of the depthwise causal convs on q, k, v "
                               "(fla's conv_size)")
  allow_neg_eigval: bool = s.setting(False, s.Bool(), "beta = 2 sigmoid(.): the transition's "
                                     "eigenvalues in (-1, 1) (fla's allow_neg_eigval; Gated "
                                     "DeltaNet's decay stays in (0, 1), as fla's)")
  use_gate: bool = s.setting(False, s.Bool(), "gate the output norm by SiLU(g_proj(x)) "
                             "(fla's use_gate)")

  @property
  def value_expand(self) -> int:
    """V / K."""
    return 1

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V) for a D = `width` input, or a one-line SettingError when D does not split."""
    if width % self.num_heads:
      s.fail(s.model_key("num_heads"), self.num_heads,
             f"a divisor of the model width {width} ({type(self).__name__}: K = width / heads)")
    key = width // self.num_heads
    return self.num_heads, key, self.value_expand * key

  def dense(self, features: int, name: str) -> nn.Module:
    """D -> features, no bias, PyTorch's nn.Linear initialisation (fla's layers)."""
    return nn.Dense(features, use_bias=False, dtype=self.dtype, kernel_init=torch_default,
                    name=name)

  def heads_qkv(self, h_BxLxD, mask_BxL, key: int, value: int):
    """q (l2-normalised, scaled K^-1/2), k (l2-normalised): B x L x H x K; v: B x L x H x V;
    float32."""
    heads = self.num_heads

    def branch(name: str, per_head: int):
      y = self.dense(heads * per_head, f"{name}_proj")(h_BxLxD)
      y = ShortConv(self.conv_kernel, activation=True, name=f"{name}_conv1d")(y, mask_BxL)
      return y.reshape(y.shape[:2] + (heads, per_head))  # fla's '(h d)': head-major

    q_BxLxHxK = l2_normalise(branch("q", key)) * key ** -0.5
    return q_BxLxHxK, l2_normalise(branch("k", key)), branch("v", value)

  def beta(self, h_BxLxD):
    """beta_BxLxH = sigmoid(b_proj(x)) (x 2 with allow_neg_eigval), float32."""
    b = jax.nn.sigmoid(self.dense(self.num_heads, "b_proj")(h_BxLxD).astype(jnp.float32))
    return 2.0 * b if self.allow_neg_eigval else b

  def output(self, o_BxLxHxV, h_BxLxD, width: int):
    """o_proj(RMSNorm(o)), or o_proj(RMSNorm(o) * SiLU(g_proj(x))) with use_gate; o_proj a
    Dense over the merged heads (H V -> D), PyTorch's initialisation."""
    gate_BxLxHxV = None
    if self.use_gate:
      g_BxLxF = self.dense(o_BxLxHxV.shape[2] * o_BxLxHxV.shape[3], "g_proj")(h_BxLxD)
      gate_BxLxHxV = g_BxLxF.astype(jnp.float32).reshape(o_BxLxHxV.shape)
    return gated_output(o_BxLxHxV, gate_BxLxHxV, self.dense(width, "o_proj"), norm="o_norm",
                        dtype=self.dtype, flat=True)
