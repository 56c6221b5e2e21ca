"""HGRN2 (Qin et al. 2024, "HGRN2: Gated Linear RNNs with State Expansion"): HGRN's gated
linear recurrence with its state expanded by an outer product, as a token mixer.

The paper's recurrence, per head, with f_t in (0, 1)^K the forget gate:
    S_t = diag(f_t) S_{t-1} + (1 - f_t) i_t^T        (K x V: the state expanded K times)
    o_t = S_t^T q_t
The input gate is tied to the forget gate (k = 1 - f), so the forget gate costs no extra
parameters, and f is bounded below by a per-layer lower bound lb:
    f_t = lb + (1 - lb) sigmoid(f_proj(x_t)),  log_decay = log f_t per key channel.
This is the core's vector decay (models/ops/matrix_recurrence.py, GLA's form).

The layer is flash-linear-attention's HGRN2Attention (fla/layers/hgrn2.py, the
implementation the authors' README points to; `variant` "fla", the default), D = the input
width, H = num_heads, V = qkv_dim / H, K = expand_ratio (or V):
    q = SiLU(q_proj(x)) K^-1/2     D -> H K, no bias (fla's GLA kernels scale q by K^-1/2)
    f = f_proj(x)                  D -> H K, no bias
    v = i_proj(x)                  D -> H V, no bias
    o = the recurrence above;  out = o_proj(RMSNorm(o))   the RMS norm over all H V channels
                                                          with a learned weight, eps 1e-5
There is no output gate in fla's layer (the SiLU on q plays it). fla has an optional short
convolution (off by default); it is not built here.
`variant` "lra" is the authors' LRA layer instead (Doraemonzzz/hgru2-pytorch, branch
reproduce, commit d1689811, hgru2_pytorch/modules/hgru2_1d.py and bihgru2_1d.py, which the
HGRN2 repo's LRA scripts install): one in_proj with bias to (v, q, f); v = SiLU, q = sigmoid,
no scale on q; LayerNorm (the module's default norm_type) over the H V channels; out_proj with
bias. The authors' LRA heads are K = V = expand_ratio wide (num_heads = D / expand_ratio):
set num_heads and qkv_dim so (e.g. D 128, expand_ratio 8: num_heads 16, qkv_dim 128).

Lower bound (`lower_bound`): HGRN's, growing with depth so that upper layers keep long
memories. "learned" (the default) is the authors' and fla's: a model-level parameter of
num_layers x (H K) logits (fla: zeros, the authors: ones; the same softmax), softmax over the
layers, cumulative sum minus the first row: layer l gets sum_{j=1..l} softmax_j, so layer 0
has none and each bound lies in [0, 1). It is the encoder's shared module (make_shared), the
one parameter every layer reads. "fixed" is its initial value, l / num_layers, frozen;
"none" is lb = 0 everywhere. (The authors' LRA model code, OpenNLPLab/lra branch release at
dd871ef for HGRN1, sums the first l rows instead, sum_{j<l} softmax_j: the same at
initialisation, l / num_layers.) A mixer built outside the encoder (tests) with layer_index
>= num_layers counts itself the last of layer_index + 1 layers.

Bidirectional (setting): the core's two passes with the same projections, averaged before
the norm; the authors' BiHgru2_1d sums them, which the norm after it makes the same (up to its
eps).

Initialisation: PyTorch's nn.Linear defaults (uniform in +-1/sqrt(fan_in), biases too), as the
authors' LRA code keeps them (fla's language models draw N(0, 0.02) instead); norm weight 1.

Padding: padded positions neither decay nor write the state (the core), and the layer has no
convolution, so real outputs equal those of the truncated sequence.
The mixer has no attention weights and no dropout inside (ATTENTION_DROPOUT = False).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.blocks.init import symmetric_uniform, torch_default
from lra.models.blocks.norms import HeadRMSNorm
from lra.models.blocks.recurrent import RecurrentMixer
from lra.models.registry import register

VARIANTS = ("fla", "lra")
LOWER_BOUNDS = ("learned", "fixed", "none")


class LowerBounds(nn.Module):
  """HGRN's learned lower bounds, one parameter for the whole encoder: logits (layers x F),
  softmax over the layers, layer l's bound = sum of rows 1..l (cumsum minus the first row)."""

  @nn.compact
  def __call__(self, layers: int, layer_index: int, features: int):
    logits_NxF = self.param("logits", nn.initializers.zeros, (layers, features))
    share_NxF = jax.nn.softmax(logits_NxF.astype(jnp.float32), axis=0)
    return jnp.sum(share_NxF[1:layer_index + 1], axis=0)


