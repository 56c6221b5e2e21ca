"""Based (Arora et al. 2024, "Simple linear attention language models balance the
recall-throughput tradeoff"): linear attention with the second-order Taylor feature map of
exp(q.k), a small sliding-window softmax attention and gated short convolutions, one kind per
layer.

The authors' layers (HazyResearch/zoology at d88d6f5, read for facts):
  linear  (zoology/mixers/based.py `Based`, feature_maps/taylor.py `TaylorExp`): q, k = x W_q,
          x W_k (D -> H x f, f = `feature_dim`), v = x W_v (D -> H x V), no biases;
          phi(x) = [1, x / f^(1/4), vec(x x^T) / (sqrt(2) sqrt(f))], 1 + f + f^2 features, so
          phi(q).phi(k) = 1 + s + s^2 / 2 with s = q.k / sqrt(f) (exp(s) to second order);
          y_i = phi(q_i).(sum_j phi(k_j) v_j^T) / (phi(q_i).sum_j phi(k_j) + 1e-12), the sums
          over j <= i (causal) or over every j; then W_o (H x V -> D, no bias).
  window  (zoology/mixers/slide_attn.py `SlidingAttn`): softmax attention, logits / sqrt(head
          width), query i over keys i - w .. i (w = `window`); q, k, v and out_proj with biases.
  conv    (zoology/mixers/base_conv.py `BaseConv` with kernel_size 3): y = conv(u) * (u W + b)
          + u, conv a depthwise causal convolution of `conv_kernel` taps with bias.
How a model uses them: Zoology's `Hybrid` mixer gives layer l the kind configs[l % len], and
the Based paper's Figure 2 model (experiments/paper_configs/arxiv24_based_figure2/configs.py,
2 layers) is [conv, linear]: a BaseConv layer, then Taylor linear attention (feature_dim 8,
16 or 24, one head, d_model 48-128); its `based_w_slide` ablation
(arxiv24_based_ablations/02-01_sliding.py) is [conv, linear, window] over 3 layers; the
released language models (HazyResearch/based, configs/experiment/reference/based-360m.yaml)
put linear attention at layers 1, 6, 11, ..., a window of 256 at layers 2, 7, 12, ... and
BaseConv elsewhere (f 16, 16 heads).

Ours: the encoder builds one mixer per layer, so this mixer is the `Hybrid`: `layers` lists
kinds and layer l (the encoder's `layer_index`) is layers[l % len(layers)]. Not linear
attention plus window in one layer: no authors' model sums them. The default
("conv", "linear", "window") is Figure 2's Based at 2 layers (MQAR here), the ablation's at 3,
and all three kinds deeper; ("conv", "linear", "window", "conv", "conv") is the language
models' assignment. A 1-layer model would be BaseConv alone with the default, so the configs
give Based two layers on the one-layer tasks (configs/table.py).

Computation (SUBQUADRATIC): linear attention (models/ops/taylor_attention.py, which says why
it is not the recurrent family's core) non-causal as the sums over all real keys (a
(1 + f + f^2) x V state per head); causal by chunks of `chunk_size`: within a chunk the kernel
1 + s + s^2/2 as a masked C x C product, across chunks the states of the earlier chunks (an
exclusive cumulative sum over chunks, B x N x H x (1 + f + f^2) x V, never one per position as
Zoology's cumsum path holds). The window by blocks of min(w, L) queries, each over its own and
the previous block (non-causal: and the next) under a relative-position band (as
models/mixers/longformer.py). No L x L array.

`causal` (default False, the reading every config here needs, so none sets it): LRA is
non-causal and so is MQAR here (every mixer reads as on LRA, lra/data/mqar.py). The recurrent
family instead defaults to its authors' causal form and takes `bidirectional` from its
configs/published tables (MQAR from the same), which Based has none of. Non-causal: linear
attention sums over every real key, the window spans w keys on both sides of the query;
BaseConv stays causal (Zoology's; it is what gives linear attention the previous token, as
their MQAR needs). Causal with a CLS token in front, that token reads only itself: pool with
MEAN and use_cls False (CLS pooling is refused then, as with conv layers only: causal_reading).
Padding: the input is zeroed at padded positions, padded keys add nothing to the sums and get
no window weight, so real outputs equal those of the truncated sequence (LRA pads at the end;
the causal conv never reads ahead).

Differences by design: the window's heads are the encoder's (num_heads, qkv_dim; Zoology's
SlidingAttn is one head of width D, the same at num_heads 1, qkv_dim D as configs/table.py has
for MQAR); the window default is 64 (a small window; Zoology's ablation 128-512, the released
models 256); `causal`, padding and `rotary` (q, k rotated before the feature map: the Taylor
kernel is a function of q.k, so it keeps RoFormer's relative property exactly) are ours; no
dropout inside (ATTENTION_DROPOUT False; Zoology's Figure 2 Based has none, its window 0).
Initialisation as Zoology's LanguageModel applies it: every Dense N(0, 0.02), biases 0, the
window's out_proj N(0, 0.02 / sqrt(2 num_layers)), the conv PyTorch's default.

carried_state (Zoology's state-size axis, its counting): linear H (1 + f + f(f+1)/2) (V + 1)
(the symmetric second-order features and the normaliser: what `Based.state_size` counts; we
compute with all f^2 products); window 2 min(w, L) qkv_dim, twice that non-causal (keys on both
sides); conv (conv_kernel - 1) D, the inputs it keeps (Zoology counts conv_kernel D).
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import symmetric_uniform
from lra.models.common import HeadsMixer, rotary_embedding
from lra.models.ops.blocked import attend, gather_blocks, padded_blocks
from lra.models.ops.convolution import causal_depthwise_conv
from lra.models.ops.taylor_attention import taylor_linear_attention
from lra.models.registry import register

KINDS = ("conv", "linear", "window")
# The settings each kind reads (chunk_size only when causal): one that no layer of the model's
# depth reads does nothing, and a value given to it is said (idle_at).
READ_BY = {"conv": ("conv_kernel",), "linear": ("feature_dim", "causal", "chunk_size"),
           "window": ("window", "causal")}
zoology_normal = nn.initializers.normal(0.02)  # Zoology's _init_weights for every nn.Linear


class Kinds:
  """layers: a non-empty tuple of "conv", "linear", "window" (one kind alone counts as one)."""

  def allowed(self) -> str:
    return "a non-empty tuple of " + ", ".join(repr(k) for k in KINDS)

  def ok(self, value) -> bool:
    value = (value,) if isinstance(value, str) else value
    return isinstance(value, (tuple, list)) and bool(value) and all(
        isinstance(k, str) and k in KINDS for k in value)

  def bad_values(self) -> list:
    return [(), ("attention",), "Linear", (1,), None]


def sliding_window_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, keep_BxL, *, window: int,
                             causal: bool):
  """Softmax attention of query i over the real keys j with i - window <= j <= i (non-causal:
  |i - j| <= window), by blocks of min(window, L) queries over their own block and the
  previous one (and the next): BxLxHxK."""
  batch, length = keep_BxL.shape
  block = max(1, min(window, length))
  q_BxNxbxHxK, k_BxNxbxHxK, v_BxNxbxHxK = (padded_blocks(t, block)
                                           for t in (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK))
  keep_BxNxb = padded_blocks(keep_BxL, block, value=False)
  num_blocks = keep_BxNxb.shape[1]
  offsets_R = np.array([-1, 0] if causal else [-1, 0, 1])
  index_NxR = np.arange(num_blocks)[:, None] + offsets_R[None, :]
  exists_NxM = np.repeat((index_NxR >= 0) & (index_NxR < num_blocks), block, axis=1)
  index_NxR = np.clip(index_NxR, 0, num_blocks - 1)  # absent neighbours: dropped below
  # Key slot m of a query block sits at offset rel = (its block's offset) * b + j - i.
  rel_bxM = ((offsets_R[:, None] * block + np.arange(block)[None, :]).reshape(-1)[None, :]
             - np.arange(block)[:, None])
  band_bxM = (rel_bxM >= -window) & (rel_bxM <= (0 if causal else window))
  keep_BxNxM = gather_blocks(keep_BxNxb, index_NxR)
  allowed_BxNxbxM = (jnp.asarray(band_bxM)[None, None] & jnp.asarray(exists_NxM)[None, :, None]
                     & keep_BxNxM[:, :, None, :])
  y_BxNxbxHxK = attend(q_BxNxbxHxK, gather_blocks(k_BxNxbxHxK, index_NxR),
                       gather_blocks(v_BxNxbxHxK, index_NxR), allowed_BxNxbxM)
  return y_BxNxbxHxK.reshape(batch, -1, *y_BxNxbxHxK.shape[3:])[:, :length]


class BaseConv(nn.Module):
  """Zoology's BaseConv: conv(u) * (u W + b) + u, the conv depthwise and causal, with bias."""
  kernel: int
  dtype: str

  @nn.compact
  def __call__(self, u_BxLxD):
    width = u_BxLxD.shape[-1]
    proj_BxLxD = nn.Dense(width, dtype=self.dtype, kernel_init=zoology_normal,
                          name="projection")(u_BxLxD)
    init = symmetric_uniform(1 / np.sqrt(self.kernel))  # PyTorch's Conv1d: fan_in = kernel
    w_KxD = self.param("conv_weight", init, (self.kernel, width))
    b_D = self.param("conv_bias", init, (width,))
    u = u_BxLxD.astype(jnp.float32)
    y_BxLxD = causal_depthwise_conv(u, w_KxD, b_D) * proj_BxLxD.astype(jnp.float32) + u
    return y_BxLxD.astype(self.dtype)


