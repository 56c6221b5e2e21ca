"""The accuracy tables as markdown, like the paper's Table 1 (speed, memory and FLOPs:
lra.reporting.speed_table)."""
from __future__ import annotations

from lra.reporting.numbers import fmt
from lra.reporting.paper import (FROM_CLASSIFY, FROM_NOTE, FROM_RUN, SPT,
                                  SPT_NOTE, TASK_TITLES, model_title, split_source)
from lra.reporting.results import CHECKPOINT_TITLES


def _compare(text: str, paper: float | None, paper_fail: bool = False,
             diff: float | None = None) -> str:
  """'44.9 (36.4, +8.5)' from our figure's text; 'FAIL' for the paper's failures."""
  if paper_fail:
    return f"{text} (FAIL)"
  if paper is None:
    return text
  if diff is None:
    return f"{text} ({paper:.1f})"
  return f"{text} ({paper:.1f}, {diff:+.1f})"


def _ours_text(ours: float | None, std: float | None = None, n: int = 1,
               at_chance: int | None = None, judged: int = 0) -> str:
  """'44.9', or over n seeds '44.9 ± 1.2 (n=3)', with how many of the `judged` seeds are at
  chance: '44.9 ± 1.2 (n=3, 1/3 at chance)'; one run at chance '10.2 (at chance)'; '-' for
  a missing figure."""
  if ours is None:
    return fmt(ours)
  if n > 1:
    chance = f", {at_chance}/{judged} at chance" if judged else ""
    return f"{fmt(ours)} ± {fmt(std)} (n={n}{chance})"
  return fmt(ours) + (" (at chance)" if at_chance else "")


def _accuracy_cell(ours, paper, paper_fail: bool, diff, comparable: bool, mark: str = "",
                   std: float | None = None, n: int = 1, at_chance: int | None = None,
                   judged: int = 0) -> str:
  """A marked (`*`) cell is ours alone: never set beside the paper's figure."""
  text = _ours_text(ours, std, n, at_chance, judged)
  if ours is not None and not comparable:
    return text + "*" + mark
  return _compare(text + mark, paper, paper_fail, diff)


SHOWN_DIFFERENCES = 8  # per run under the table; accuracy.csv and .json list them all


def _compact(why: list[str]) -> str:
  """A run's differences from the paper's setup on one line: the first SHOWN_DIFFERENCES, then
  how many more."""
  shown = "; ".join(why[:SHOWN_DIFFERENCES])
  more = len(why) - SHOWN_DIFFERENCES
  return shown + (f"; +{more} more (accuracy.csv)" if more > 0 else "")


def _marked_notes(table: dict) -> list[str]:
  """The explanation of every `*`: one line per marked run, its differences listed compactly
  (`key=ours (base: the base config's value)`)."""
  notes = []
  for row in table["rows"]:
    for task in table["tasks"]:
      why = row["cells"][task]["not_comparable"]
      if why and row["cells"][task]["ours"] is not None:
        notes.append(f"- {model_title(row['model'])} / "
                     f"{TASK_TITLES.get(task, task)}: {_compact(why)}")
  if not notes:
    return []
  return ["", "\\* not comparable with the paper (not the full data and its base or `,paper` "
          "config): shown without the paper's figure, as is an average over it. Differences:",
          ""] + notes


