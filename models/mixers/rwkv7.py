"""RWKV-7 "Goose" (Peng et al. 2025, "RWKV-7 "Goose" with Expressive Dynamic State
Evolution"): RWKV-7's time mix as a token mixer.

Per head, RWKV-7's state (fla: V x K) is written here in the core's K x V orientation S:
    S_t = (diag(w_t) + e_t f_t^T) S_{t-1} + k_t v_t^T,    o_t = S_t^T r_t
with e_t = kk_t * a_t and f_t = -kk_t: fla's S_t = S_{t-1} (diag(w_t) + alpha_t beta_t^T)
+ v_t k_t^T with alpha = -kk, beta = kk * a (its chunk_rwkv7(a=-kk, b=kk*a)), transposed. The
rank-one part reads the undecayed S_{t-1}: the core's diagonal-plus-rank-one kind
(models/ops/dplr.py through recurrence(dplr=(e, f))), with a decay per key channel.

The layer is flash-linear-attention's RWKV7Attention (fla/layers/rwkv7.py; it warns that RWKV's
author advises cross-checking it with BlinkDL/RWKV-LM, which was not done here), D the input
width, H = num_heads (the encoder's), K = V = D / H per head:
    x'    = the previous real position's input (models/blocks/token_shift.py), d = x' - x
    x_c   = x + d * mu_c                     c in r, w, k, v, a, g; mu_c = x_r ... x_g, D each
    r, k, v = r_proj(x_r), k_proj(x_k), v_proj(x_v)     D -> D each, no bias
    log w = -exp(-1/2) sigmoid(w_lora(x_w))  w_lora: D -> R_w (no bias), tanh, -> D (bias);
                                             w in (exp(-0.6065), 1) per key channel
    a     = sigmoid(a_lora(x_a))             the in-context learning rate, D -> R_a -> D (bias)
    g     = g_lora(x_g)                      the output gate, D -> R_g, sigmoid, -> D, no biases
    kk    = l2-normalised (k * k_k) per head (F.normalize: over max(|.|, 1e-12))
    k     = k (1 + (a - 1) k_a)              fla's k.addcmul(k * (a - 1), k_a)
    o     = the recurrence above, r unscaled (fla's scale=1)
    o     = GroupNorm(o) + (sum_K r k r_k) v  GroupNorm over each head's V channels (eps K 1e-5,
                                             a weight and a bias per channel); the bonus u:
                                             r_k (H x K) weighs the current token's own r.k
    out   = o_proj(o * g)                    D -> D, no bias
LoRA ranks (0: fla's layer formula from D and K, head factor K / 64): R_w = R_a =
max(32, round(2.5 sqrt(D) K / 64 / 32) 32), R_g = max(32, round(5 sqrt(D) / 32) 32).

The CHANNEL MIX (RWKV-7's token-shifted squared-ReLU feed-forward) is not this mixer: the
encoder's MLP sub-layer stands in its place.

Initialisation: fla's layer (RWKV7Attention._initialize_weights; fla's model's _init_weights
skips the modules the layer marks initialised), at layer l of N
(r0 = l / (N - 1), 0 for one layer; r1 = 1 - l / N; n the channel): mu_c = 1 - (n / D)^(p_c
r1), p = 0.2, 0.9, 0.7, 0.7, 0.9, 0.2 for r, w, k, v, a, g; k_k = 0.71 - 0.1 lin, k_a = 1.02,
r_k = -0.04; w_lora's bias -6 + 6 (n / (D - 1))^(1 + r0^0.3) + 0.5 + 2.5 zig, a_lora's -0.19
+ 0.3 zig + 0.4 lin (lin = n / (D - 1) - 1/2; zig the position in the head, -1..1, times its
absolute value; 0 for K = 1); the GroupNorm weight ((l + 1) / N)^0.7, bias 0; r_proj, v_proj
orthogonal, k_proj orthogonal x 0.1; each LoRA's down projection 0 and up projection
orthogonal x 0.1 (x sqrt(R / D) where R > D); o_proj 0. So the layer outputs 0 at init and
only o_proj gets a gradient on the first step (`zero_init` False: o_proj and the LoRAs' down
projections drawn as PyTorch's nn.Linear default instead).

Differences by design: the value residual is not built. fla's layers after the first mix v
with layer 0's v ("v_first", v = lerp(v, v_first, sigmoid(v_lora(x_v)))), an activation
carried from layer to layer, which the encoder's mixer interface (one layer's input and mask)
does not carry: every layer here is fla's layer 0 (v = v_proj(x_v), no v_lora). Heads from the
encoder's num_heads with K = V = D / H (fla: head_dim 64 and value_dim = D). fla's model
config (not the layer) passes LoRA ranks 64, 128, 64, 16 fitted to D = 2048; the layer's
formula (fla's default when none is given, scaled to D) is taken. Padding: fla zeroes the
inputs and v (left padding); here a padded position neither decays nor writes the state and the
shift skips it, so real outputs equal those of the sequence without its padding (fla's left
padding gives the same). A padded position's output is not 0 (the norm's bias through the
gate, as fla's).

Bidirectional (setting): the core's two passes over the same r, k, v, w, kk, a (the token
shift stays the previous token's in both, as the family's short convolutions stay causal),
averaged before the GroupNorm (models/blocks/recurrent.py); the bonus term is added once.
RWKV-7 is causal only.

State: S (K x V) per head and direction, H K V = D^2 / H: Zoology's corrected count (its
zoology/mixers/rwkv7.py state_size, num_heads head_dim head_dim; its first count, num_heads
D^2, overstated it H^2 times). The shift's one previous input is not counted (as the
family's short convolutions). No attention weights and no dropout inside.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import torch_default
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.blocks.token_shift import shift_difference
from lra.models.registry import register

LOG_DECAY_SCALE = -0.6065306597126334  # -exp(-1/2): fla's w = this * sigmoid(w_lora(x_w))
NORM_EPS = 1e-5  # fla's norm_eps; the GroupNorm's eps is head_dim times it
L2_FLOOR = 1e-12  # F.normalize's eps: x / max(|x|, eps)
BRANCHES = ("r", "w", "k", "v", "a", "g")
MIX_POWERS = dict(r=0.2, w=0.9, k=0.7, v=0.7, a=0.9, g=0.2)  # mu_c = 1 - (n / D)^(p_c r1)


def lora_ranks(width: int, key: int) -> dict[str, int]:
  """fla's RWKV7Attention ranks when none is given: {"w", "a", "g"} for D = `width`, K = `key`
  (Python's round, as fla's)."""
  factor = key / 64
  scaled = lambda c, f: max(32, int(round(c * width ** 0.5 * f / 32) * 32))
  return dict(w=scaled(2.5, factor), a=scaled(2.5, factor), g=scaled(5.0, 1.0))


def time_mix_init(width: int, key: int, layer: int, layers: int) -> dict[str, np.ndarray]:
  """fla's per-channel initial values (module docstring) at layer `layer` of `layers`:
  mu_c (as "x_c"), k_k, the w and a LoRAs' biases, the GroupNorm weight; float32."""
  ratio_0_to_1 = layer / (layers - 1) if layers > 1 else 0.0
  ratio_1_to_0 = 1.0 - layer / layers
  n = np.arange(width, dtype=np.float64)
  linear = n / max(width - 1, 1) - 0.5
  half = (key - 1) / 2
  zigzag = ((n % key) - half) / half if key > 1 else np.zeros(width)
  zigzag = zigzag * np.abs(zigzag)
  decay = -6 + 6 * (n / max(width - 1, 1)) ** (1 + ratio_0_to_1 ** 0.3)
  table = {f"x_{c}": 1.0 - (n / width) ** (p * ratio_1_to_0) for c, p in MIX_POWERS.items()}
  table.update(k_k=0.71 - 0.1 * linear, w_bias=decay + 0.5 + 2.5 * zigzag,
               a_bias=-0.19 + 0.3 * zigzag + 0.4 * linear,
               norm=np.full(width, ((layer + 1) / layers) ** 0.7))
  return {name: value.astype(np.float32) for name, value in table.items()}


