"""The accuracy table: our test accuracy next to the paper's Table 1, with both averages."""
from __future__ import annotations

import os

import numpy as np

from lra import paths
from lra.data.tasks import FACTS
from lra.reporting import chance, comparable, files, markdown, seeds, sweeps
from lra.reporting.numbers import pct
from lra.reporting.results import CHECKPOINT_RULE, CHOICE_RULE, checkpoint_rule
from lra.reporting.paper import (PAPER_ACCURACY, PAPER_AVG5, PAPER_MODELS, PATHX_FAIL_SCORE,
                                 TASKS, TASKS5, model_order)
from lra.reporting.paper import SPT_ACCURACY  # [SPT] Amos et al.'s figures beside SPT rows


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
      "best_val_accuracy": pct(result.get("best_val_accuracy")),
      "test_count": result.get("test_count"),
      "train_count": result.get("train_count"),
      "majority_rate": pct(result.get("test_majority_rate")),
      "train_time_s": result.get("train_time_s"),
      "evaluation_sample": comparable.sample_text(result),
      "config": _config_summary(result.get("config") or {}),
      "hardware": _hardware_summary(result.get("hardware") or {}),
      "superseded": list(result.get("superseded", [])),
      "tested_checkpoint": result.get("tested_checkpoint"),
      "sweep": result.get("sweep"),  # the points of a --sweep and the one chosen (sweeps.py)
      # Each seed's run of a pooled cell ([] for one run), judged as one run is.
      "seeds": [{**{k: v for k, v in s.items() if k != "test_majority_rate"},
                 "test_accuracy": pct(s["test_accuracy"]),
                 "best_val_accuracy": pct(s["best_val_accuracy"]),
                 "majority_rate": pct(s.get("test_majority_rate")),
                 "at_chance": chance.at_chance(s), "checkpoint": checkpoint_rule(s)}
                for s in result.get("seeds", [])],
  }


def _ours(result: dict) -> dict:
  """The cell's figure: the test accuracy %, or over pooled seeds their mean, with the sample
  standard deviation (None for one run) and n; how many of its n runs are at chance
  ("at_chance", by chance.CHANCE_RULE, of "chance_judged" runs that record what it needs;
  None where none does) and the checkpoint they tested ("checkpoint": best, last, unrecorded,
  or mixed; "checkpoint_counts": runs per rule)."""
  runs = result.get("seeds") or [result]
  values = [pct(s["test_accuracy"]) for s in runs]
  mean, std = seeds.mean_std(values)
  judged = [j for j in (chance.at_chance(s) for s in runs) if j is not None]
  rules = [checkpoint_rule(s) for s in runs]
  counts = {rule: rules.count(rule) for rule in dict.fromkeys(rules)}
  return {"ours": mean, "std": std, "n": len(values),
          "at_chance": sum(judged) if judged else None, "chance_judged": len(judged),
          "checkpoint": rules[0] if len(counts) == 1 else "mixed",
          "checkpoint_counts": counts}


def _row_checkpoint(cells: dict) -> str | None:
  """The rule of a row's cells with a run: theirs where they agree, else "mixed"; None for a
  row without a run."""
  rules = {c["checkpoint"] for c in cells.values() if c["ours"] is not None}
  return None if not rules else rules.pop() if len(rules) == 1 else "mixed"


def _avgs(scores: dict[str, float | None]) -> tuple[float | None, float | None, bool]:
  """(avg5, avg6, Path-X assumed): None wherever one of the five is missing."""
  five = [scores.get(t) for t in TASKS5]
  if any(s is None for s in five):
    return None, None, False
  pathx = scores.get("pathx")
  assumed = pathx is None
  avg6 = float(np.mean(five + [PATHX_FAIL_SCORE if assumed else pathx]))
  return float(np.mean(five)), avg6, assumed


