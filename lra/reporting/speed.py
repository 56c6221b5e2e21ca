"""The speed, memory and FLOP tables of a benchmark run, next to the paper's Table 2."""
from __future__ import annotations

from lra.reporting import rounds
from lra.reporting.numbers import finite
from lra.reporting.paper import (PAPER_MEMORY, PAPER_SPEED, TASK_TITLES, TASKS, TASKS5,
                                  model_order, model_title)

GB = 1e9


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
  peak = finite(row.get("peak_memory_bytes"))
  if peak is not None:
    return peak, "peak"
  compiled = finite(row.get("compiled_memory_bytes"))
  if compiled is not None:
    return compiled, "compiled"
  return None, None


def _speed_cell(model: str, row: dict, base: dict | None, baseline: str, length: int) -> dict:
  """One speed cell: the median steps/s with its min-max over the rounds (lra.reporting.rounds),
  the ratio of the medians to the baseline's and whether their ranges overlap (`ratio_tied`:
  True, False, or None where either has no spread), the paper's figure and ratio."""
  ok = _status(row) == "ok"
  figure = rounds.spread(row) if ok else {"steps_per_s": None, "low": None, "high": None,
                                           "rounds": None}
  base_ok = base is not None and _status(base) == "ok"
  base_figure = rounds.spread(base) if base_ok else {"steps_per_s": None}
  steps, base_steps = figure["steps_per_s"], base_figure["steps_per_s"]
  ratio = steps / base_steps if steps is not None and base_steps else None
  paper = PAPER_SPEED.get(model, {}).get(length)
  paper_base = PAPER_SPEED.get(baseline, {}).get(length)
  own = model == baseline
  return {
      "status": _status(row), "detail": str(row.get("status", "")), **figure,
      "step_time_s": 1.0 / steps if steps else None,
      "ratio": None if own else ratio,
      "ratio_tied": None if own or ratio is None else rounds.overlap(figure, base_figure),
      "paper": paper,
      "paper_ratio": (paper / paper_base if not own and paper is not None and paper_base
                      else None),
  }


def _ties(speed: dict[str, dict[int, dict]], lengths: list[int]) -> dict:
  """{length: pairs of models whose ranges overlap} and {length: ok models without a spread}."""
  tied, unspread = {}, {}
  for n in lengths:
    ok = {m: cells[n] for m, cells in speed.items() if n in cells and cells[n]["status"] == "ok"}
    tied[n] = rounds.ties(ok)
    unspread[n] = [m for m, c in ok.items() if c["low"] is None]
  return {"ties": tied, "unspread": unspread}


