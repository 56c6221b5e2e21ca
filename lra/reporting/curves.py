"""Training curves of a set of runs, read from each run's metrics.jsonl (eval.py curves): train
and validation loss and accuracy against the step, for charts.curves_chart."""
from __future__ import annotations

import json
import math
import os

from lra import paths
from lra.errors import UserError

# The four panels: (metric in metrics.jsonl, axis label); accuracies are drawn in %.
PANELS = (("train_loss", "train loss"), ("val_loss", "validation loss"),
          ("train_accuracy", "train accuracy (%)"), ("val_accuracy", "validation accuracy (%)"))


def _number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def _rows(run: str) -> list[dict]:
  """The rows of RUN/metrics.jsonl; a missing or malformed file is a UserError. A last line
  torn by a kill in mid-write (no newline) is left out, as a resumed run drops it."""
  folder = paths.resolve(run)
  path = folder / "metrics.jsonl"
  if not folder.exists():
    raise UserError(f"{run}: no such run directory; nothing drawn")
  if not path.exists():
    raise UserError(f"{run}: no metrics.jsonl (name run directories, as train.py --workdir "
                    f"made them, e.g. runs/listops_cpu); nothing drawn")
  try:
    lines = path.read_text().splitlines(keepends=True)
  except (OSError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: cannot be read ({type(e).__name__}); nothing drawn") from None
  rows = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      if number == len(lines) and not line.endswith("\n"):
        break  # torn by a kill: the run resumed (or will) without it
      raise UserError(f"{path}: line {number} is not JSON ({e.msg}); metrics.jsonl has one "
                      f"JSON object per line, as train.py writes it; nothing drawn") from None
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
      raise UserError(f"{path}: line {number} has no integer 'step'; not a metrics.jsonl "
                      f"written by train.py; nothing drawn")
    for key, _ in PANELS:
      if key in row and not _number(row[key]):
        raise UserError(f"{path}: line {number}: {key}={row[key]!r} is not a finite number; "
                        f"nothing drawn")
    rows.append(row)
  return rows


def run_names(runs: list[str]) -> list[str]:
  """A legend name per run: its folder's name, or as many trailing folders as tell it apart
  from another run of the same name (runs/a/transformer and runs/b/transformer: a/transformer
  and b/transformer)."""
  parts = [os.fspath(paths.resolve(run)).rstrip("/").split("/") for run in runs]

  def tail(i: int, depth: int) -> str:
    return "/".join(parts[i][-depth:])
  names = []
  for i in range(len(parts)):
    depth = 1
    while depth < len(parts[i]) and any(tail(j, depth) == tail(i, depth)
                                        for j in range(len(parts)) if j != i):
      depth += 1
    names.append(tail(i, depth))
  return names


DENOISE_LABEL = " (denoise: masked-token loss and accuracy)"


def _config(run: str) -> dict:
  """RUN's config.json as train.py wrote it; {} where it cannot be read (the curves need only
  metrics.jsonl)."""
  try:
    config = json.loads((paths.resolve(run) / "config.json").read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError):
    return {}
  return config if isinstance(config, dict) else {}


def _denoises(config: dict) -> bool:
  """Whether the config says config.objective="denoise" (its loss and accuracy are of the
  masked tokens, not of the task's labels)."""
  return config.get("objective") == "denoise"


def _model(config: dict) -> str | None:
  """config.model.name: the run's line takes the model's colour of every chart."""
  model = config.get("model")
  name = model.get("name") if isinstance(model, dict) else None
  return name if isinstance(name, str) else None


def read_curves(runs: list[str], warnings: list[str],
                models: dict[str, str | None] | None = None) -> dict[str, dict[str, list]]:
  """{run name: {metric: [(step, value), ...] by step}} of the PANELS' metrics (accuracies in
  %). A denoise run's name says that its figures are of masked tokens (DENOISE_LABEL). A run
  without any of them is left out with a warning; if no run has any, a UserError. `models`, if
  given, gets {run name: its model (config.json's model.name), None where not recorded}."""
  if len(set(runs)) < len(runs):
    raise UserError("a run is named twice; name each run once")
  curves = {}
  for run, name in zip(runs, run_names(runs)):
    config = _config(run)
    name += DENOISE_LABEL if _denoises(config) else ""
    found = {key: [] for key, _ in PANELS}
    for row in _rows(run):
      for key in found:
        if key in row:
          scale = 100.0 if key.endswith("accuracy") else 1.0
          found[key].append((row["step"], float(row[key]) * scale))
    if not any(found.values()):
      warnings.append(f"{run}: its metrics.jsonl has no loss or accuracy rows yet; left out")
      continue
    curves[name] = {key: sorted(points) for key, points in found.items()}
    if models is not None:
      models[name] = _model(config)
  if not curves:
    raise UserError(f"no run has a loss or accuracy row in its metrics.jsonl "
                    f"({', '.join(runs)}); nothing drawn")
  return curves