def accuracy_table(results: list[dict], *, references: comparable.References,
                   include_paper_models: bool = False) -> dict:
  """Rows per model: our test accuracy (%) next to the paper's, plus both averages. A row for each
  model that ran; `include_paper_models`: also one for every other model of the paper (its
  figures only). Missing cells stay None (never filled in). A cell of pooled seeds has their
  mean, the sample standard deviation "std" and "n" (a cell of one run: std None, n 1), and with
  a run also "at_chance" of "chance_judged" runs and the "checkpoint" tested (see _ours; the
  row's "checkpoint" is its cells', or "mixed"). A cell whose run did not use the task's full
  data and the paper-comparable config (one `references` makes) lists why in "not_comparable" and
  has no diff; so has an average over such a cell. avg6 counts a missing Path-X as 50 and says so
  in `avg6_pathx_assumed`; a Path-X run is used at its own figure whatever it reached.
  """
  by_model: dict[str, dict[str, dict]] = {}
  for r in (r for r in results if r["task"] in TASKS):  # beyond LRA: lra.reporting.beyond
    by_model.setdefault(r["model"], {})[r["task"]] = r
  models = model_order(list(by_model) + (list(PAPER_MODELS) if include_paper_models else []))
  rows = []
  for model in models:
    paper = PAPER_ACCURACY.get(model) or SPT_ACCURACY.get(model)  # [SPT]
    cells = {}
    for task in TASKS:
      result = by_model.get(model, {}).get(task)
      figure = _ours(result) if result else {"ours": None}  # std and n only with a run
      ours = figure["ours"]
      paper_value = paper.get(task) if paper else None
      # Compared with the paper only on its full data and its config; otherwise marked, also
      # where the paper has no figure (a model it lacks, or one from outside models/).
      why_not = comparable.differences(result, references) if result else []
      cells[task] = {
          **figure,
          "paper": paper_value,
          "paper_fail": paper is not None and paper_value is None,
          "diff": (None if ours is None or paper_value is None or why_not
                   else ours - paper_value),
          "not_comparable": why_not,
          "run": _provenance(result) if result else None,
      }
    avg5, avg6, assumed = _avgs({t: c["ours"] for t, c in cells.items()})
    paper_avg5 = PAPER_AVG5.get(model)
    if paper_avg5 is None and paper is not None:
      paper_avg5, _, _ = _avgs(paper)
    paper_avg6 = None
    if paper is not None:
      _, paper_avg6, _ = _avgs(paper)
    # An average over a marked cell is marked too and never set beside the paper's.
    marked5 = any(cells[t]["not_comparable"] for t in TASKS5)
    marked6 = marked5 or bool(cells["pathx"]["not_comparable"])
    rows.append({
        "model": model, "cells": cells, "checkpoint": _row_checkpoint(cells),
        "avg5": avg5, "avg6": avg6, "avg6_pathx_assumed": assumed,
        "avg5_comparable": not marked5, "avg6_comparable": not marked6,
        "paper_avg5": paper_avg5, "paper_avg6": paper_avg6,
        "avg5_diff": (None if avg5 is None or paper_avg5 is None or marked5
                      else avg5 - paper_avg5),
        "avg6_diff": (None if avg6 is None or paper_avg6 is None or marked6
                      else avg6 - paper_avg6),
    })
  return {"tasks": list(TASKS), "rows": rows, "choice_rule": CHOICE_RULE,
          "seed_rule": seeds.SEED_RULE, "chance_rule": chance.CHANCE_RULE,
          "checkpoint_rule": CHECKPOINT_RULE}


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
                  "std": c.get("std"), "n": c.get("n"),
                  "at_chance": c.get("at_chance"), "chance_judged": c.get("chance_judged"),
                  "checkpoint": c.get("checkpoint"),
                  "checkpoint_counts": c.get("checkpoint_counts"),
                  "seeds": [s["seed"] for s in run.get("seeds", [])] or None,
                  "paper": "FAIL" if c["paper_fail"] else c["paper"], "diff": c["diff"],
                  "not_comparable": "; ".join(c["not_comparable"]) or None,
                  **{k: run.get(k) for k in ("num_train_steps", "best_step",
                                             "best_val_accuracy", "config", "hardware",
                                             "workdir")}})
    marked = "over a cell not comparable with the paper"
    out.append({"model": row["model"], "task": "avg5", "ours": row["avg5"],
                "paper": row["paper_avg5"], "diff": row["avg5_diff"],
                "not_comparable": None if row["avg5_comparable"] else marked,
                "checkpoint": row["checkpoint"]})  # the row's, over all its cells
    out.append({"model": row["model"], "task": "avg6", "ours": row["avg6"],
                "paper": row["paper_avg6"], "diff": row["avg6_diff"],
                "not_comparable": None if row["avg6_comparable"] else marked,
                "checkpoint": row["checkpoint"],
                "config": "Path-X counted as 50" if row["avg6_pathx_assumed"] else None})
  return out


