"""Tables for eval.py: our accuracy and speed/memory next to the paper's Tables 1 and 2.

Pure Python + numpy (no JAX), so reports can be rebuilt from saved JSON on any machine.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
from typing import Any, Iterable

import numpy as np

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
TASKS5 = TASKS[:5]  # LRA's own average leaves Path-X out
TASK_TITLES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval",
               "image": "Image", "pathfinder": "Pathfinder", "pathx": "Path-X"}

# Paper order; registry names as used by the configs.
PAPER_MODELS = ("transformer", "local", "sparse_transformer", "longformer", "linformer",
                "reformer", "sinkhorn", "synthesizer", "bigbird", "linear_transformer",
                "performer")
MODEL_TITLES = {"transformer": "Transformer", "local": "Local Attention",
                "sparse_transformer": "Sparse Trans.", "longformer": "Longformer",
                "linformer": "Linformer", "reformer": "Reformer", "sinkhorn": "Sinkhorn Trans.",
                "synthesizer": "Synthesizer", "bigbird": "BigBird",
                "linear_transformer": "Linear Trans.", "performer": "Performer",
                "transformer_xl": "Transformer-XL", "nystromformer": "Nystromformer",
                "fnet": "FNet", "s4d": "S4D", "s5": "S5", "lru": "LRU"}


def _paper_row(*five: float) -> dict[str, float | None]:
  # Every model FAILed Path-X in the paper.
  return {**dict(zip(TASKS5, five)), "pathx": None}


# Paper Table 1, test accuracy in percent; None = FAIL.
PAPER_ACCURACY: dict[str, dict[str, float | None]] = {
    "transformer": _paper_row(36.37, 64.27, 57.46, 42.44, 71.40),
    "local": _paper_row(15.82, 52.98, 53.39, 41.46, 66.63),
    "sparse_transformer": _paper_row(17.07, 63.58, 59.59, 44.24, 71.71),
    "longformer": _paper_row(35.63, 62.85, 56.89, 42.22, 69.71),
    "linformer": _paper_row(35.70, 53.94, 52.27, 38.56, 76.34),
    "reformer": _paper_row(37.27, 56.10, 53.40, 38.07, 68.50),
    "sinkhorn": _paper_row(33.67, 61.20, 53.83, 41.23, 67.45),
    "synthesizer": _paper_row(36.99, 61.68, 54.67, 41.61, 69.45),
    "bigbird": _paper_row(36.05, 64.02, 59.29, 40.83, 74.87),
    "linear_transformer": _paper_row(16.13, 65.90, 53.09, 42.34, 75.30),
    "performer": _paper_row(18.01, 65.40, 53.82, 42.77, 77.05),
}
# The 5-task averages as printed in the paper. They match the row means except Sinkhorn's:
# its row averages 51.48, but 51.39 is what the paper prints and what others quote.
PAPER_AVG5: dict[str, float] = {
    "transformer": 54.39, "local": 46.06, "sparse_transformer": 51.24, "longformer": 53.46,
    "linformer": 51.36, "reformer": 50.67, "sinkhorn": 51.39, "synthesizer": 52.88,
    "bigbird": 55.01, "linear_transformer": 50.55, "performer": 51.41,
}

PAPER_LENGTHS = (1024, 2048, 3072, 4096)
# Paper Table 2: byte-level Text, batch 32, TPU v3 4x4. Sparse Transformer and Longformer
# were not measured (dense masks).
PAPER_SPEED: dict[str, dict[int, float]] = {
    m: dict(zip(PAPER_LENGTHS, v)) for m, v in {
        "transformer": (8.1, 4.9, 2.3, 1.4), "local": (9.2, 8.4, 7.4, 7.4),
        "linformer": (9.3, 9.1, 8.5, 7.7), "reformer": (4.4, 2.2, 1.5, 1.1),
        "sinkhorn": (9.1, 7.9, 6.6, 5.3), "synthesizer": (8.7, 5.7, 6.6, 1.9),
        "bigbird": (7.4, 3.9, 2.7, 1.5), "linear_transformer": (9.1, 9.3, 8.6, 7.8),
        "performer": (9.5, 9.4, 8.7, 8.0)}.items()}
PAPER_MEMORY: dict[str, dict[int, float]] = {
    m: dict(zip(PAPER_LENGTHS, v)) for m, v in {
        "transformer": (0.85, 2.65, 5.51, 9.48), "local": (0.42, 0.76, 1.06, 1.37),
        "linformer": (0.37, 0.55, 0.99, 0.99), "reformer": (0.48, 0.99, 1.53, 2.28),
        "sinkhorn": (0.47, 0.83, 1.13, 1.48), "synthesizer": (0.65, 1.98, 4.09, 6.99),
        "bigbird": (0.77, 1.49, 2.18, 2.88), "linear_transformer": (0.37, 0.57, 0.80, 1.03),
        "performer": (0.37, 0.59, 0.82, 1.06)}.items()}

PATHX_FAIL_SCORE = 50.0  # the later papers' convention for a failed (chance-level) Path-X
GB = 1e9

log = logging.getLogger(__name__)


def model_order(names: Iterable[str]) -> list[str]:
  """Paper order first, then any other model alphabetically."""
  names = set(names)
  return [m for m in PAPER_MODELS if m in names] + sorted(names - set(PAPER_MODELS))


def _finite(x: Any) -> float | None:
  if x is None:
    return None
  try:
    x = float(x)
  except (TypeError, ValueError):
    return None
  return x if math.isfinite(x) else None


# ----------------------------------------------------------------------------- accuracy

def _find_results(path: str, warnings: list[str]) -> list[str]:
  """results.json files under `path`; unfinished run directories go to `warnings`."""
  if os.path.isfile(path):
    if os.path.basename(path) == "results.json":
      return [path]
    warnings.append(f"{path}: not a directory or results.json; skipped")
    return []
  if not os.path.isdir(path):
    warnings.append(f"{path}: does not exist")
    return []
  found, start = [], len(warnings)
  for root, dirs, files in os.walk(path):
    dirs.sort()  # deterministic order, so ties resolve the same way every time
    if "results.json" in files:
      found.append(os.path.join(root, "results.json"))
      dirs[:] = []  # a run directory's checkpoints hold no further runs
    elif "metrics.jsonl" in files:
      # The trainer writes metrics.jsonl from the start and results.json only at the end.
      warnings.append(f"{root}: no results.json (run unfinished or failed)")
      dirs[:] = []
  if not found and len(warnings) == start:
    warnings.append(f"{path}: no results.json found")
  return found


def collect_results(workdirs: list[str], warnings: list[str] | None = None) -> list[dict]:
  """Reads every results.json under the given run or parent directories.

  Problems (missing results, unreadable files, duplicate runs) are appended to `warnings`
  (and logged) instead of raised, so one broken run does not hide the others. Of two runs of
  the same (model, task) the one with the higher best_val_accuracy is kept: choosing by test
  accuracy would select on the test set. The kept result gets "workdir" and, when it won a
  tie-break, "superseded" (the other run directories).
  """
  warnings = [] if warnings is None else warnings
  start = len(warnings)
  kept: dict[tuple[str, str], dict] = {}
  for workdir in workdirs:
    for file in _find_results(workdir, warnings):
      try:
        with open(file) as f:
          result = json.load(f)
        key = (str(result["model"]), str(result["task"]))
        float(result["test_accuracy"])
      except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.append(f"{file}: unreadable results ({type(e).__name__}: {e})")
        continue
      result = {**result, "workdir": os.path.dirname(os.path.abspath(file))}
      old = kept.get(key)
      if old is None:
        kept[key] = result
        continue
      new_val = _finite(result.get("best_val_accuracy"))
      old_val = _finite(old.get("best_val_accuracy"))
      better = new_val is not None and (old_val is None or new_val > old_val)
      winner, loser = (result, old) if better else (old, result)
      winner["superseded"] = (list(winner.get("superseded", [])) + [loser["workdir"]] +
                              list(loser.get("superseded", [])))
      kept[key] = winner
      warnings.append(
          f"{key[0]}/{key[1]}: two runs; kept {winner['workdir']} (best val "
          f"{winner.get('best_val_accuracy')}) over {loser['workdir']} (best val "
          f"{loser.get('best_val_accuracy')})")
  for w in warnings[start:]:
    log.warning(w)
  return sorted(kept.values(), key=lambda r: (r["model"], r["task"]))


def _config_summary(config: dict) -> str:
  """Short 'how was it configured' string: layers, widths, batch, sequence length."""
  m = config.get("model", {}) or {}
  parts = []
  for key, fmt in (("num_layers", "L{}"), ("emb_dim", "emb{}"), ("num_heads", "h{}"),
                   ("qkv_dim", "qkv{}"), ("mlp_dim", "mlp{}")):
    if key in m:
      parts.append(fmt.format(m[key]))
  attention = m.get("attention") or {}
  if attention:
    parts.append("attn(" + ",".join(f"{k}={v}" for k, v in sorted(attention.items())) + ")")
  if "dtype" in m:
    parts.append(str(m["dtype"]))
  if "batch_size" in config:
    parts.append(f"bs{config['batch_size']}")
  data = config.get("data", {}) or {}
  for key in ("max_len", "max_length"):
    if key in data:
      parts.append(f"len{data[key]}")
      break
  if data.get("data_dir"):
    parts.append(f"data={os.path.basename(str(data['data_dir']).rstrip('/'))}")
  return " ".join(parts)


def _hardware_summary(hw: dict) -> str:
  kind = hw.get("device_kind") or hw.get("platform") or "?"
  text = f"{kind} x{hw.get('device_count', '?')}"
  if (hw.get("process_count") or 1) > 1:
    text += f" ({hw['process_count']} hosts)"
  return text


def _provenance(result: dict) -> dict:
  return {
      "workdir": result.get("workdir"),
      "num_train_steps": result.get("num_train_steps"),
      "best_step": result.get("best_step"),
      "best_val_accuracy": _pct(result.get("best_val_accuracy")),
      "test_count": result.get("test_count"),
      "majority_rate": _pct(result.get("test_majority_rate")),
      "train_time_s": result.get("train_time_s"),
      "config": _config_summary(result.get("config") or {}),
      "hardware": _hardware_summary(result.get("hardware") or {}),
      "superseded": list(result.get("superseded", [])),
  }


def _pct(fraction: Any) -> float | None:
  x = _finite(fraction)
  return None if x is None else 100.0 * x


def _avgs(scores: dict[str, float | None]) -> tuple[float | None, float | None, bool]:
  """(avg5, avg6, Path-X assumed): None wherever one of the five is missing."""
  five = [scores.get(t) for t in TASKS5]
  if any(s is None for s in five):
    return None, None, False
  pathx = scores.get("pathx")
  assumed = pathx is None
  avg6 = float(np.mean(five + [PATHX_FAIL_SCORE if assumed else pathx]))
  return float(np.mean(five)), avg6, assumed


def accuracy_table(results: list[dict], include_paper_models: bool = True) -> dict:
  """Rows per model: our test accuracy (%) next to the paper's, plus both averages.

  Missing cells stay None (never filled in). avg6 counts a missing Path-X as 50 and says so
  in `avg6_pathx_assumed`; a Path-X run is used at its own figure whatever it reached.
  """
  by_model: dict[str, dict[str, dict]] = {}
  for r in results:
    by_model.setdefault(r["model"], {})[r["task"]] = r
  models = model_order(list(by_model) + (list(PAPER_MODELS) if include_paper_models else []))
  rows = []
  for model in models:
    paper = PAPER_ACCURACY.get(model)
    cells = {}
    for task in TASKS:
      result = by_model.get(model, {}).get(task)
      ours = _pct(result["test_accuracy"]) if result else None
      paper_value = paper.get(task) if paper else None
      cells[task] = {
          "ours": ours,
          "paper": paper_value,
          "paper_fail": paper is not None and paper_value is None,
          "diff": None if ours is None or paper_value is None else ours - paper_value,
          "run": _provenance(result) if result else None,
      }
    avg5, avg6, assumed = _avgs({t: c["ours"] for t, c in cells.items()})
    paper_avg5 = PAPER_AVG5.get(model)
    if paper_avg5 is None and paper is not None:
      paper_avg5, _, _ = _avgs(paper)
    paper_avg6 = None
    if paper is not None:
      _, paper_avg6, _ = _avgs(paper)
    rows.append({
        "model": model, "cells": cells,
        "avg5": avg5, "avg6": avg6, "avg6_pathx_assumed": assumed,
        "paper_avg5": paper_avg5, "paper_avg6": paper_avg6,
        "avg5_diff": None if avg5 is None or paper_avg5 is None else avg5 - paper_avg5,
        "avg6_diff": None if avg6 is None or paper_avg6 is None else avg6 - paper_avg6,
    })
  return {"tasks": list(TASKS), "rows": rows}


def _fmt(x: float | None, digits: int = 1) -> str:
  return "-" if x is None else f"{x:.{digits}f}"


def _compare(ours: float | None, paper: float | None, paper_fail: bool = False,
             diff: float | None = None, mark: str = "") -> str:
  """'44.9 (36.4, +8.5)'; '-' for a missing figure; 'FAIL' for the paper's failures."""
  text = _fmt(ours) + mark
  if paper_fail:
    return f"{text} (FAIL)"
  if paper is None:
    return text
  if diff is None:
    return f"{text} ({paper:.1f})"
  return f"{text} ({paper:.1f}, {diff:+.1f})"


