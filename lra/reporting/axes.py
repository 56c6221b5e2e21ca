"""Chart axes and captions shared by eval.py's charts: labelled ticks on a log axis, and the
runs' training steps for a title."""
from __future__ import annotations

import math
from typing import Any


def _tick_text(value: float) -> str:
  """A tick's number as written: 0.05, 2, 20,000 (not 5x10^-2 or 2x10^4)."""
  return f"{value:,.0f}" if value >= 1000 and value == round(value) else f"{value:g}"


def _decade_ticks(lo: float, hi: float, leads: tuple[int, ...]) -> list[float]:
  found = []
  for power in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
    found += [lead * 10.0 ** power for lead in leads if lo <= lead * 10.0 ** power <= hi]
  return found


def log_ticks(ax: Any, axis: str = "y") -> list[float]:
  """Labelled ticks on a log axis however few decades its points span (one length, one model):
  the axis made at least a decade wide around its points, then the powers of ten where three
  or more fit, else 1, 2 and 5 times them (three or more in any decade), thinned to at most
  eight; other ticks unlabelled. Call once everything is drawn; returns the ticks."""
  from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
  limits, set_limits, target = ((ax.get_ylim, ax.set_ylim, ax.yaxis) if axis == "y" else
                                (ax.get_xlim, ax.set_xlim, ax.xaxis))
  lo, hi = limits()
  if hi / lo < 10:
    middle = math.sqrt(lo * hi)
    lo, hi = middle / math.sqrt(10), middle * math.sqrt(10)
    set_limits(lo, hi)
  ticks = _decade_ticks(lo, hi, (1,))
  if len(ticks) < 3:
    ticks = _decade_ticks(lo, hi, (1, 2, 5))
  ticks = ticks[::math.ceil(len(ticks) / 8)]
  target.set_major_locator(FixedLocator(ticks))
  target.set_major_formatter(FuncFormatter(lambda v, _: _tick_text(v)))
  target.set_minor_formatter(NullFormatter())
  return ticks


def steps_text(steps: list) -> str:
  """The training steps of a chart's runs (results.json num_train_steps), for its title."""
  known = sorted({n for n in steps if n is not None})
  if not known:
    return "training steps not recorded"
  text = f"{known[0]:,}" if len(known) == 1 else f"{known[0]:,} to {known[-1]:,}"
  return f"runs of {text} training steps" + (" (some not recorded)" if None in steps else "")
