"""Sweeps in the tables: the runs of one model and task made by the grid's --sweep (each in a
folder named by its point, KEY=VALUE,...: lra.sweep_names) are one sweep. For each seed the
point of best validation accuracy is chosen and its test accuracy reported, as Zoology (Arora
et al. 2023) reports each model at its best learning rate, but chosen on validation, not on
the test set that Zoology also validates on; over seeds, the chosen points are pooled (mean ±
std, lra.reporting.seeds). Beside the cell: which point was chosen, and the spread over the
sweep (best and worst test and validation accuracy over the points, how many points stayed at
chance), the sensitivity that a single chosen figure hides (Okpekpe & Orvieto 2025: recurrent
models learn recall only in a narrow learning-rate window). `profile` gives the accuracy
against one swept key, or against linked keys that moved together (`axes` finds them: the
grid's --sweep KEY1,KEY2=(..),(..)), which lra.reporting.sweep_chart draws. A run in a point's
folder that records another value than the name spells (two folders swapped) is named and
left out (`_misnamed`), not taken for a run of no sweep."""
from __future__ import annotations

import ast
import json
import os

from lra import config_record, sweep_names
from lra.reporting import chance, comparable, published, seeds
from lra.reporting.numbers import finite, fmt, pct
from lra.reporting.paper import TASK_TITLES, model_title

# How the tables choose within a sweep, as they state it.
SWEEP_RULE = (
    "Sweeps (python -m lra.commands.leaderboard --sweep): the runs of one model and task that "
    "differ only in the swept keys (and the seed), each in a folder named by its point "
    "(KEY=VALUE,...), are one sweep. For each seed, the point with the best validation accuracy "
    "is chosen (never by test accuracy; a tie goes to the first point in the order of the "
    "values) and its test accuracy is the cell's; over seeds, the chosen points' mean ± std. "
    "Points: how many; Test and Val best / worst: over the points, each point's mean over its "
    "seeds; At chance: the points whose every judged run is at chance (the chance rule), of the "
    "points judged. Points on other data (a swept data.* key) are sweeps of their own.")


def _point(result: dict) -> dict | None:
  """{key: value} of a sweep point's run, None for another run."""
  config = result.get("config")
  if not isinstance(config, dict):
    return None
  name = os.path.basename(str(result["workdir"]).rstrip("/"))
  return sweep_names.matches(name, config_record.flat(config))


def _identity(result: dict, keys: list[str]) -> str:
  """All that the points of one sweep share: the config but the swept keys and the seed (and
  init_from: each point's fine-tune starts from its own pretraining), and the data."""
  config = {k: v for k, v in config_record.flat(result["config"]).items()
            if k not in ("seed", "init_from", *keys)}
  return json.dumps([keys, config, comparable.data_key(result)], sort_keys=True, default=str)


def _spelled(text: str, value) -> bool:
  """Whether a folder name's `text` is the recorded `value` (as the grid spells it, or another
  spelling of the same literal: 1e-3 for 0.001)."""
  if sweep_names.value_text(value) == text:
    return True
  try:
    return ast.literal_eval(text) == value
  except (ValueError, SyntaxError):  # a word, not a literal: spelled otherwise
    return False


def _misnamed(result: dict) -> str | None:
  """Why a run in a point's folder is not that point: its folder name spells a value that its
  results.json records otherwise (two point folders swapped, one renamed); None for a point
  and for a folder whose name is no point (or names keys the run does not record)."""
  config = result.get("config")
  point = sweep_names.parse_point(os.path.basename(str(result["workdir"]).rstrip("/")))
  if not isinstance(config, dict) or point is None:
    return None
  recorded = config_record.flat(config)
  if any(key not in recorded for key in point):
    return None
  wrong = [key for key, text in point.items() if not _spelled(text, recorded[key])]
  if not wrong:
    return None
  return ("its folder is named for " + ", ".join(f"{key}={point[key]}" for key in wrong) +
          " but its results.json records " + ", ".join(
              f"{key}={sweep_names.value_text(recorded[key])}" for key in wrong))