def accuracy_markdown(table: dict) -> str:
  """Markdown like the paper's Table 1, then how each of our cells was obtained."""
  tasks = table["tasks"]
  head = ["Model"] + [TASK_TITLES.get(t, t) for t in tasks] + ["Avg5", "Avg6"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  any_assumed = False
  for row in table["rows"]:
    cells = [MODEL_TITLES.get(row["model"], row["model"])]
    for task in tasks:
      c = row["cells"][task]
      cells.append(_compare(c["ours"], c["paper"], c["paper_fail"], c["diff"]))
    cells.append(_compare(row["avg5"], row["paper_avg5"], diff=row["avg5_diff"]))
    mark = "*" if row["avg6"] is not None and row["avg6_pathx_assumed"] else ""
    any_assumed |= bool(mark)
    cells.append(_compare(row["avg6"], row["paper_avg6"], diff=row["avg6_diff"], mark=mark))
    lines.append("| " + " | ".join(cells) + " |")
  lines += ["", "Cells: our test accuracy % (paper %, ours - paper); `-` = not run or not "
            "finished; FAIL = the paper's model did not learn the task. Avg5 = mean of the five "
            "tasks without Path-X; Avg6 = mean of six with a failed Path-X counted as 50. "
            "Averages are given only when all five other tasks are present."]
  if any_assumed:
    lines.append("\\* no Path-X run: counted as 50 in Avg6.")
  runs = [(row["model"], t, row["cells"][t]["run"]) for row in table["rows"] for t in tasks
          if row["cells"][t]["run"]]
  if runs:
    lines += ["", "How each cell was obtained:", ""]
    for model, task, run in runs:
      best = (f"best val {_fmt(run['best_val_accuracy'])}% at step {run['best_step']}"
              if run["best_step"] is not None else "no validation")
      text = (f"- {MODEL_TITLES.get(model, model)} / {TASK_TITLES.get(task, task)}: "
              f"{run['num_train_steps']} steps, {best}, {run['config']}, on {run['hardware']}")
      if run["test_count"] is not None:
        text += f"; {run['test_count']} test examples"
      if run["majority_rate"] is not None:
        text += f" (majority class {_fmt(run['majority_rate'])}%)"
      text += f"; `{run['workdir']}`"
      if run["superseded"]:
        text += f" (chosen by validation over {', '.join(run['superseded'])})"
      lines.append(text)
  return "\n".join(lines) + "\n"


def accuracy_rows(table: dict) -> list[dict]:
  """One flat row per (model, task) with a result or a paper figure, for CSV."""
  out = []
  for row in table["rows"]:
    for task in table["tasks"]:
      c = row["cells"][task]
      if c["ours"] is None and c["paper"] is None and not c["paper_fail"]:
        continue
      run = c["run"] or {}
      out.append({"model": row["model"], "task": task, "ours": c["ours"],
                  "paper": "FAIL" if c["paper_fail"] else c["paper"], "diff": c["diff"],
                  **{k: run.get(k) for k in ("num_train_steps", "best_step",
                                             "best_val_accuracy", "config", "hardware",
                                             "workdir")}})
    out.append({"model": row["model"], "task": "avg5", "ours": row["avg5"],
                "paper": row["paper_avg5"], "diff": row["avg5_diff"]})
    out.append({"model": row["model"], "task": "avg6", "ours": row["avg6"],
                "paper": row["paper_avg6"], "diff": row["avg6_diff"],
                "config": "Path-X counted as 50" if row["avg6_pathx_assumed"] else None})
  return out


# ----------------------------------------------------------------------------- speed

def _status(row: dict) -> str:
  """'ok', 'OOM' or 'error' (anything else the benchmark wrote counts as an error)."""
  s = str(row.get("status", "")).strip()
  if s == "ok":
    return "ok"
  if s.upper() == "OOM":
    return "OOM"
  return "error"


def memory_of(row: dict) -> tuple[float | None, str | None]:
  """(bytes, measure): the device-reported peak where present, else XLA's compiled estimate."""
  peak = _finite(row.get("peak_memory_bytes"))
  if peak is not None:
    return peak, "peak"
  compiled = _finite(row.get("compiled_memory_bytes"))
  if compiled is not None:
    return compiled, "compiled"
  return None, None


def speed_tables(rows: list[dict], baseline: str = "transformer") -> dict:
  """Per (model, length): speed with the ratio to `baseline`, memory, FLOPs.

  A later row for the same (model, length) replaces an earlier one (a re-measurement).
  Ratios exist only where both this cell and the baseline's are ok.
  """
  latest: dict[tuple[str, int], dict] = {}
  notes = []
  for row in rows:
    key = (str(row["model"]), int(row["length"]))
    if key in latest:
      notes.append(f"{key[0]} at {key[1]}: measured twice; the later row is used")
    latest[key] = row
  lengths = sorted({k[1] for k in latest})
  models = model_order({k[0] for k in latest})
  speed: dict[str, dict[int, dict]] = {}
  memory: dict[str, dict[int, dict]] = {}
  flops: dict[str, dict[int, dict]] = {}
  for model in models:
    speed[model], memory[model], flops[model] = {}, {}, {}
    for length in lengths:
      row = latest.get((model, length))
      if row is None:
        continue
      status = _status(row)
      ok = status == "ok"
      base = latest.get((baseline, length))
      steps = _finite(row.get("steps_per_s")) if ok else None
      base_steps = (_finite(base.get("steps_per_s"))
                    if base is not None and _status(base) == "ok" else None)
      ratio = steps / base_steps if steps is not None and base_steps else None
      paper = PAPER_SPEED.get(model, {}).get(length)
      paper_base = PAPER_SPEED.get(baseline, {}).get(length)
      speed[model][length] = {
          "status": status, "detail": str(row.get("status", "")),
          "steps_per_s": steps, "step_time_s": _finite(row.get("step_time_s")) if ok else None,
          "ratio": None if model == baseline else ratio,
          "paper": paper,
          "paper_ratio": (paper / paper_base if model != baseline and paper is not None
                          and paper_base else None),
      }
      mem, measure = memory_of(row) if ok else (None, None)
      memory[model][length] = {"status": status, "gb": None if mem is None else mem / GB,
                               "measure": measure,
                               "paper": PAPER_MEMORY.get(model, {}).get(length)}
      achieved = _finite(row.get("achieved_flops_per_s")) if ok else None
      peak = _finite(row.get("matmul_peak_flops_per_s"))
      flops[model][length] = {
          "status": status,
          "flops_per_step": _finite(row.get("flops_per_step")) if ok else None,
          "achieved_flops_per_s": achieved,
          "matmul_peak_flops_per_s": peak,
          "fraction_of_peak": achieved / peak if achieved is not None and peak else None,
      }
  measures = {c["measure"] for m in memory.values() for c in m.values() if c["measure"]}
  return {"baseline": baseline, "lengths": lengths, "models": models, "speed": speed,
          "memory": memory, "flops": flops, "memory_measures": sorted(measures),
          "notes": notes}


def _length_title(length: int) -> str:
  return f"{length // 1024}K" if length % 1024 == 0 else str(length)


def _si(x: float, unit: str) -> str:
  """3 significant digits with an SI prefix: 1.23 TFLOP."""
  for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= factor:
      return f"{x / factor:.3g} {prefix}{unit}"
  return f"{x:.3g} {unit}"


def _status_cell(cell: dict | None) -> str | None:
  """The text of a cell that has no number: missing, OOM or error."""
  if cell is None:
    return "-"
  if cell["status"] != "ok":
    return cell["status"]
  return None


_MEASURE_TEXT = {"peak": "device-reported peak memory",
                 "compiled": "XLA compiled memory analysis (arguments + outputs + temporaries)"}


def speed_markdown(tables: dict, machine: dict | None = None) -> str:
  """Three markdown tables: steps/s with ratios, memory, FLOPs and achieved FLOP/s."""
  lengths, models, baseline = tables["lengths"], tables["models"], tables["baseline"]
  head = "| Model | " + " | ".join(_length_title(n) for n in lengths) + " |"
  rule = "|---|" + "---|" * len(lengths)
  title = lambda m: MODEL_TITLES.get(m, m)  # noqa: E731
  out = []
  if machine:
    peak = _finite(machine.get("matmul_peak_flops_per_s"))
    out.append(f"Machine: {machine.get('device_kind', '?')} x{machine.get('device_count', '?')} "
               f"({machine.get('platform', '?')}), JAX {machine.get('jax_version', '?')}, "
               f"batch {machine.get('batch', '?')}"
               + (f", measured matmul peak {_si(peak, 'FLOP/s')}" if peak else "")
               + (f", model {json.dumps(machine['model_size'])}"
                  if machine.get("model_size") else "") + ".")
    out.append("")

  out += [f"Training steps per second (ratio to {title(baseline)} at the same length; "
          "paper's ratio on TPU v3 where it has one)", "", head, rule]
  for model in models:
    cells = []
    for n in lengths:
      c = tables["speed"][model].get(n)
      text = _status_cell(c)
      if text is None:
        text = _fmt(c["steps_per_s"])
        extra = []
        if c["ratio"] is not None:
          extra.append(f"{c['ratio']:.1f}x")
        if c["paper_ratio"] is not None:
          extra.append(f"paper {c['paper_ratio']:.1f}x")
        if extra:
          text += f" ({'; '.join(extra)})"
      cells.append(text)
    out.append(f"| {title(model)} | " + " | ".join(cells) + " |")

  measures = tables["memory_measures"]
  mixed = len(measures) > 1
  if mixed:
    what = f"{_MEASURE_TEXT['peak']}; † = {_MEASURE_TEXT['compiled']} where no peak is reported"
  else:
    what = _MEASURE_TEXT[measures[0]] if measures else "no memory figures"
  out += ["", f"Memory per device in GB of 10^9 bytes: {what}. The paper's TPU v3 figure in "
          "parentheses.", "", head, rule]
  for model in models:
    cells = []
    for n in lengths:
      c = tables["memory"][model].get(n)
      text = _status_cell(c)
      if text is None:
        text = _fmt(c["gb"], 2)
        if mixed and c["measure"] == "compiled":
          text += "†"
        if c["paper"] is not None:
          text += f" ({c['paper']:.2f})"
      cells.append(text)
    out.append(f"| {title(model)} | " + " | ".join(cells) + " |")

  out += ["", "FLOPs per training step (XLA cost analysis); achieved FLOP/s (fraction of the "
          "measured matmul peak)", "", head, rule]
  for model in models:
    cells = []
    for n in lengths:
      c = tables["flops"][model].get(n)
      text = _status_cell(c)
      if text is None:
        parts = []
        if c["flops_per_step"] is not None:
          parts.append(_si(c["flops_per_step"], "FLOP"))
        if c["achieved_flops_per_s"] is not None:
          rate = _si(c["achieved_flops_per_s"], "FLOP/s")
          if c["fraction_of_peak"] is not None:
            rate += f" ({100 * c['fraction_of_peak']:.0f}%)"
          parts.append(rate)
        text = ", ".join(parts) or "-"
      cells.append(text)
    out.append(f"| {title(model)} | " + " | ".join(cells) + " |")
  out += ["", "OOM = out of memory; error = the measurement failed (see the JSON for the "
          "message); - = not measured."]
  out += [f"- {n}" for n in tables["notes"]]
  return "\n".join(out) + "\n"


def bubble_inputs(acc_table: dict, tables: dict, average: str = "avg5",
                  length: int | None = None
                  ) -> tuple[dict[str, float], dict[str, float], dict[str, float], int | None]:
  """(accuracy, steps/s, memory GB, length) per model for charts.bubble_chart.

  Speed and memory come from `length` (default the longest measured); models without an ok
  measurement or an average there are simply absent, so the chart can list them as left out.
  """
  lengths = tables["lengths"]
  if length is None:
    length = lengths[-1] if lengths else None
  accuracy = {r["model"]: r[average] for r in acc_table["rows"] if r[average] is not None}
  speed, memory = {}, {}
  for model in tables["models"]:
    s = tables["speed"][model].get(length)
    m = tables["memory"][model].get(length)
    if s and s["steps_per_s"] is not None:
      speed[model] = s["steps_per_s"]
    if m and m["gb"] is not None:
      memory[model] = m["gb"]
  return accuracy, speed, memory, length


# ----------------------------------------------------------------------------- files

def _plain(obj: Any) -> Any:
  """JSON-safe copy: numpy scalars/arrays to Python, non-finite floats to None."""
  if isinstance(obj, dict):
    return {str(k): _plain(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_plain(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return _plain(obj.tolist())
  if isinstance(obj, np.generic):
    return _plain(obj.item())
  if isinstance(obj, float) and not math.isfinite(obj):
    return None
  return obj


def write_json(path: str, obj: Any) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(_plain(obj), f, indent=2, allow_nan=False)
    f.write("\n")
  os.replace(tmp, path)  # a reader never sees half a file


def write_csv(path: str, rows: list[dict]) -> None:
  """Columns = union of the rows' keys in first-seen order; nested values as JSON text."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  columns: dict[str, None] = {}
  for row in rows:
    columns.update(dict.fromkeys(row))
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(columns))
    writer.writeheader()
    for row in rows:
      row = _plain(row)
      writer.writerow({k: ("" if v is None else json.dumps(v) if isinstance(v, (dict, list))
                           else v) for k, v in row.items()})
