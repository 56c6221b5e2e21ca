"""The table of the tasks beyond LRA (MQAR, lra/data/mqar.py): a row per model that ran one, a
column per such task, written under LRA's table by eval.py accuracy and the grid. Never in
LRA's rows or averages (Avg5, Avg6 stay over LRA's tasks), and no paper figure beside it (the
LRA paper has none; Zoology's are curves over widths, not one number per model).

A cell is built as LRA's are (lra.reporting.accuracy: the test accuracy, a mean over seeds,
the run's provenance); `*` marks a run that is not on the task's full data with its base
config (configs/mqar.py), as comparable.differences finds it.
"""
from __future__ import annotations

from lra.reporting import comparable, markdown
from lra.reporting.numbers import fmt
from lra.reporting.paper import EXTRA_TASKS, TASK_TITLES, model_order, model_title


def beyond_table(results: list[dict], *, references: comparable.References, cell,
                 provenance) -> dict | None:
  """{"tasks", "rows": [{"model", "cells": {task: cell}}]} of the runs on tasks beyond LRA;
  None when none of `results` is one. `cell` and `provenance`: lra.reporting.accuracy's, so a
  cell has the form of LRA's (passed in: accuracy imports this module)."""
  runs = [r for r in results if r["task"] in EXTRA_TASKS]
  if not runs:
    return None
  tasks = [t for t in EXTRA_TASKS if any(r["task"] == t for r in runs)]
  by_model: dict[str, dict[str, dict]] = {}
  for r in runs:
    by_model.setdefault(r["model"], {})[r["task"]] = r
  rows = []
  for model in model_order(by_model):
    cells = {}
    for task in tasks:
      result = by_model[model].get(task)
      cells[task] = {**(cell(result) if result else {"ours": None}),
                     "not_comparable": (comparable.differences(result, references)
                                        if result else []),
                     "run": provenance(result) if result else None}
    rows.append({"model": model, "cells": cells})
  return {"tasks": tasks, "rows": rows}


def beyond_rows(table: dict | None) -> list[dict]:
  """One flat row per (model, task) run, for accuracy.csv (beside LRA's rows)."""
  out = []
  for row in (table or {}).get("rows", []):
    for task, c in row["cells"].items():
      if c["ours"] is None:
        continue
      run = c["run"]
      out.append({"model": row["model"], "task": task, "ours": c["ours"],
                  "std": c.get("std"), "n": c.get("n"),
                  "not_comparable": "; ".join(c["not_comparable"]) or None,
                  **{k: run.get(k) for k in ("num_train_steps", "best_step",
                                             "best_val_accuracy", "config", "hardware",
                                             "workdir")}})
  return out


def beyond_markdown(table: dict) -> str:
  """The table in markdown, then how each cell was obtained."""
  tasks = table["tasks"]
  head = ["Model"] + [TASK_TITLES.get(t, t) for t in tasks]
  lines = ["Beyond LRA (not in Avg5 or Avg6; no paper figures):", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  notes, runs = [], []
  for row in table["rows"]:
    title = model_title(row["model"])
    cells = [title]
    for task in tasks:
      c = row["cells"][task]
      text = markdown._ours_text(c["ours"], c.get("std"), c.get("n", 1))
      if c["ours"] is not None and c["not_comparable"]:
        text += "*"
        notes.append(f"- {title} / {TASK_TITLES.get(task, task)}: "
                     f"{markdown._compact(c['not_comparable'])}")
      cells.append(text)
      if c["run"]:
        runs.append(markdown._run_line(row["model"], task, c["run"]))
    lines.append("| " + " | ".join(cells) + " |")
  lines += ["", "Cells: test accuracy % (MQAR: of the queries answered right, per position); "
            f"`{fmt(None)}` = not run or not finished."]
  if notes:
    lines += ["", "\\* not the task's full data and its base config (configs/TASK.py). "
              "Differences:", ""] + notes
  return "\n".join(lines + ["", "How each cell was obtained:", ""] + runs) + "\n"