def guessing_baseline(table: dict, average: str) -> tuple[float, str]:
  """(accuracy %, name) of guessing, for the chart's `average` (avg5, avg6 or a task): each
  task's majority class where a run records it (the largest recorded), else chance (1 in
  the number of classes), averaged over the tasks as the accuracies are."""
  tasks = [average] if average in TASKS else list(TASKS5 if average == "avg5" else TASKS)
  rates, recorded = [], 0
  for task in tasks:
    seen = [row["cells"][task]["run"]["majority_rate"] for row in table["rows"]
            if row["cells"][task]["run"] and
            row["cells"][task]["run"]["majority_rate"] is not None]
    recorded += bool(seen)
    rates.append(max(seen) if seen else 100.0 / FACTS[task].num_classes)
  name = ("majority class" if recorded == len(tasks) else
          "chance" if recorded == 0 else "majority class or chance")
  return float(np.mean(rates)), name


def spread(table: dict, average: str) -> dict[str, tuple[float, int]]:
  """{model: (std, n)} of the chart's `average` (avg5, avg6 or a task) where it is a mean over
  seeds: a task's cell's; an average's combines its cells' as independent draws, sqrt(sum of
  std^2) / number of tasks, only where every cell of it has n > 1 (n: the smallest)."""
  tasks = [average] if average in TASKS else list(TASKS5 if average == "avg5" else TASKS)
  out = {}
  for row in table["rows"]:
    cells = [row["cells"][t] for t in tasks if row["cells"][t]["ours"] is not None]
    value = row["cells"][average]["ours"] if average in TASKS else row[average]
    if value is None or not all(c["n"] > 1 for c in cells):
      continue
    out[row["model"]] = (float(np.sqrt(sum(c["std"] ** 2 for c in cells))) / len(tasks),
                         min(c["n"] for c in cells))
  return out


def write_tables(results: list[dict], out, references: comparable.References,
                 all_paper_rows: bool = False) -> tuple[dict, str]:
  """Writes the accuracy table of these runs as accuracy.md, .csv and .json into the folder
  `out` (local or a URL such as gs://bucket/eval), each file whole: the one way eval.py accuracy
  and lra.commands.leaderboard write it. The paper's rows of the models that ran
  (`all_paper_rows`: of every model in the paper); the sweeps' table under them where a cell
  was chosen among the points of a --sweep (lra.reporting.sweeps). Returns (the table, its
  markdown)."""
  from lra.reporting import beyond  # runs of tasks beyond LRA (MQAR): a table under LRA's
  table = accuracy_table(results, references=references, include_paper_models=all_paper_rows)
  extra = beyond.beyond_table(results, references=references, cell=_ours,
                             provenance=_provenance)
  if extra:
    table["beyond"] = extra
  swept = sweeps.sweep_rows(table)  # the cells chosen among the points of a --sweep
  text = "\n".join(([markdown.accuracy_markdown(table)] if table["rows"] else []) +
                   ([beyond.beyond_markdown(extra)] if extra else []) +
                   ([sweeps.sweep_markdown(swept)] if swept else []))
  if swept:
    table["sweeps"] = swept
  folder = paths.resolve(out)
  paths.write_text(folder / "accuracy.md", text + "\n")
  files.write_csv(folder / "accuracy.csv", accuracy_rows(table) + beyond.beyond_rows(extra))
  files.write_json(folder / "accuracy.json", table)
  return table, text