@register("hgrn2")
class HGRN2(RecurrentMixer):
  """HGRN2: q, forget-gate and input projections, k = 1 - f, the vector-decay recurrence,
  norm and output projection (see the module docstring)."""
  expand_ratio: int = s.setting(0, s.Int(0), "K, key channels per head (the state expansion); "
                                "0 = the head width qkv_dim / num_heads")
  lower_bound: str = s.setting("learned", s.Choice(LOWER_BOUNDS),
                               "the forget gate's per-layer lower bound: learned (cumulative "
                               "softmax over the layers), fixed (l / num_layers) or none")
  variant: str = s.setting("fla", s.Choice(VARIANTS),
                           "fla (fla's HGRN2Attention) or lra (the authors' LRA layer)")
  qkv_dim: int = 1  # the encoder's: V = qkv_dim / num_heads values per head
  layer_index: int = 0  # the encoder's: this block's depth (its lower bound)
  num_layers: int = 1  # the encoder's depth
  shared: Any = None  # the encoder's LowerBounds (lower_bound "learned")

  @classmethod
  def make_shared(cls, settings, **_):
    """Called by the encoder in its own scope: the lower bounds every layer reads."""
    if settings.get("lower_bound", "learned") != "learned":
      return None
    return LowerBounds(name="hgrn2_lower_bounds")

  def check_settings(self) -> None:
    super().check_settings()
    if self.qkv_dim % self.num_heads:
      s.fail(s.model_key("qkv_dim"), self.qkv_dim,
             f"a multiple of config.model.num_heads={self.num_heads}")

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V) from qkv_dim and expand_ratio (whatever the width)."""
    del width
    value = self.qkv_dim // self.num_heads
    return self.num_heads, self.expand_ratio or value, value

  def _bound(self, features: int):
    """This layer's lower bound (F,), or None (layer 0 and "none": no bound)."""
    if self.lower_bound == "none" or self.layer_index == 0:
      return None
    layers = max(self.num_layers, self.layer_index + 1)
    if self.lower_bound == "fixed":
      return jnp.full((features,), self.layer_index / layers, jnp.float32)
    if self.shared is None:
      raise ValueError("hgrn2 lower_bound='learned' needs the encoder's shared lower bounds; "
                       "build the mixer through models.Encoder (or registry.make_shared)")
    return self.shared(layers, self.layer_index, features)

  def log_forget(self, f_BxLxHxK):
    """log f = log(lb + (1 - lb) sigmoid(f)), in log space as fla computes it."""
    heads, key = f_BxLxHxK.shape[-2:]
    log_f = jax.nn.log_sigmoid(f_BxLxHxK)
    bound_F = self._bound(heads * key)
    if bound_F is None:
      return log_f
    bound_1x1xHxK = bound_F.reshape(1, 1, heads, key)
    return jnp.logaddexp(jnp.log(bound_1x1xHxK), jnp.log1p(-bound_1x1xHxK) + log_f)

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    del deterministic  # no dropout inside
    width = x_BxLxD.shape[-1]
    heads, key, value = self.head_sizes(width)
    lra = self.variant == "lra"
    f32 = lambda a: a.astype(jnp.float32)

    def dense(features, name):  # PyTorch's nn.Linear init; biases in the authors' LRA layer
      return nn.DenseGeneral(features, use_bias=lra, dtype=self.dtype, name=name,
                             kernel_init=torch_default,
                             bias_init=symmetric_uniform(1 / np.sqrt(width)))

    x_BxLxD = self.inputs(x_BxLxD, mask_BxL)
    q_BxLxHxK = f32(dense((heads, key), "q_proj")(x_BxLxD))
    f_BxLxHxK = f32(dense((heads, key), "f_proj")(x_BxLxD))
    v_BxLxHxV = f32(dense((heads, value), "i_proj")(x_BxLxD))
    if lra:
      q_BxLxHxK, v_BxLxHxV = jax.nn.sigmoid(q_BxLxHxK), jax.nn.silu(v_BxLxHxV)
    else:  # fla's GLA kernels scale q by K^-1/2 (the norm after makes it nearly moot)
      q_BxLxHxK = jax.nn.silu(q_BxLxHxK) * key ** -0.5
    log_f_BxLxHxK = self.log_forget(f_BxLxHxK)
    k_BxLxHxK = -jnp.expm1(log_f_BxLxHxK)  # 1 - f: the input gate tied to the forget gate
    o_BxLxHxV = self.run(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, log_decay=log_f_BxLxHxK)
    if lra:
      o_BxLxHxV = nn.LayerNorm(epsilon=1e-5, reduction_axes=(-2, -1), feature_axes=(-2, -1),
                               dtype=jnp.float32, name="norm")(o_BxLxHxV)
    else:
      o_BxLxHxV = HeadRMSNorm(eps=1e-5, per_head=False, name="g_norm")(o_BxLxHxV)
    return nn.DenseGeneral(width, axis=(-2, -1), use_bias=lra, dtype=self.dtype,
                           kernel_init=torch_default,
                           bias_init=symmetric_uniform(1 / np.sqrt(heads * value)),
                           name="o_proj")(o_BxLxHxV.astype(self.dtype))