def split(runs: list[dict], warnings: list[str]) -> tuple[list[list[tuple[dict, dict]]],
                                                          list[dict]]:
  """The runs of one cell: ([each sweep's [(run, its point)]], the runs that are no point); a
  run whose folder names another point than it records (_misnamed) is a line in `warnings`
  and left out of both."""
  sweeps: dict[str, list[tuple[dict, dict]]] = {}
  rest = []
  for run in runs:
    point = _point(run)
    if point is not None:
      sweeps.setdefault(_identity(run, sorted(point)), []).append((run, point))
      continue
    why = _misnamed(run)
    if why is not None:
      warnings.append(f"{published.place(run)}: {why} (point folders swapped or renamed?); "
                      f"skipped: rename it to its point or move it out of the sweep")
    else:
      rest.append(run)
  return list(sweeps.values()), rest


def _val(run: dict) -> float:
  value = finite(run.get("best_val_accuracy"))
  return -1.0 if value is None else value  # never chosen over a run with a figure


def _order(value) -> tuple:
  """Numbers by size, anything else by its text."""
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  return (0, float(value), "") if number else (1, 0.0, sweep_names.value_text(value))


def _mean(values: list) -> float | None:
  return None if not values or None in values else seeds.mean_std(values)[0]


def _figures(name: str, values: dict, runs: dict) -> dict:
  """A point's entry: its runs by seed (percentages), their means, whether it stayed at
  chance (every judged run at chance; None where none is judged)."""
  entries = [{"seed": seed, "test_accuracy": pct(run["test_accuracy"]),
              "best_val_accuracy": pct(run.get("best_val_accuracy")),
              "at_chance": chance.at_chance(run), "workdir": run["workdir"],
              "num_train_steps": run.get("num_train_steps")}
             for seed, run in sorted(runs.items(), key=lambda item: _order(item[0]))]
  judged = [e["at_chance"] for e in entries if e["at_chance"] is not None]
  return {"name": name, "values": values, "runs": entries,
          "test": _mean([e["test_accuracy"] for e in entries]),
          "val": _mean([e["best_val_accuracy"] for e in entries]),
          "at_chance": all(judged) if judged else None}


def choose(points: list[dict]) -> list[dict]:
  """[{"seed", "name"}]: per seed (of any point), the point of best validation accuracy."""
  best: dict = {}
  for point in points:
    for run in point["runs"]:
      val = run["best_val_accuracy"]
      val = -1.0 if val is None else val
      if run["seed"] not in best or val > best[run["seed"]][0]:
        best[run["seed"]] = (val, point["name"], run)
  return [{"seed": seed, "name": name, "run": run}
          for seed, (_, name, run) in sorted(best.items(), key=lambda item: _order(item[0]))]


def spread(points: list[dict]) -> dict:
  """Best and worst over the points (each its mean over seeds), and how many stayed at chance
  of those judged."""
  tests = [p["test"] for p in points if p["test"] is not None]
  vals = [p["val"] for p in points if p["val"] is not None]
  judged = [p["at_chance"] for p in points if p["at_chance"] is not None]
  return {"points": len(points), "test_best": max(tests, default=None),
          "test_worst": min(tests, default=None), "val_best": max(vals, default=None),
          "val_worst": min(vals, default=None), "at_chance": sum(judged),
          "judged": len(judged)}


def sweep_result(members: list[tuple[dict, dict]]) -> dict:
  """One result for a sweep's runs: the chosen point of each seed, pooled over seeds, with
  "sweep": its keys, every point's figures, the choice per seed and the spread."""
  by_point: dict[str, tuple[dict, dict]] = {}
  for run, values in members:
    name = sweep_names.point_name(values)
    runs = by_point.setdefault(name, (values, {}))[1]
    seed = seeds.seed_of(run)
    if seed not in runs or _val(run) > _val(runs[seed]):  # a repeat: the better on validation
      runs[seed] = run
  keys = sorted(members[0][1])
  names = sorted(by_point, key=lambda n: [_order(by_point[n][0][k]) for k in keys])
  points = [_figures(n, *by_point[n]) for n in names]
  chosen = choose(points)
  runs = [by_point[c["name"]][1][c["seed"]] for c in chosen]
  result = dict(seeds.pool(runs)) if len(runs) > 1 else dict(runs[0])
  result["sweep"] = {"keys": keys, "points": points, "spread": spread(points),
                     "chosen": [{"seed": c["seed"], "name": c["name"]} for c in chosen]}
  return result


