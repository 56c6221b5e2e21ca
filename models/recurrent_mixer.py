"""What the recurrent family's mixers share (Mamba-2, RetNet, GLA, HGRN2, DeltaNet, Gated
DeltaNet, mLSTM): the base class with the settings of the core (models/matrix_recurrence.py:
its form and chunk size) and of the direction, the short causal convolution and the RMS norm
over each head's channels.

Bidirectional (LRA's tasks are non-causal): the core runs over the sequence and over the
reversed sequence with the same queries, keys, values and gates, and the two outputs are
averaged, each first finished by the mixer (mLSTM normalises each direction by its own
normaliser). Every parameter is shared between the directions; position t's own write counts
in both. This is the averaged two-pass scheme our Mamba uses (Vision Mamba's), with shared
rather than separate per-direction parameters; Hydra (Hwang et al. 2024) instead adds a
forward and a backward pass that each exclude the diagonal and adds a separate diagonal term,
with separate dt per direction: a quasiseparable matrix mixer we do not build here.
`combine="gated"` weighs each pass by a learned sigmoid gate of the query (per head, position
and direction; zero-initialised, so it starts as the mean): a query can read mostly the pass
that carries what it needs. Why that matters: averaged, the backward pass of a position brings
everything after it, and a mixer without an input-dependent write strength (GLA, RetNet) cannot
keep filler out of it (MQAR: docs/data.md).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import rules as s
from lra.models.common import Mixer
from lra.models.mamba import causal_depthwise_conv, symmetric_uniform
from lra.models.matrix_recurrence import FORMS, recurrence


COMBINES = ("mean", "gated")  # how the two passes of a bidirectional mixer are combined


class RecurrentMixer(Mixer):
  """Base of the recurrent family: call `self.run(q, k, v, mask, **gates)` (the core's gates:
  log_decay, beta, log_write) for the heads' outputs in float32."""
  form: str = s.setting("chunked", s.Choice(FORMS),
                        '"chunked" (the fast form) or "recurrent" (position by position: '
                        "the reference, the same function)")
  chunk_size: int = s.setting(64, s.Int(1), "positions per chunk of the chunked form")
  bidirectional: bool = s.setting(False, s.Bool(),
                                  "also run from the end (same parameters), outputs averaged")
  combine: str = s.setting("mean", s.Choice(COMBINES),
                           'how the bidirectional passes combine: "mean" (averaged) or '
                           '"gated" (each pass weighted by its own learned sigmoid gate of the '
                           "query, per head and position)")

  # No L x L array (the chunks are chunk_size wide), no attention weights to drop.
  SUBQUADRATIC = True
  ATTENTION_DROPOUT = False
  # The encoder adds no absolute positions (the decays and the short convolutions encode
  # order) and mean-pools the real tokens without a CLS token (a causal pass gives a CLS
  # token at position 0 nothing to read), as for Mamba.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    if self.combine != "mean" and not self.bidirectional:
      s.fail(s.attention_key("combine"), self.combine,
             "'mean' unless config.model.attention.bidirectional=True (one pass has nothing "
             "to combine)")

  @property
  def directions(self) -> int:
    """How many passes run (each carries its own state)."""
    return 2 if self.bidirectional else 1

  def causal_reading(self) -> str | None:
    # One pass: the core and the short convolutions all read causally.
    return None if self.bidirectional else f"{s.attention_key('bidirectional')}=False"

  def run(self, q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, *, finish=None, **gates):
    """The core forward (and backward when bidirectional, averaged); finish(o, m) turns each
    direction's (output, stabiliser) into its result (default: the output)."""
    finish = finish or (lambda o, m: o)

    def direction(reverse: bool):
      return finish(*recurrence(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, form=self.form,
                                chunk_size=self.chunk_size, reverse=reverse, **gates))

    y = direction(False)
    if not self.bidirectional:
      return y
    if self.combine == "mean":
      return 0.5 * (y + direction(True))
    # "gated": a query may read mostly one direction (MQAR's queries need the pairs before
    # them; a mean lets the filler after them in). Zero-initialised: 1/2 each, the mean.
    heads, width = q_BxLxHxK.shape[-2:]
    w_2xHxK = self.param("direction_gate", nn.initializers.zeros, (2, heads, width))
    b_2xH = self.param("direction_gate_bias", nn.initializers.zeros, (2, heads))
    logits_BxLxHx2 = (jnp.einsum("blhk,dhk->blhd", q_BxLxHxK.astype(jnp.float32), w_2xHxK)
                      + b_2xH.T[None, None])
    gate_BxLxHx2 = 2 * jax.nn.sigmoid(logits_BxLxHx2)  # 1 each at init: the mean's 1/2 below
    return 0.5 * (gate_BxLxHx2[..., 0, None] * y + gate_BxLxHx2[..., 1, None] * direction(True))


class ShortConv(nn.Module):
  """The short depthwise causal convolution the family puts before its recurrences (kernel
  `kernel`, over each of the input's channels), optionally followed by SiLU. The input is
  zeroed at padded positions first: a padded position reads as the zeros past either end."""
  kernel: int = 4
  bias: bool = False
  activation: bool = True

  @nn.compact
  def __call__(self, x_BxLxC, mask_BxL):
    channels = x_BxLxC.shape[-1]
    init = symmetric_uniform(1 / np.sqrt(self.kernel))  # PyTorch's Conv1d: fan_in = kernel
    w_KxC = self.param("weight", init, (self.kernel, channels))
    b_C = self.param("bias", init, (channels,)) if self.bias else jnp.zeros((channels,))
    x = jnp.where(mask_BxL[..., None], x_BxLxC.astype(jnp.float32), 0.0)
    y = causal_depthwise_conv(x, w_KxC, b_C)
    return jax.nn.silu(y) if self.activation else y


class HeadRMSNorm(nn.Module):
  """RMS norm over each head's last axis, one learned weight per channel shared by the heads
  (fla's RMSNorm over head_v_dim, Mamba-2's over the whole inner width when `per_head` is
  False). In float32."""
  eps: float = 1e-5
  per_head: bool = True

  @nn.compact
  def __call__(self, y_BxLxHxV):
    y = y_BxLxHxV.astype(jnp.float32)
    shape = y.shape[-1:] if self.per_head else y.shape[-2:]
    axes = (-1,) if self.per_head else (-2, -1)
    weight = self.param("scale", nn.initializers.ones, shape)
    y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=axes, keepdims=True) + self.eps)
    return y * weight.reshape((1,) * (y.ndim - weight.ndim) + weight.shape)