@register("based")
class Based(HeadsMixer):
  """Based's layers, one kind per layer by layer_index: BaseConv, Taylor linear attention or
  sliding-window softmax attention (see the module docstring)."""
  layers: tuple[str, ...] = s.setting(
      ("conv", "linear", "window"), Kinds(),
      "the kind of each layer, cycled: layer l is layers[l % len(layers)] (conv, linear, "
      "window)")
  feature_dim: int = s.setting(16, s.Int(1), "f: query and key width per head of the linear "
                               "attention (its state has 1 + f + f^2 features)")
  window: int = s.setting(64, s.Int(1), "w: a window layer's query sees the w keys before it "
                          "(and, non-causal, the w after it)")
  causal: bool = s.setting(False, s.Bool(), "each token reads itself and earlier tokens only "
                           "(Zoology's language models); False: LRA's non-causal reading")
  conv_kernel: int = s.setting(3, s.Int(1), "taps of a conv layer's causal depthwise conv")
  chunk_size: int = s.setting(64, s.Int(1), "positions per chunk of the causal linear attention")
  layer_index: int = 0  # the encoder's: picks this layer's kind
  num_layers: int = 1  # the encoder's depth: the window's out_proj starts / sqrt(2 num_layers)

  SUBQUADRATIC = True
  # No dropout inside: Zoology's Figure 2 Based has none (its windows, attention_dropout 0).
  ATTENTION_DROPOUT = False
  # Zoology's Based models have no position embeddings (max_position_embeddings 0): the conv
  # layers and the window give order.
  ENCODER_SETTINGS = {"positions": "none"}
  # Its kinds cycle by layer: one layer would be BaseConv alone, two are Figure 2's conv and
  # linear attention.
  MIN_LAYERS = 2

  def check_settings(self) -> None:
    super().check_settings()
    if self.rotary and self.feature_dim % 2:
      s.fail(s.attention_key("feature_dim"), self.feature_dim,
             "an even width with positions='rotary' (q and k are rotated in pairs)")

  def kinds(self) -> tuple[str, ...]:
    return (self.layers,) if isinstance(self.layers, str) else tuple(self.layers)

  @property
  def kind(self) -> str:
    kinds = self.kinds()
    return kinds[self.layer_index % len(kinds)]

  def depth_kinds(self) -> list[str]:
    """The kind of every layer of the encoder's depth, in order."""
    kinds = self.kinds()
    return [kinds[i % len(kinds)] for i in range(max(self.num_layers, 1))]

  def causal_reading(self) -> str | None:
    if self.causal:
      return f"{s.attention_key('causal')}=True"
    if set(self.depth_kinds()) == {"conv"}:  # BaseConv is causal whatever `causal` says
      return (f"{s.attention_key('layers')}={self.layers!r} at config.model.num_layers="
              f"{self.num_layers} (BaseConv layers only)")
    return None

  def idle_at(self, length: int) -> list[str]:
    depth_kinds = self.depth_kinds()
    read = {name for kind in depth_kinds for name in READ_BY[kind]}
    lines = []
    # A value given (not the default) to a setting that no layer of this depth reads.
    for name, declaration in s.declared(type(self)).items():
      value = getattr(self, name)
      if name == "layers" or value == declaration.default:
        continue
      if name not in read:
        lines.append(f"{s.attention_key(name)}={value!r} does nothing: no layer reads it at "
                     f"config.model.num_layers={self.num_layers} (layers: "
                     f"{', '.join(depth_kinds)})")
      elif name == "chunk_size" and not self.causal:
        lines.append(f"{s.attention_key(name)}={value!r} does nothing: only causal linear "
                     f"attention reads it ({s.attention_key('causal')}=False)")
    if "window" in depth_kinds and self.window >= length - 1:
      lines.append(f"window={self.window} reaches every one of the {length} positions: the "
                   "window layers are full softmax attention")
    return lines

  def carried_state(self, width: int, length: int) -> int:
    """This layer's state (its kind's; the module docstring says how each is counted)."""
    if self.kind == "conv":
      return (self.conv_kernel - 1) * width
    if self.kind == "linear":
      f = self.feature_dim
      return self.num_heads * (1 + f + f * (f + 1) // 2) * (self.head_dim + 1)
    sides = 1 if self.causal else 2
    return sides * 2 * min(self.window, length) * self.qkv_dim

  def _dense(self, features: int, name: str, bias: bool):
    return nn.DenseGeneral((self.num_heads, features), use_bias=bias, dtype=self.dtype,
                           kernel_init=zoology_normal, name=name)

  def _linear(self, u_BxLxD, keep_BxL):
    f32 = lambda a: a.astype(jnp.float32)
    q = self._dense(self.feature_dim, "proj_q", False)(u_BxLxD)
    k = self._dense(self.feature_dim, "proj_k", False)(u_BxLxD)
    v = self._dense(self.head_dim, "proj_v", False)(u_BxLxD)
    if self.rotary:
      q, k = rotary_embedding(q), rotary_embedding(k)
    y_BxLxHxV = taylor_linear_attention(f32(q), f32(k), f32(v), keep_BxL, causal=self.causal,
                                        chunk=self.chunk_size)
    return nn.DenseGeneral(u_BxLxD.shape[-1], axis=(-2, -1), use_bias=False, dtype=self.dtype,
                           kernel_init=zoology_normal, name="proj_o")(y_BxLxHxV.astype(self.dtype))

  def _window(self, u_BxLxD, keep_BxL):
    q, k, v = (self._dense(self.head_dim, n, True)(u_BxLxD) for n in ("query", "key", "value"))
    if self.rotary:
      q, k = rotary_embedding(q), rotary_embedding(k)
    y_BxLxHxK = sliding_window_attention(q, k, v, keep_BxL, window=self.window,
                                         causal=self.causal)
    out_init = nn.initializers.normal(0.02 / math.sqrt(2 * self.num_layers))
    return nn.DenseGeneral(u_BxLxD.shape[-1], axis=(-2, -1), dtype=self.dtype,
                           kernel_init=out_init, name="out_proj")(y_BxLxHxK.astype(self.dtype))

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    keep_BxL = mask_BxL.astype(bool)
    u_BxLxD = jnp.where(keep_BxL[..., None], x_BxLxD, 0).astype(self.dtype)
    if self.kind == "conv":
      return BaseConv(self.conv_kernel, self.dtype, name="base_conv")(u_BxLxD)
    if self.kind == "linear":
      return self._linear(u_BxLxD, keep_BxL)
    return self._window(u_BxLxD, keep_BxL)