def profile(sweep: dict, keys: tuple[str, ...]) -> list[tuple[tuple, float, float | None, int]]:
  """[(values, test %, std, n)] for each value of `keys` (one swept key, or linked keys that
  moved together: `axes`), values a tuple in the order of `keys`: the point chosen on
  validation (per seed) among those with that value, over the other swept keys; mean and std
  over seeds."""
  def texts(point: dict) -> tuple[str, ...]:
    return tuple(sweep_names.value_text(point["values"][key]) for key in keys)
  found = {texts(p): tuple(p["values"][key] for key in keys) for p in sweep["points"]}
  out = []
  for text in sorted(found, key=lambda t: [_order(v) for v in found[t]]):
    same = [p for p in sweep["points"] if texts(p) == text]
    tests = [c["run"]["test_accuracy"] for c in choose(same)]
    if tests and None not in tests:
      out.append((found[text], *seeds.mean_std(tests), len(tests)))
  return out


def _linked(values: list[dict], a: str, b: str) -> bool:
  """Whether keys `a` and `b` moved together over the points' `values`: every point holds both
  or neither, and each one's value determines the other's, over two values or more."""
  if any((a in v) != (b in v) for v in values):
    return False
  pairs = {(sweep_names.value_text(v[a]), sweep_names.value_text(v[b])) for v in values
           if a in v}
  return len({x for x, _ in pairs}) > 1 and len(pairs) == len({x for x, _ in pairs}) == len(
      {y for _, y in pairs})


def axes(rows: list[dict]) -> list[tuple[str, ...]]:
  """The swept keys of the sweeps' rows (sweep_rows) in the groups that moved together (the
  grid's linked --sweep KEY1,KEY2=(..),(..): a folder name lists every key, so the link is
  read back from the points of every row pooled), each key alone otherwise; keys sorted in a
  group, the groups by their first key."""
  values = [p["values"] for row in rows for p in row["points"]]
  groups: list[list[str]] = []
  for key in sorted({key for v in values for key in v}):
    group = next((g for g in groups if all(_linked(values, k, key) for k in g)), None)
    if group is None:
      groups.append([key])
    else:
      group.append(key)
  return [tuple(group) for group in groups]


def sweep_rows(table: dict) -> list[dict]:
  """A row per swept cell of the accuracy table (LRA's and beyond's): the cell's figure, its
  sweep and the run's majority rate."""
  rows = []
  for part in (table, table.get("beyond") or {}):
    for row in part.get("rows", []):
      for task, cell in row["cells"].items():
        run = cell.get("run") or {}
        if run.get("sweep"):
          rows.append({"model": row["model"], "task": task, "ours": cell["ours"],
                       "std": cell.get("std"), "n": cell.get("n", 1),
                       "majority_rate": run.get("majority_rate"), **run["sweep"]})
  return rows


def _chosen_text(row: dict) -> str:
  names = list(dict.fromkeys(c["name"] for c in row["chosen"]))
  if len(names) == 1:
    many = len(row["chosen"])
    return f"`{names[0]}`" + (f" (all {many} seeds)" if many > 1 else "")
  return "; ".join(f"seed {c['seed']}: `{c['name']}`" for c in row["chosen"])


def sweep_markdown(rows: list[dict]) -> str:
  """The sweeps' table: the chosen point and the spread per swept cell; then every point."""
  head = ["Model", "Task", "Points", "Chosen on validation", "Test", "Test best / worst",
          "Val best / worst", "At chance"]
  lines = ["Sweeps (each cell's point chosen on validation; spread over the points):", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  points = []
  for row in rows:
    s, title = row["spread"], f"{model_title(row['model'])}"
    task = TASK_TITLES.get(row["task"], row["task"])
    test = fmt(row["ours"]) + (f" ± {fmt(row['std'])} (n={row['n']})" if row["n"] > 1 else "")
    cells = [title, task, str(s["points"]), _chosen_text(row), test,
             f"{fmt(s['test_best'])} / {fmt(s['test_worst'])}",
             f"{fmt(s['val_best'])} / {fmt(s['val_worst'])}",
             f"{s['at_chance']}/{s['judged']}" if s["judged"] else "not judged"]
    lines.append("| " + " | ".join(cells) + " |")
    points.append(f"- {title} / {task}: " + "; ".join(
        f"`{p['name']}` val {fmt(p['val'])}, test {fmt(p['test'])}"
        + (" (at chance)" if p["at_chance"] else "") for p in row["points"]))
  lines += ["", "Test: the chosen points' test accuracy %; best / worst over the points. "
            + SWEEP_RULE, "", "Every point (mean over its seeds):", ""] + points
  return "\n".join(lines) + "\n"
