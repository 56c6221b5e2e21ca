"""What DeltaNet, Gated DeltaNet, DeltaProduct, KDA and Comba share (fla's DeltaNet,
GatedDeltaNet, GatedDeltaProduct, KimiDeltaAttention and Comba layers): the heads' q, k, v
(projection, short causal convolution + SiLU, l2 norm of q and k, q scaled; DeltaProduct's
several keys and values per position; Comba's corrections act on the convolutions' outputs
before the norms), the writing strength beta, the data-dependent decay (Gated DeltaNet's,
DeltaProduct's forget gate, Comba's), and the output (RMS norm, optionally gated by
act(g_proj(x)), SiLU or KDA's and Comba's sigmoid, then o_proj), as their base class. The
recurrence is the core's delta form, or its diagonal-plus-rank-one form (KDA, Comba)
(models/ops/matrix_recurrence.py)."""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.init import dt_bias_init, torch_default
from lra.models.blocks.norms import gated_output
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.blocks.short_conv import ShortConv

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(sum x^2 + eps)
GATES = {"silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}  # FusedRMSNormGated's activations
A_MAX = 16.0  # A uniform in (0, A_MAX) per head (fla's layers)
DT_RANGE = (0.001, 0.1)  # dt log-uniform in it at init (fla's layers: "hard coded for now")


def init_A_log(key, shape, dtype=jnp.float32):
  """log A, A uniform in (0, A_MAX]: A_MAX (1 - u), u in [0, 1), is never 0."""
  return jnp.log(A_MAX * (1.0 - jax.random.uniform(key, shape, dtype)))


def l2_normalise(x_BxLxHxK):
  """Each head's vector over its norm, in float32 (fla's l2norm, eps inside the root)."""
  x = x_BxLxHxK.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


class DeltaRuleMixer(RecurrentMixer):
  """The base of DeltaNet, Gated DeltaNet, DeltaProduct, KDA and Comba: H = num_heads heads of
  K = D / H key channels and V = value_expand x K value channels (a subclass with V != K
  overrides `value_expand`)."""
  # Chunks of 32 (the family's 64 elsewhere): the delta rule's train steps at 4K ran
  # 1.01-1.19x faster than at 64 in 9 comparisons of 10 on the AMD EPYC VM, and the
  # diagonal-plus-rank-one op (KDA, Comba) 1.14x (vector decay) and 1.38x (scalar): docs/results.md.
  chunk_size: int = s.setting(32, s.Int(1), "positions per chunk of the chunked form")
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

  # The output gate's activation (fla's FusedRMSNormGated: "silu", KDA's and Comba's
  # "sigmoid").
  GATE = "silu"

  def branch(self, h_BxLxD, mask_BxL, name: str, per_head: int,
             copies: tuple[int, ...] = ()):
    """SiLU(conv(name_proj(x))) split into heads: B x L x copies x H x per_head, float32."""
    heads = self.num_heads
    y = self.dense(math.prod(copies) * heads * per_head, f"{name}_proj")(h_BxLxD)
    y = ShortConv(self.conv_kernel, activation=True, name=f"{name}_conv1d")(y, mask_BxL)
    return y.reshape(y.shape[:2] + copies + (heads, per_head))  # fla's '(h d)': head-major

  def heads_qkv(self, h_BxLxD, mask_BxL, key: int, value: int, steps: int | None = None):
    """q (l2-normalised, scaled K^-1/2), k (l2-normalised): B x L x H x K; v: B x L x H x V;
    float32. With `steps` (DeltaProduct's keys and values per position) k and v are
    B x L x steps x H x K|V, from one projection and one conv each (fla's '(n h d)' order)."""
    copies = () if steps is None else (steps,)
    q_BxLxHxK = l2_normalise(self.branch(h_BxLxD, mask_BxL, "q", key)) * key ** -0.5
    return (q_BxLxHxK, l2_normalise(self.branch(h_BxLxD, mask_BxL, "k", key, copies)),
            self.branch(h_BxLxD, mask_BxL, "v", value, copies))

  def beta(self, h_BxLxD, steps: int | None = None):
    """beta_BxLxH = sigmoid(b_proj(x)) (x 2 with allow_neg_eigval), float32; with `steps`,
    B x L x steps x H (fla's '(n h)' order)."""
    copies = () if steps is None else (steps,)
    b = self.dense(math.prod(copies) * self.num_heads, "b_proj")(h_BxLxD).astype(jnp.float32)
    b = jax.nn.sigmoid(b.reshape(b.shape[:2] + copies + (self.num_heads,)))
    return 2.0 * b if self.allow_neg_eigval else b

  def log_decay(self, h_BxLxD):
    """log alpha_BxLxH = -exp(A_log) softplus(a_proj(x) + dt_bias), float32 (Gated DeltaNet's
    decay, DeltaProduct's forget gate: Mamba-2's dt and A)."""
    heads = self.num_heads
    A_log_H = self.param("A_log", init_A_log, (heads,))
    dt_bias_H = self.param("dt_bias", dt_bias_init(*DT_RANGE), (heads,))
    a_BxLxH = self.dense(heads, "a_proj")(h_BxLxD).astype(jnp.float32)
    return -jnp.exp(A_log_H)[None, None] * jax.nn.softplus(a_BxLxH + dt_bias_H[None, None])

  def gate(self, h_BxLxD, shape):
    """The output gate's input, g_proj(x): D -> H V, no bias, float32 of `shape`
    (B x L x H x V)."""
    g_BxLxF = self.dense(shape[2] * shape[3], "g_proj")(h_BxLxD)
    return g_BxLxF.astype(jnp.float32).reshape(shape)

  def output(self, o_BxLxHxV, h_BxLxD, width: int):
    """o_proj(RMSNorm(o)), or o_proj(RMSNorm(o) * act(gate(x))) with use_gate (act: GATE);
    o_proj a Dense over the merged heads (H V -> D), PyTorch's initialisation."""
    gate_BxLxHxV = self.gate(h_BxLxD, o_BxLxHxV.shape) if self.use_gate else None
    return gated_output(o_BxLxHxV, gate_BxLxHxV, self.dense(width, "o_proj"), norm="o_norm",
                        dtype=self.dtype, flat=True, activation=GATES[self.GATE])