def constant(value):
  """Initialiser: a fixed array (its shape the parameter's)."""
  return lambda key, shape, dtype=jnp.float32: jnp.broadcast_to(jnp.asarray(value, dtype), shape)


class LoRA(nn.Module):
  """fla's LoRA: up(act(down(x))), down D -> rank without bias, up rank -> features; down 0
  (zero_init) or PyTorch's default, up orthogonal x 0.1 (x sqrt(rank / features) where rank >
  features), bias `bias` (None: no bias)."""
  rank: int
  features: int
  activation: str | None
  bias: np.ndarray | None
  zero_init: bool
  dtype: str

  @nn.compact
  def __call__(self, x):
    down = nn.Dense(self.rank, use_bias=False, dtype=self.dtype, name="down",
                    kernel_init=nn.initializers.zeros if self.zero_init else torch_default)
    h = down(x)
    if self.activation is not None:
      h = getattr(jax.nn, self.activation)(h)
    gain = 0.1 * (math.sqrt(self.rank / self.features) if self.rank > self.features else 1.0)
    use_bias = self.bias is not None
    up = nn.Dense(self.features, use_bias=use_bias, dtype=self.dtype, name="up",
                  kernel_init=nn.initializers.orthogonal(gain),
                  bias_init=constant(self.bias) if use_bias else nn.initializers.zeros)
    return up(h).astype(jnp.float32)


def group_norm(o_BxLxHxV, weight_HV, bias_HV, eps: float):
  """nn.GroupNorm with one group per head: each head's V channels over their mean and
  (biased) variance, then a weight and bias per channel; float32."""
  mean = jnp.mean(o_BxLxHxV, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(o_BxLxHxV - mean), axis=-1, keepdims=True)
  y = (o_BxLxHxV - mean) * jax.lax.rsqrt(var + eps)
  shape = (1, 1) + o_BxLxHxV.shape[2:]
  return y * weight_HV.reshape(shape) + bias_HV.reshape(shape)


