"""Figures as the reports read and print them: finite floats, percentages, short text."""
from __future__ import annotations

import math
from typing import Any


def finite(x: Any) -> float | None:
  if x is None:
    return None
  try:
    x = float(x)
  except (TypeError, ValueError):
    return None
  return x if math.isfinite(x) else None


def pct(fraction: Any) -> float | None:
  x = finite(fraction)
  return None if x is None else 100.0 * x


def fmt(x: float | None, digits: int = 1) -> str:
  return "-" if x is None else f"{x:.{digits}f}"


def si(x: float, unit: str) -> str:
  """3 significant digits with an SI prefix: 1.23 TFLOP."""
  for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= factor:
      return f"{x / factor:.3g} {prefix}{unit}"
  return f"{x:.3g} {unit}"


def memory_text(gb: float | None) -> str:
  """'850 MB' below 1 GB, '1.50 GB' from there (10^6 and 10^9 bytes); '-' if missing."""
  if gb is None:
    return "-"
  return f"{gb * 1000:.0f} MB" if gb < 1 else f"{gb:.2f} GB"


def sig3(x: float | None) -> str:
  """Three significant figures, never in e-notation: 0.179, 1.52, 12.3, 456 (a figure of 1000
  or more in whole units, 1234); '-' if missing."""
  if x is None:
    return "-"
  if x == 0 or abs(x) >= 100:
    return f"{x:.0f}"
  rounded = float(f"{x:.3g}")  # 9.996 -> 10.0: the decimals follow the rounded figure
  return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"
