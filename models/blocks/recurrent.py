"""The base class of the recurrent family (Mamba-2, Mamba-3, RetNet, GLA, HGRN2, DeltaNet, Gated
DeltaNet, DeltaProduct, RWKV-7, KDA, Comba, mLSTM): the settings of the core (models/ops/matrix_recurrence.py: its
form and chunk size) and of the direction, and what every member has the same way: the heads
(the encoder's num_heads, checked), the state count from each mixer's head sizes, and the input
setup; a member whose position takes several core steps (DeltaProduct) or that prepares its
keys per pass (Mamba-3: rotation and trapezoid) overrides `core`.

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

from lra import rules as s
from lra.models.blocks.inputs import masked_input
from lra.models.common import Mixer
from lra.models.ops.matrix_recurrence import FORMS, recurrence


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
  num_heads: int = 1  # the encoder's (Mamba-2 reads its heads from head_dim instead)

  # No L x L array (the chunks are chunk_size wide), no attention weights to drop.
  SUBQUADRATIC = True
  ATTENTION_DROPOUT = False
  # The encoder adds no absolute positions (the decays and the short convolutions encode
  # order) and mean-pools the real tokens without a CLS token (a causal pass gives a CLS
  # token at position 0 nothing to read), as for Mamba.
  ENCODER_SETTINGS = {"positions": "none", "pooling": "MEAN", "use_cls": False}

  def check_settings(self) -> None:
    super().check_settings()
    s.check(s.model_key("num_heads"), self.num_heads, s.Int(1))
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

  def head_sizes(self, width: int) -> tuple[int, int, int]:
    """(H, K, V): the heads of the core and each head's key and value widths (the state S is
    K x V) for a D = `width` input; a width that does not split is a one-line SettingError.
    Each mixer declares its own."""
    raise NotImplementedError(f"{type(self).__name__} declares no head_sizes(width)")

  def carried_state(self, width: int, length: int) -> int:
    """S (K x V) per head, per direction (short convolutions' windows not counted)."""
    del length  # a fixed-size state
    heads, key, value = self.head_sizes(width)
    return self.directions * heads * key * value

  def inputs(self, x_BxLxD, mask_BxL):
    """The mixer's input: zero at padded positions, in the compute dtype."""
    return masked_input(x_BxLxD, mask_BxL).astype(self.dtype)

  def core(self, q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, *, reverse: bool, **gates):
    """One direction's (output, stabiliser) of the core at the mixer's form and chunk size. A
    mixer whose position takes several core steps (DeltaProduct) lays them out here."""
    return recurrence(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, form=self.form,
                      chunk_size=self.chunk_size, reverse=reverse, **gates)

  def run(self, q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, *, finish=None, **gates):
    """The core forward (and backward when bidirectional, averaged); finish(o, m) turns each
    direction's (output, stabiliser) into its result (default: the output)."""
    finish = finish or (lambda o, m: o)

    def direction(reverse: bool):
      return finish(*self.core(q_BxLxHxK, k_BxLxHxK, v_BxLxHxV, mask_BxL, reverse=reverse,
                               **gates))

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
