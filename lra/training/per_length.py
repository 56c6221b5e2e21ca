"""The length-generalisation protocol (Deletang et al. 2023; Grazzi et al. 2025): a task trains
on short sequences and is tested on longer ones, and its test figures are per task length.

A task that gives its examples' task lengths (each split's "lengths": N whole numbers, the x
axis of the chart; never given to the model) is evaluated per length: an example's accuracy is
its share of its scored positions right (for a one-label task, 0 or 1), a length's accuracy the
mean over its test examples, and the test range's accuracy the mean over the lengths, each
length weighted equally (as Deletang et al. and Grazzi et al. average). Scaled accuracy
(Grazzi et al., xLSTM's Beck et al. 2024) is (accuracy - chance) / (1 - chance): 0 at a guess's
accuracy (Task.chance), 1 when perfect. The sums come from the evaluation step
(lra.training.steps.length_sums); this module checks the lengths and makes results.json's
"length_generalisation" of them. No JAX: the reports read it too.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from lra.errors import UserError

KEY = "length_generalisation"  # results.json's key
PER_LINE = 6  # lengths per line of the table a run prints


def longest(width: int) -> int:
  """The longest task length a row of `width` positions may have: one past its width, since a
  task's length may count an answer that is no input token (Grazzi et al.'s s counts it: s - 1
  bits, the answer read at the last)."""
  return width + 1


def check(task) -> None:
  """Each split's "lengths", where the task gives them: one whole number per example, from 0 to
  longest(the split's width) (its bins in the evaluation step); and a chance, where named, in
  [0, 1).
  Malformed data is one UserError naming the split."""
  chance = task.chance
  if chance is not None and not (isinstance(chance, (int, float)) and 0.0 <= chance < 1.0):
    raise UserError(f"task {task.name!r} names chance={chance!r}; a chance accuracy is a "
                    f"number in [0, 1)")
  for name, split in task.splits.items():
    if "lengths" not in split:
      continue
    lengths = np.asarray(split["lengths"])
    width = split["inputs"].shape[1]
    if lengths.shape != (len(split["labels"]),) or lengths.dtype.kind not in "iu":
      raise UserError(f"the {name} split of task {task.name!r} has lengths of shape "
                      f"{lengths.shape} and type {lengths.dtype}; give one whole number per "
                      f"example")
    if lengths.size and (lengths.min() < 0 or lengths.max() > longest(width)):
      raise UserError(f"the {name} split of task {task.name!r} has lengths outside "
                      f"0..{longest(width)} (its width {width}, and one answer past it)")


def rows(total: dict[str, Any]) -> list[dict[str, Any]]:
  """The evaluation's summed "length_accuracy_sum" and "length_examples" (a bin per length) ->
  a row per length that has examples: {"length", "accuracy", "examples"}, shortest first."""
  sums = np.asarray(total["length_accuracy_sum"], np.float64)
  counts = np.asarray(total["length_examples"], np.float64)
  return [{"length": int(n), "accuracy": float(sums[n] / counts[n]),
           "examples": int(round(counts[n]))} for n in np.flatnonzero(counts > 0)]


def scaled(accuracy: float | None, chance: float | None) -> float | None:
  """(accuracy - chance) / (1 - chance): 0 at chance, 1 when perfect, negative below chance;
  None where either is unknown."""
  if accuracy is None or chance is None:
    return None
  return (accuracy - chance) / (1.0 - chance)


def record(per_length: list[dict[str, Any]], chance: float | None,
           train_lengths=None) -> dict[str, Any]:
  """results.json's "length_generalisation": "per_length" (each length's accuracy, its scaled
  accuracy and examples), "mean_accuracy" over the lengths (each weighted equally), its
  "scaled_mean_accuracy", "chance", "test_lengths" and "train_lengths" ({"min", "max"} of the
  lengths seen; the train split's where it gives them, else None)."""
  mean = float(np.mean([r["accuracy"] for r in per_length])) if per_length else None
  return {"per_length": [{**r, "scaled_accuracy": scaled(r["accuracy"], chance)}
                         for r in per_length],
          "mean_accuracy": mean, "scaled_mean_accuracy": scaled(mean, chance),
          "chance": chance, "test_lengths": _span([r["length"] for r in per_length]),
          "train_lengths": None if train_lengths is None else _span(train_lengths)}


def _span(lengths) -> dict[str, int] | None:
  lengths = np.asarray(lengths)
  return {"min": int(lengths.min()), "max": int(lengths.max())} if lengths.size else None


def _range(span: dict | None) -> str:
  return "?" if not span else (f"{span['min']}" if span["min"] == span["max"]
                               else f"{span['min']}-{span['max']}")


def table_lines(found: dict[str, Any]) -> list[str]:
  """The per-length test accuracy as a run prints it: a heading, PER_LINE lengths a line
  (`length: accuracy%`), then the mean over the test range (and scaled, where chance is
  named)."""
  chance = found.get("chance")
  head = (f"per-length test accuracy (trained on lengths {_range(found.get('train_lengths'))}, "
          f"tested on {_range(found.get('test_lengths'))}"
          + (f"; chance {chance:.4g}" if chance is not None else "") + "):")
  cells = [f"{r['length']:>5}: {100 * r['accuracy']:5.1f}%" for r in found["per_length"]]
  lines = [head] + ["  " + "  ".join(cells[i:i + PER_LINE])
                    for i in range(0, len(cells), PER_LINE)]
  mean, scaled_mean = found["mean_accuracy"], found["scaled_mean_accuracy"]
  if mean is not None:
    lines.append(f"mean over the {len(cells)} test lengths {100 * mean:.1f}%"
                 + (f", scaled accuracy {scaled_mean:.3f} (0 = chance, 1 = perfect)"
                    if scaled_mean is not None and math.isfinite(scaled_mean) else ""))
  return lines
