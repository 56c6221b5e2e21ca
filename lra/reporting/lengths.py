"""Length generalisation across runs: accuracy against test length, a line per model (and per
setting that tells its runs apart), pooled over seeds, as Grazzi et al. (2025)'s Figure 1 and
Deletang et al. (2023) report it; the table of each line's test-range score.

A run's figures are results.json's "length_generalisation" (lra.training.per_length: each
test length's accuracy, chance). Runs of one task and model that differ only in the seed are a
line (lra.reporting.seeds); runs of one model that differ in a setting (a sweep point, a
switch such as a signed decay) are lines of their own, labelled by the settings that differ.
A line's score per seed is the mean over the test lengths (each length weighted equally) of
the scaled accuracy, (accuracy - chance) / (1 - chance) (`--accuracy`, or a task that names no
chance: of the accuracy in %); the table gives the mean over seeds +- the sample std and the
best seed (the maximum over seeds, the figure Grazzi et al. report beside the mean), the chart
the mean over seeds at each length and, dashed, the best seed's curve.
"""
from __future__ import annotations

import statistics
from typing import Any

from lra import config_record, sweep_names
from lra.reporting import results, seeds
from lra.reporting.numbers import finite
from lra.reporting.paper import TASK_TITLES, model_order, model_title
from lra.rules import is_int, is_real
from lra.training import per_length

SCALED, ACCURACY = "scaled", "accuracy"
RULE = ("Each line: the runs of one model and task that differ only in the seed (runs that "
        "differ in another setting are lines of their own, labelled by it). A run's score is "
        "the mean over its test lengths, each length weighted equally, of its accuracy at that "
        "length (an example's accuracy: its share of scored positions right; a length's: the "
        "mean over its test examples). Scaled accuracy = (accuracy - chance) / (1 - chance): "
        "0 = chance, 1 = perfect. Mean +- the sample standard deviation over the seeds; best: "
        "the best seed's score (a maximum over seeds, as Grazzi et al. report it: optimistic "
        "beside the mean).")
_NOT_SETTINGS = ("seed", "init_from", "model.name")  # a line's identity holds these apart


def _problem(found: Any) -> str | None:
  """Why a recorded length_generalisation cannot be drawn (None when it can)."""
  if not isinstance(found, dict) or not isinstance(found.get("per_length"), list):
    return "length_generalisation holds no per_length list"
  chance = found.get("chance")
  if chance is not None and not (is_real(chance) and 0.0 <= chance < 1.0):
    return f"chance={chance!r} is not a number in [0, 1)"
  for row in found["per_length"]:
    if not isinstance(row, dict) or not is_int(row.get("length")) or not (
        is_real(row.get("accuracy")) and 0.0 <= row["accuracy"] <= 1.0):
      return f"per_length row {row!r} has no whole length and accuracy in [0, 1]"
  return None if found["per_length"] else "per_length is empty"


def usable(found: list[dict], warnings: list[str]) -> list[dict]:
  """Of read results (results.read_results), the runs whose results.json holds per-length test
  figures; one whose figures cannot be drawn is a line in `warnings` (others, LRA's runs, are
  passed over)."""
  runs = []
  for result in found:
    if per_length.KEY not in result:
      continue
    why = _problem(result[per_length.KEY])
    if why is not None:
      warnings.append(f"{result['path']}: {why}; left out of the length chart")
      continue
    runs.append(result)
  return runs


def read_runs(workdirs: list[str], warnings: list[str]) -> list[dict]:
  """Every finished run under `workdirs` with per-length test figures (`usable`)."""
  return usable(results.read_results(workdirs, warnings), warnings)


def measure(runs: list[dict], wanted: str) -> str:
  """SCALED where asked and every run names its chance; else ACCURACY."""
  if wanted == SCALED and all(r[per_length.KEY].get("chance") is not None for r in runs):
    return SCALED
  return ACCURACY


def _values(result: dict, how: str) -> dict[int, float]:
  """{test length: figure}: the scaled accuracy, or the accuracy in %."""
  found = result[per_length.KEY]
  chance = found.get("chance")
  return {row["length"]: (per_length.scaled(row["accuracy"], chance) if how == SCALED
                          else 100.0 * row["accuracy"]) for row in found["per_length"]}


def _settings(group: list[dict]) -> dict[str, Any]:
  config = group[0].get("config") or {}
  return {k: v for k, v in config_record.flat(config).items() if k not in _NOT_SETTINGS}


def _labels(groups: list[list[dict]]) -> list[dict[str, str]]:
  """Each group's settings that differ from another group's of its model: {key: value text}
  (a mixer's own setting by its name alone)."""
  flats = [_settings(g) for g in groups]
  out = []
  for i, group in enumerate(groups):
    mine = [j for j, g in enumerate(groups) if g[0]["model"] == group[0]["model"]]
    keys = sorted({k for j in mine for k in set(flats[i]) | set(flats[j])
                   if flats[i].get(k) != flats[j].get(k)})
    out.append({k.removeprefix("model.attention."): sweep_names.value_text(flats[i].get(k))
                for k in keys})
  return out


