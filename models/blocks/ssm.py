"""The base class of the state space mixers (S4D, S5, LRU, Mamba): their reading direction,
their tied dropout and their dt range rule. What they compute with is in models/ops (the
diagonal recurrence, the selective scan, the FFT convolution) and models/blocks/inputs.py."""
from __future__ import annotations

import flax.linen as nn

from lra import rules as s
from lra.models.common import Mixer


class SSMMixer(Mixer):
  """Base of the state space mixers. One that calls `tied_dropout` (S4D, S5, LRU) declares the
  setting tie_dropout: one dropout mask per channel for the whole sequence, as the official
  S4/S5 layers do (Mamba has no dropout inside, and no such setting)."""

  # The SSMs form no L x L array (they encode positions themselves, too).
  SUBQUADRATIC = True

  def causal_reading(self) -> str | None:
    # Each SSM here (S4D, S5, LRU, Mamba) declares `bidirectional`; without it, one causal pass.
    return None if self.bidirectional else f"{s.attention_key('bidirectional')}=False"

  def tied_dropout(self, h_BxLxH, *, deterministic: bool):
    drop = nn.Dropout(self.dropout_rate, broadcast_dims=(1,) if self.tie_dropout else ())
    return drop(h_BxLxH, deterministic=deterministic)

  def check_dt_range(self) -> None:
    """dt_min <= dt_max (each already checked > 0)."""
    if self.dt_min > self.dt_max:
      s.fail(s.attention_key("dt_min"), self.dt_min,
             f"a number <= config.model.attention.dt_max={self.dt_max!r}")