def accuracy_markdown(table: dict) -> str:
  """Markdown like the paper's Table 1, then how each of our cells was obtained."""
  tasks = table["tasks"]
  head = ["Model"] + [TASK_TITLES.get(t, t) for t in tasks] + ["Avg5", "Avg6", "Checkpoint"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  any_assumed = False
  for row in table["rows"]:
    cells = [model_title(row["model"])]
    for task in tasks:
      c = row["cells"][task]
      cells.append(_accuracy_cell(c["ours"], c["paper"], c["paper_fail"], c["diff"],
                                  not c["not_comparable"], std=c.get("std"), n=c.get("n", 1),
                                  at_chance=c.get("at_chance"),
                                  judged=c.get("chance_judged", 0)))
    cells.append(_accuracy_cell(row["avg5"], row["paper_avg5"], False, row["avg5_diff"],
                                row["avg5_comparable"]))
    mark = "†" if row["avg6"] is not None and row["avg6_pathx_assumed"] else ""
    any_assumed |= bool(mark)
    cells.append(_accuracy_cell(row["avg6"], row["paper_avg6"], False, row["avg6_diff"],
                                row["avg6_comparable"], mark))
    cells.append(_checkpoint_text(row, tasks))
    lines.append("| " + " | ".join(cells) + " |")
  lines += ["", "Cells: our test accuracy % (paper %, ours - paper); `-` = not run or not "
            "finished; FAIL = the paper's model did not learn the task. Avg5 = mean of the five "
            "tasks without Path-X; Avg6 = mean of six with a failed Path-X counted as 50. "
            "Averages are given only when all five other tasks are present."]
  if any_assumed:
    lines.append("† no Path-X run: counted as 50 in Avg6.")
  suffixes = {split_source(row["model"])[1] for row in table["rows"]}
  if SPT in suffixes:  # [SPT]
    lines.append(SPT_NOTE)
  if suffixes & {FROM_CLASSIFY, FROM_RUN}:
    lines.append(FROM_NOTE)
  lines += _marked_notes(table)
  runs = [(row["model"], t, row["cells"][t]["run"]) for row in table["rows"] for t in tasks
          if row["cells"][t]["run"]]
  if any(run["superseded"] for _, _, run in runs):
    lines += ["", table.get("choice_rule", "")]
  if any(run.get("seeds") for _, _, run in runs):
    lines += ["", table.get("seed_rule", "")]
  lines += _chance_notes(table)
  if runs:
    lines += ["", table.get("checkpoint_rule", ""), "", "How each cell was obtained:", ""]
    lines += [_run_line(model, task, run) for model, task, run in runs]
  return "\n".join(lines) + "\n"


def _checkpoint_text(row: dict, tasks: list[str]) -> str:
  """The row's Checkpoint column: `best val`, `last` or `?` where its runs agree; else
  `mixed: best val (ListOps, Image 3/5); last (Image 2/5)` (a cell's share of its seeds where
  they differ); `-` for a row without a run."""
  rule = row.get("checkpoint")
  if rule is None:
    return "-"
  if rule != "mixed":
    return CHECKPOINT_TITLES.get(rule, rule)
  by_rule: dict[str, list[str]] = {r: [] for r in CHECKPOINT_TITLES}
  for task in tasks:
    c = row["cells"][task]
    if c["ours"] is None:
      continue
    counts = c["checkpoint_counts"]
    for r, k in counts.items():
      share = f" {k}/{c['n']}" if len(counts) > 1 else ""
      by_rule.setdefault(r, []).append(TASK_TITLES.get(task, task) + share)
  return "mixed: " + "; ".join(f"{CHECKPOINT_TITLES.get(r, r)} ({', '.join(names)})"
                               for r, names in by_rule.items() if names)


def _chance_notes(table: dict) -> list[str]:
  """The chance rule under the table where a cell was judged by it, and the cells (or
  seeds) that could not be."""
  judged, unjudged = False, []
  for row in table["rows"]:
    for task in table["tasks"]:
      c = row["cells"][task]
      if c["ours"] is None:
        continue
      judged |= c["chance_judged"] > 0
      if c["chance_judged"] < c["n"]:
        unjudged.append(f"{model_title(row['model'])} / "
                        f"{TASK_TITLES.get(task, task)}"
                        + (f" ({c['n'] - c['chance_judged']} of {c['n']} seeds)"
                           if c["n"] > 1 and c["chance_judged"] else ""))
  what = "no test_majority_rate or test_count in results.json"
  if not judged:  # nothing to state the rule for
    return ["", f"No cell is judged for chance ({what})."] if unjudged else []
  out = ["", table.get("chance_rule", "")]
  if unjudged:
    out += ["", f"Not judged for chance ({what}): " + ", ".join(unjudged) + "."]
  return out


def _run_line(model: str, task: str, run: dict) -> str:
  seeds = run.get("seeds") or []
  if seeds:  # the best steps differ from seed to seed
    best = f"best val {fmt(run['best_val_accuracy'])}% (mean over the seeds)"
  else:
    best = (f"best val {fmt(run['best_val_accuracy'])}% at step {run['best_step']}"
            if run["best_step"] is not None else "no validation")
  text = (f"- {model_title(model)} / {TASK_TITLES.get(task, task)}: "
          f"{run['num_train_steps']} steps, {best}, {run['config']}, on {run['hardware']}")
  if run.get("train_count") is not None:
    text += f"; {run['train_count']} train examples"
  if run["test_count"] is not None:
    text += f"; {run['test_count']} test examples"
  if run["majority_rate"] is not None:
    text += f" (majority class {fmt(run['majority_rate'])}%)"
  if run.get("evaluation_sample"):
    text += f"; {run['evaluation_sample']}"
  if str(run.get("tested_checkpoint") or "").startswith("the final state"):
    text += f"; tested {run['tested_checkpoint']}"  # not the best-on-validation one
  if seeds:
    text += f"; {len(seeds)} seeds: " + ", ".join(
        f"seed {s['seed']} {fmt(s['test_accuracy'])}%{_seed_marks(s)} `{s['workdir']}`"
        for s in seeds)
  else:
    text += f"; `{run['workdir']}`"
  if run["superseded"]:
    text += f" (chosen over {', '.join(run['superseded'])})"
  return text


def _seed_marks(seed: dict) -> str:
  """' (at chance; tested the last state)' for one seed of a pooled cell: what sets it
  apart."""
  marks = (["at chance"] if seed.get("at_chance") else []) + (
      ["tested the last state"] if seed.get("checkpoint") == "last" else [])
  return f" ({'; '.join(marks)})" if marks else ""