def speed_tables(rows: list[dict], baseline: str = "transformer") -> dict:
  """Per (model, length): speed (the median over the rounds with its min-max) with the ratio
  to `baseline`, memory, FLOPs; per length the pairs of models that the speed cannot rank.

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
      speed[model][length] = _speed_cell(model, row, latest.get((baseline, length)), baseline,
                                         length)
      status = speed[model][length]["status"]
      ok = status == "ok"
      mem, measure = memory_of(row) if ok else (None, None)
      memory[model][length] = {"status": status, "gb": None if mem is None else mem / GB,
                               "measure": measure,
                               "paper": PAPER_MEMORY.get(model, {}).get(length)}
      achieved = finite(row.get("achieved_flops_per_s")) if ok else None
      peak = finite(row.get("matmul_peak_flops_per_s"))
      flops[model][length] = {
          "status": status,
          "flops_per_step": finite(row.get("flops_per_step")) if ok else None,
          "achieved_flops_per_s": achieved,
          "matmul_peak_flops_per_s": peak,
          "fraction_of_peak": achieved / peak if achieved is not None and peak else None,
      }
  measures = {c["measure"] for m in memory.values() for c in m.values() if c["measure"]}
  return {"baseline": baseline, "lengths": lengths, "models": models, "speed": speed,
          "memory": memory, "flops": flops, "memory_measures": sorted(measures),
          "notes": notes, **_ties(speed, lengths)}


def score(row: dict, average: str) -> float | None:
  """An accuracy-table row's figure for the chart: its avg5 or avg6, or one task's cell."""
  cells = row.get("cells") or {}
  return cells[average]["ours"] if average in cells else row.get(average)


def bubble_refusal(acc_table: dict, tables: dict, average: str) -> str | None:
  """Why the bubble chart of `average` would be empty (None when it draws a model): no model
  has a run and a measurement, or none of those has the average; then it names the --average
  to use instead, a task that every measured model ran (else the one most of them ran)."""
  accuracy, speed, memory, length = bubble_inputs(acc_table, tables, average)
  if set(accuracy) & set(speed) & set(memory):
    return None
  rows = {r["model"]: r for r in acc_table["rows"]
          if any(c["ours"] is not None for c in r["cells"].values())}
  both = sorted(set(rows) & set(speed) & set(memory))
  if not both:
    return (f"no model has both a finished run ({', '.join(sorted(rows)) or 'none'}) and a "
            f"speed and memory figure at {length} tokens ({', '.join(sorted(speed)) or 'none'})"
            f"; measure the models that ran: eval.py speed --models={','.join(sorted(rows))}")
  tasks = list(acc_table["tasks"])
  have = {t: sum(rows[m]["cells"][t]["ours"] is not None for m in both) for t in tasks}
  best = max(tasks, key=lambda t: have[t])  # the first of the most common
  which = ("a task every measured model ran" if have[best] == len(both) else
           f"{have[best]} of the {len(both)} measured models ran it")
  # avg6 too needs the five: a missing Path-X counts as 50.
  over = average if average in tasks else "each of the five tasks but Path-X"
  return (f"--average={average}: none of the measured models ({', '.join(both)}) has a run "
          f"of {over}; use --average={best} ({which})")


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
  accuracy = {r["model"]: score(r, average) for r in acc_table["rows"]
              if score(r, average) is not None}
  speed, memory = {}, {}
  for model in tables["models"]:
    s = tables["speed"][model].get(length)
    m = tables["memory"][model].get(length)
    if s and s["steps_per_s"] is not None:
      speed[model] = s["steps_per_s"]
    if m and m["gb"] is not None:
      memory[model] = m["gb"]
  return accuracy, speed, memory, length


def size_note(machine: dict, found: list[dict], length: int | None) -> str | None:
  """A line for the bubble chart when speed and memory were measured with another model size
  than (some of) the accuracy runs used; None when they agree."""
  size = machine.get("model_size") or {}

  def setting(result: dict, key: str):  # 'attention.k' for a mixer setting
    node = (result.get("config") or {}).get("model") or {}
    for part in key.split("."):
      node = node.get(part) if isinstance(node, dict) else None
    return node
  differ = sorted({r["model"] for r in found for key, value in size.items()
                   if setting(r, key) != value})
  if not size or not differ:
    return None
  shown = ", ".join(f"{k}={v}" for k, v in size.items())
  return (f"Speed and memory measured with one model size for every model ({shown}; batch "
          f"{machine.get('batch', '?')}, {length} tokens), not the sizes of the accuracy runs "
          f"of {', '.join(differ)}")


def steps_note(acc_table: dict, average: str, models: set[str]) -> str | None:
  """The bubble chart's line on the steps its points' runs (`models`) trained (results.json
  num_train_steps) on the tasks of its `average`: one figure where they agree (per task where
  the tasks differ); where, on a task, the runs differ, those tasks' figures per model (their
  accuracies are not of equal training); None where no run records them."""
  tasks = [average] if average in TASKS else list(TASKS5 if average == "avg5" else TASKS)
  found = {}
  for task in tasks:
    steps = {row["model"]: row["cells"][task]["run"].get("num_train_steps")
             for row in acc_table["rows"] if row["model"] in models and row["cells"][task]["run"]}
    if steps:
      found[task] = steps
  parts = [f"{TASK_TITLES[task]}: " + ", ".join(
      f"{model_title(m)} {'?' if n is None else f'{n:,}'}" for m, n in steps.items())
      for task, steps in found.items() if len(set(steps.values())) > 1]
  if parts:
    return "Trained for different numbers of steps (num_train_steps): " + "; ".join(parts)
  agreed = {task: n for task, steps in found.items() for n in set(steps.values())
            if n is not None}
  if not agreed:
    return None
  if len(set(agreed.values())) == 1:
    return f"Runs trained for {next(iter(agreed.values())):,} steps (num_train_steps)"
  return "Runs trained for (num_train_steps): " + "; ".join(
      f"{TASK_TITLES[task]} {n:,} steps" for task, n in agreed.items())
