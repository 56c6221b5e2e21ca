"""Linformer (Wang et al. 2020): keys and values projected along the sequence to k rows.

Per layer, learned E, F of shape k x N (N = the input length at init, i.e. the model's maximum
length) map the L per-head keys and values to k rows each: keys = E K, values = F V (shared
by all heads). The L queries then take ordinary softmax attention over those k rows: time and
memory O(L k), never L x L. Padded positions are zeroed before projecting, so they add
nothing to the k rows; an input shorter than N uses the first L columns of E and F.

Sharing (the paper's section 4): "none" (E and F per layer), "kv" (one matrix per layer for
keys and values) and "layer" (one matrix for keys and values in every layer, owned by the
encoder through registry.make_shared).
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from lra import rules as s
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, softmax_attention
from lra.models.registry import register

SHARINGS = ("none", "kv", "layer")


def _projection(module: nn.Module, name: str, k: int, length: int):
  """The k x N matrix `name` of `module`: created from the input length at init, read back
  as stored after."""
  # module.param would insist the stored N equal this call's length; a shorter input is fine
  # (it uses the first columns), so an existing matrix is read without that check.
  if module.has_variable("params", name):
    return module.get_variable("params", name)
  # Fan-in is the sequence axis: each projected row sums over up to N positions.
  init = nn.initializers.lecun_normal(in_axis=-1, out_axis=-2)
  return module.param(name, init, (k, length), jnp.float32)


class SharedProjection(nn.Module):
  """Layer-wise sharing: the one E that every layer uses for its keys and values."""
  k: int

  @nn.compact
  def __call__(self, length: int):
    return _projection(self, "E", self.k, length)


@register("linformer")
class LinformerAttention(HeadsMixer):
  """Softmax attention of every query over k learned sequence-projections of the keys."""
  k: int = s.setting(16, s.Int(1), "projected length; LRA's Text config asks for 32")
  sharing: str = s.setting("none", s.Choice(SHARINGS),
                           '"none": separate E and F; "kv": one for both; "layer": one for all')
  shared: SharedProjection | None = None  # the encoder's E, given when sharing == "layer"

  SUBQUADRATIC = True

  @classmethod
  def make_shared(cls, settings, **_):
    """Called by the encoder in its own scope: one E for all layers when sharing == "layer"."""
    if settings.get("sharing") != "layer":
      return None
    return SharedProjection(settings.get("k", cls.k), name="shared_projection")

  def carried_state(self, width: int, length: int) -> int:
    """The k projected keys and k projected values (E K, F V), 2 x k x qkv_dim at any length
    (that E and F span the sequence is in the parameters, not the state)."""
    del width, length
    return 2 * self.k * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    length = x_BxLxD.shape[1]
    if self.sharing == "layer":
      if self.shared is None:
        raise ValueError("linformer sharing='layer' needs the encoder's shared projection; "
                         "build the mixer through models.Encoder")
      e_kxN = f_kxN = self.shared(length)
    else:
      e_kxN = _projection(self, "E", self.k, length)
      f_kxN = e_kxN if self.sharing == "kv" else _projection(self, "F", self.k, length)
    if length > e_kxN.shape[1]:
      raise ValueError(f"linformer input length {length} exceeds the length {e_kxN.shape[1]} "
                       "its projections were initialised with")

    keep_BxLx1x1 = mask_BxL.astype(bool)[:, :, None, None]
    k_BxLxHxK = jnp.where(keep_BxLx1x1, k_BxLxHxK, jnp.zeros_like(k_BxLxHxK))
    v_BxLxHxK = jnp.where(keep_BxLx1x1, v_BxLxHxK, jnp.zeros_like(v_BxLxHxK))
    # Sums over up to N positions: accumulate in float32 even when the model runs in bfloat16.
    project = lambda p_kxN, t_BxLxHxK: jnp.einsum(
        "nl,blhk->bnhk", p_kxN[:, :length].astype(t_BxLxHxK.dtype), t_BxLxHxK,
        preferred_element_type=jnp.float32).astype(t_BxLxHxK.dtype)
    keys_BxkxHxK = project(e_kxN, k_BxLxHxK)
    values_BxkxHxK = project(f_kxN, v_BxLxHxK)

    # Every projected row mixes real positions only, so none of them is masked.
    all_Bxk = jnp.ones(keys_BxkxHxK.shape[:2], bool)
    rng = self.attention_rng(deterministic)
    y_BxLxHxK = softmax_attention(q_BxLxHxK, keys_BxkxHxK, values_BxkxHxK, all_Bxk,
                                  dropout_rng=rng, dropout_rate=self.dropout_rate)
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxLxHxK)