def unit(x_BxLxHxK):
  """F.normalize over K: x / max(|x|, 1e-12) (the floor inside the root: no NaN gradient at
  x = 0, a padded position's)."""
  squared = jnp.sum(x_BxLxHxK * x_BxLxHxK, axis=-1, keepdims=True)
  return x_BxLxHxK * jax.lax.rsqrt(jnp.maximum(squared, L2_FLOOR ** 2))


def lead(a, ndim: int):
  """a with leading unit axes up to `ndim` (explicit broadcasting: rank promotion raises)."""
  return a.reshape((1,) * (ndim - a.ndim) + a.shape)


@register("rwkv7")
class RWKV7(RecurrentMixer):
  """RWKV-7's time mix: token shift, r/k/v projections, the decay, in-context learning rate and
  gate LoRAs, the diagonal-plus-rank-one recurrence, GroupNorm, bonus, gate and o_proj (see the
  module docstring)."""
  # Chunks of 32, as the delta rule's: 1.10x the steps/s of 64 at 4K (docs/results.md).
  chunk_size: int = s.setting(32, s.Int(1), "positions per chunk of the chunked form")
  decay_low_rank_dim: int = s.setting(0, s.Int(0), "R_w, the decay LoRA's rank (0: fla's "
                                      "layer formula from the width)")
  a_low_rank_dim: int = s.setting(0, s.Int(0), "R_a, the in-context learning rate LoRA's rank "
                                  "(0: fla's layer formula)")
  gate_low_rank_dim: int = s.setting(0, s.Int(0), "R_g, the output gate LoRA's rank (0: fla's "
                                     "layer formula)")
  zero_init: bool = s.setting(True, s.Bool(), "o_proj and the LoRAs' down projections start at "
                              "0 (the authors' init: the layer outputs 0 at init); False: "
                              "PyTorch's nn.Linear default")
  layer_index: int = 0  # the encoder's: this block's depth (the init's ratios)
  num_layers: int = 1  # the encoder's depth

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V) = (num_heads, D / H, D / H), or a one-line SettingError."""
    if width % self.num_heads:
      s.fail(s.model_key("num_heads"), self.num_heads,
             f"a divisor of the model width {width} (RWKV7: K = V = width / heads)")
    key = width // self.num_heads
    return self.num_heads, key, key

  def ranks(self, width: int, key: int) -> dict[str, int]:
    """The LoRA ranks: each setting, or fla's formula where it is 0."""
    formula = lora_ranks(width, key)
    given = dict(w=self.decay_low_rank_dim, a=self.a_low_rank_dim, g=self.gate_low_rank_dim)
    return {c: given[c] or formula[c] for c in given}

  def lora(self, name: str, rank: int, width: int, activation, bias):
    return LoRA(rank, width, activation, bias, self.zero_init, self.dtype, name=f"{name}_lora")

  def dense(self, width: int, name: str, init):
    return nn.Dense(width, use_bias=False, dtype=self.dtype, kernel_init=init, name=name)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    batch, length, width = x_BxLxD.shape
    heads, key, _ = self.head_sizes(width)
    layers = max(self.num_layers, self.layer_index + 1)  # built alone: the last of them
    init = time_mix_init(width, key, self.layer_index, layers)
    rank = self.ranks(width, key)
    h_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    d_BxLxD = shift_difference(h_BxLxD, mask_BxL)
    x = {c: h_BxLxD + d_BxLxD * lead(self.param(f"x_{c}", constant(init[f"x_{c}"]), (width,)), 3)
         for c in BRANCHES}
    split = lambda a: a.astype(jnp.float32).reshape(a.shape[:2] + (heads, key))
    orthogonal = nn.initializers.orthogonal
    r = split(self.dense(width, "r_proj", orthogonal())(x["r"]))
    k = split(self.dense(width, "k_proj", orthogonal(0.1))(x["k"]))
    v = split(self.dense(width, "v_proj", orthogonal())(x["v"]))
    log_w = split(LOG_DECAY_SCALE * jax.nn.sigmoid(
        self.lora("w", rank["w"], width, "tanh", init["w_bias"])(x["w"])))
    a = split(jax.nn.sigmoid(self.lora("a", rank["a"], width, None, init["a_bias"])(x["a"])))
    g = split(self.lora("g", rank["g"], width, "sigmoid", None)(x["g"]))
    param = lambda name, value, shape: split(lead(self.param(name, constant(value), shape), 3))
    kk = unit(k * param("k_k", init["k_k"], (width,)))
    k = k * (1.0 + (a - 1.0) * param("k_a", 1.02, (width,)))
    o = self.run(r, k, v, mask_BxL, log_decay=log_w, dplr=(kk * a, -kk))
    o = group_norm(o, self.param("g_norm_weight", constant(init["norm"]), (width,)),
                   self.param("g_norm_bias", nn.initializers.zeros, (width,)), key * NORM_EPS)
    r_k = lead(self.param("r_k", constant(-0.04), (heads, key)), 4)
    o = o + jnp.sum(r * k * r_k, axis=-1, keepdims=True) * v
    out_init = nn.initializers.zeros if self.zero_init else torch_default
    y = (o * g).reshape(batch, length, width).astype(self.dtype)
    return self.dense(width, "o_proj", out_init)(y)