def _seed_entry(run: dict, how: str) -> dict:
  values = _values(run, how)
  return {"seed": seeds.seed_of(run), "workdir": run["workdir"], "values": values,
          "score": statistics.fmean(values.values()),
          "accuracy": 100.0 * statistics.fmean(
              r["accuracy"] for r in run[per_length.KEY]["per_length"])}


def _span(spans: list) -> dict | None:
  spans = [s for s in spans if isinstance(s, dict) and is_int(s.get("min"))
           and is_int(s.get("max"))]
  return {"min": min(s["min"] for s in spans), "max": max(s["max"] for s in spans)} \
      if spans else None


def _line(task: str, group: list[dict], settings: dict[str, str], how: str) -> dict:
  """A line of the chart: its seeds' curves, their mean at each length, the best seed."""
  runs = sorted(group, key=lambda r: (seeds.seed_of(r) is None, seeds.seed_of(r) or 0))
  entries = [_seed_entry(r, how) for r in runs]
  lengths = sorted({n for e in entries for n in e["values"]})
  best = max(entries, key=lambda e: e["score"])  # the first of equals: the lowest seed
  mean, std = seeds.mean_std([e["score"] for e in entries])
  model = group[0]["model"]
  title = model_title(model) + (" (" + ", ".join(f"{k}={v}" for k, v in settings.items())
                                + ")" if settings else "")
  found = [r[per_length.KEY] for r in runs]
  return {"task": task, "model": model, "label": title, "settings": settings,
          "measure": how, "chance": found[0].get("chance"),
          "train_lengths": _span([f.get("train_lengths") for f in found]),
          "curve": [(n, statistics.fmean(e["values"][n] for e in entries if n in e["values"]))
                    for n in lengths],
          "best_curve": sorted(best["values"].items()), "mean": mean, "std": std,
          "best": best["score"], "best_seed": best["seed"],
          "accuracy": statistics.fmean(e["accuracy"] for e in entries),
          "seeds": entries, "num_train_steps": [r.get("num_train_steps") for r in runs]}


def length_lines(runs: list[dict], wanted: str = SCALED) -> list[dict]:
  """The lines of `runs`, by task (its measure: SCALED where every run of it names a chance
  and it is wanted, else ACCURACY), in the reports' model order, then by label."""
  lines = []
  for task in sorted({r["task"] for r in runs}):
    mine = [r for r in runs if r["task"] == task]
    how = measure(mine, wanted)
    groups = seeds.groups(mine)
    made = [_line(task, g, settings, how) for g, settings in zip(groups, _labels(groups))]
    for line in made:  # runs apart for another reason (steps run, data): named by a folder
      if sum(other["label"] == line["label"] for other in made) > 1:
        line["label"] += f" [{line['seeds'][0]['workdir']}]"
    lines += made
  rank = {m: i for i, m in enumerate(model_order({line["model"] for line in lines}))}
  return sorted(lines, key=lambda line: (line["task"], rank[line["model"]], line["label"]))


def score_text(value: float | None, how: str) -> str:
  if value is None or finite(value) is None:
    return "-"
  return f"{value:.3f}" if how == SCALED else f"{value:.1f}"


def _range(span: dict | None) -> str:
  return "?" if not span else f"{span['min']}-{span['max']}"


def _heading(task: str, lines: list[dict]) -> str:
  first = lines[0]
  tested = _range(_span([{"min": ln["curve"][0][0], "max": ln["curve"][-1][0]}
                         for ln in lines]))
  chance = first["chance"]
  return (f"### {TASK_TITLES.get(task, task)}: trained on lengths "
          f"{_range(_span([ln['train_lengths'] for ln in lines]))}, tested on {tested}"
          + (f"; chance {chance:g}" if chance is not None else ""))


def length_markdown(lines: list[dict]) -> str:
  """A table per task: model, seeds, the score's mean +- std over seeds, the best seed's, the
  mean accuracy (%), the training steps and the runs; then how the figures are made."""
  out = []
  for task in dict.fromkeys(line["task"] for line in lines):
    mine = [line for line in lines if line["task"] == task]
    what = ("scaled accuracy" if mine[0]["measure"] == SCALED else "accuracy (%)")
    out += [_heading(task, mine), "",
            f"| Model | Seeds | Mean {what} over the test lengths | Best seed | "
            f"Accuracy (%) | Steps | Runs |", "|---|---:|---:|---:|---:|---:|---|"]
    for line in mine:
      how = line["measure"]
      spread = f" ± {score_text(line['std'], how)}" if line["std"] is not None else ""
      steps = sorted({n for n in line["num_train_steps"] if n is not None})
      out.append(f"| {line['label']} | {len(line['seeds'])} | {score_text(line['mean'], how)}"
                 f"{spread} | {score_text(line['best'], how)} (seed {line['best_seed']}) | "
                 f"{line['accuracy']:.1f} | {', '.join(f'{n:,}' for n in steps) or '-'} | "
                 f"{', '.join(e['workdir'] for e in line['seeds'])} |")
    out.append("")
  return "\n".join(out + [RULE]).rstrip() + "\n"
