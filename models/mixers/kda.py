"""KDA, Kimi Delta Attention (Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention
Architecture"): Gated DeltaNet's delta rule with a decay per key channel instead of per head,
as a token mixer.

The recurrence, per head, with S the K x V state and a_t in (0, 1)^K a decay per key channel:
    S_t = (I - beta_t k_t k_t^T) diag(a_t) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t
the state decayed channel by channel first (as GLA's), then one delta-rule step (fla's
naive_recurrent_kda: S <- diag(a) S, then S <- S + beta k (v - S^T k)^T). It is the core's
diagonal-plus-rank-one kind (models/ops/dplr.py, recurrence(dplr=(e, f))):
    (I - beta k k^T) diag(a) = diag(a) + e f^T,  e = -beta k,  f = a * k  (f reads the
    undecayed S_{t-1}: f^T S_{t-1} = k^T diag(a) S_{t-1}), the write key beta k, the value v.

The layer is flash-linear-attention's KimiDeltaAttention (fla/layers/kda.py, the authors'
code, Moonshot's kernels) at its defaults (expand_v 1, use_short_conv, no lower bound on the
gate), with D the input width, H = num_heads (the encoder's), K = D / H, V = expand_v K:
    q, k, v = SiLU(conv(q_proj(x))), SiLU(conv(k_proj(x))), SiLU(conv(v_proj(x)))
                                 D -> H K, H K, H V, no bias; depthwise causal convs, kernel
                                 `conv_kernel`, no bias
    q, k    = l2-normalised per head (eps 1e-6, fla's use_qk_l2norm_in_kernel), q K^-1/2
    beta    = sigmoid(b_proj(x))                        D -> H, no bias (x 2 with
                                                        allow_neg_eigval)
    log a   = -exp(A_log) softplus(f_b(f_a(x)) + dt_bias)   f_a D -> V, f_b V -> H K, no
                                                        biases (fla's f_proj, a low-rank
                                                        Sequential; its gate, fla/ops/kda/
                                                        gate.py naive_kda_gate); A_log per
                                                        head, dt_bias per head and channel
    o       = the recurrence above
    out     = o_proj(RMSNorm(o) * sigmoid(g_b(g_a(x))))   g_a D -> V no bias, g_b V -> H V
                                                        with a bias (fla's g_proj); RMS norm
                                                        over each head's V channels (one
                                                        weight of V, eps 1e-5)
o_proj: H V -> D, no bias. The convs, norms, beta and output are Gated DeltaNet's (their base
class, DeltaRuleMixer: models/blocks/delta_rule.py); the decay, its parameters and the gate's
projection and sigmoid are KDA's.

Initialisation (the layer's): A uniform in [1, 16] per head, A_log = log A; dt log-uniform
in [0.001, 0.1] (floored at 1e-4) per head and channel, dt_bias = softplus^-1(dt);
projections (and g_b's bias) and convs PyTorch's defaults, norm weight 1. fla's language
models redraw linear and conv weights from N(0, 0.02) and zero the biases: not taken, as for
Gated DeltaNet.

Deviations: the heads come from the encoder's num_heads with K = D / H, not fla's head_dim
(128, with 16 heads); expand_v an integer; grouped value heads (num_v_heads), conv bias and the
bounded gate (fla's safe_gate / lower_bound: lower_bound sigmoid(exp(A_log)(x + dt_bias)),
off by default) are not built. `use_gate` False (ours: fla's layer always gates) drops the
output gate.

Bidirectional (setting): the core's two passes with the same q, k, v, beta and decays (the
short convolutions stay causal), averaged before the norm (models/blocks/recurrent.py). fla
is causal only.

Optimiser: A_log and dt_bias are OPTIMIZER_GROUP (no weight decay, config.ssm_learning_rate),
as fla marks them _no_weight_decay. Padding: a padded position neither decays, writes nor
reads the state (the core's). No attention weights and no dropout inside.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.blocks.delta_rule import A_MAX, DT_RANGE, DeltaRuleMixer
from lra.models.blocks.init import dt_bias_init, symmetric_uniform, torch_default
from lra.models.registry import register

A_MIN = 1.0  # A uniform in [A_MIN, A_MAX] per head (fla's KDA layer; Gated DeltaNet's from 0)


def init_A_log(key, shape, dtype=jnp.float32):
  """log A, A uniform in [1, 16]."""
  return jnp.log(jax.random.uniform(key, shape, dtype, A_MIN, A_MAX))


@register("kda")
class KDA(DeltaRuleMixer):
  """Kimi Delta Attention: the delta rule after a decay per key channel,
  -exp(A_log) softplus(f_proj(x) + dt_bias), on the core's diagonal-plus-rank-one kind; the
  norm gated by sigmoid(g_proj(x)) (see the module docstring)."""
  use_gate: bool = s.setting(True, s.Bool(), "gate the output norm by sigmoid(g_proj(x)) "
                             "(fla's layer always does; False is ours)")
  expand_v: int = s.setting(1, s.Int(1), "V = expand_v x K value channels per head "
                            "(fla's expand_v)")

  # Trained with config.ssm_learning_rate and no weight decay (fla's _no_weight_decay).
  OPTIMIZER_GROUP = ("A_log", "dt_bias")
  GATE = "sigmoid"  # fla's FusedRMSNormGated(activation="sigmoid")

  @property
  def value_expand(self) -> int:
    return self.expand_v

  def low_rank(self, h_BxLxD, rank: int, features: int, name: str, bias: bool = False):
    """fla's Sequential(Linear(D, V, bias=False), Linear(V, features, bias)): name_a, name_b,
    PyTorch's initialisation."""
    y = self.dense(rank, f"{name}_a")(h_BxLxD)
    return nn.Dense(features, use_bias=bias, dtype=self.dtype, kernel_init=torch_default,
                    bias_init=symmetric_uniform(rank ** -0.5), name=f"{name}_b")(y)

  def log_decay(self, h_BxLxD):
    """log a_BxLxHxK = -exp(A_log_h) softplus(f_proj(x) + dt_bias), float32."""
    heads, key, value = self.head_sizes(h_BxLxD.shape[-1])
    A_log_H = self.param("A_log", init_A_log, (heads,))
    dt_bias_F = self.param("dt_bias", dt_bias_init(*DT_RANGE), (heads * key,))
    f_BxLxF = self.low_rank(h_BxLxD, value, heads * key, "f_proj").astype(jnp.float32)
    g = jax.nn.softplus(f_BxLxF + dt_bias_F[None, None])
    g = g.reshape(h_BxLxD.shape[:2] + (heads, key))  # fla's '(h d)'
    return -jnp.exp(A_log_H)[None, None, :, None] * g

  def gate(self, h_BxLxD, shape):
    """g_proj(x): g_b(g_a(x)), D -> V -> H V, g_b with a bias, float32 of `shape`."""
    g = self.low_rank(h_BxLxD, shape[3], shape[2] * shape[3], "g_proj", bias=True)
    return g.astype(jnp.float32).reshape(shape)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    _, key, value = self.head_sizes(width)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxV = self.heads_qkv(h_BxLxD, mask_BxL, key, value)
    beta_BxLxH = self.beta(h_BxLxD)
    log_a_BxLxHxK = self.log_decay(h_BxLxD)
    # (I - beta k k^T) diag(a) = diag(a) + e f^T: e = -beta k, f = a k; written beta k v^T.
    write_BxLxHxK = beta_BxLxH[..., None] * k_BxLxHxK
    dplr = (-write_BxLxHxK, jnp.exp(log_a_BxLxHxK) * k_BxLxHxK)
    o_BxLxHxV = self.run(q_BxLxHxK, write_BxLxHxK, v_BxLxHxV, mask_BxL,
                         log_decay=log_a_BxLxHxK, dplr=dplr)
    return self.output(o_BxLxHxV, h_BxLxD, width)
