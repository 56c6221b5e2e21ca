"""A speed cell over interleaved rounds (eval.py speed): the rows of one (model, length)'s rounds
combined into one, its median with the min-max over the rounds, and which cells cannot be
ranked because their ranges overlap."""
from __future__ import annotations

import statistics
from typing import Any

from lra.reporting.numbers import finite

NO_SPREAD = "one round, or a speed.json from before the rounds"


def combine(rounds: list[dict]) -> dict[str, Any]:
  """One row from the rows of a cell's rounds, in order (each round a fresh process that times
  its steps after compiling and a warm-up step): every round's step time in
  `round_step_times_s`, `step_time_s` their median (`steps_per_s` its inverse); memory and
  FLOPs from the first round (a later round's compile may come from the compilation cache),
  the device's peak the largest of the rounds'. A failed round (OOM, error) makes the cell that
  failure (`failed_in_round`, from 1), keeping the times of the rounds before it."""
  times = [r["step_time_s"] for r in rounds if r.get("status") == "ok"]
  failed = [i for i, r in enumerate(rounds) if r.get("status") != "ok"]
  if failed:
    return {**rounds[failed[0]], "round_step_times_s": times, "failed_in_round": failed[0] + 1}
  row = dict(rounds[0])
  median = statistics.median(times)
  peaks = [r["peak_memory_bytes"] for r in rounds if r.get("peak_memory_bytes") is not None]
  row.update(round_step_times_s=times, step_time_s=median, steps_per_s=1.0 / median,
             peak_memory_bytes=max(peaks) if peaks else None)
  if row.get("flops_per_step"):
    row["achieved_flops_per_s"] = row["flops_per_step"] / median
  return row


def spread(row: dict) -> dict[str, Any]:
  """An ok row's speed: {"steps_per_s": 1 / the median step time over its rounds, "low",
  "high": the slowest and fastest round's steps/s, "rounds": how many}. A row of one round has
  no spread (low and high None); a row from before the rounds (no `round_step_times_s`) has
  its one figure and rounds None."""
  times = [t for t in map(finite, row.get("round_step_times_s") or []) if t and t > 0]
  if not times:
    steps, step_time = finite(row.get("steps_per_s")), finite(row.get("step_time_s"))
    if steps is None and step_time:
      steps = 1.0 / step_time
    return {"steps_per_s": steps, "low": None, "high": None, "rounds": None}
  many = len(times) > 1
  return {"steps_per_s": 1.0 / statistics.median(times),
          "low": 1.0 / max(times) if many else None, "high": 1.0 / min(times) if many else None,
          "rounds": len(times)}


def overlap(a: dict, b: dict) -> bool | None:
  """Whether two cells' min-max ranges overlap, so that the table cannot rank them; None where
  either has no spread."""
  if a.get("low") is None or b.get("low") is None:
    return None
  return a["low"] <= b["high"] and b["low"] <= a["high"]


def ties(cells: dict[str, dict]) -> list[tuple[str, str]]:
  """The pairs of `cells` ({model: cell}, in the table's order) whose ranges overlap."""
  names = list(cells)
  return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
          if overlap(cells[a], cells[b])]
