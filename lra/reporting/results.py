"""Finding and reading the results.json of finished runs (one per model and task), in their
workdirs or as results/ publishes them (lra.reporting.published)."""
from __future__ import annotations

import itertools
import json
from typing import Any

from lra import paths
from lra.reporting import comparable, published, seeds, sweeps
from lra.reporting.numbers import finite
from lra.reporting.paper import EXTRA_TASKS, FROM_CLASSIFY, FROM_RUN, SPT, TASKS
from lra.rules import is_int, is_real


def _find_results(path: str, warnings: list[str]) -> list:
  """The JSON files under `path` (local or a URL such as gs://bucket/runs) that may be run
  records: each run directory's results.json, and in a folder that is no run's, its other JSON
  files (published records, lra.reporting.published; the caller keeps those that are). `path`
  itself may be one. Unfinished run directories go to `warnings`."""
  top = paths.resolve(path)
  if not top.exists():
    warnings.append(f"{path}: does not exist")
    return []
  if not top.is_dir():
    if top.name.endswith(".json"):
      return [top]
    warnings.append(f"{path}: not a directory or a results.json; skipped")
    return []
  found = []
  for root, dirs, files in paths.walk(top):  # sorted: ties resolve the same way every time
    if "results.json" in files:
      found.append(root / "results.json")
      dirs[:] = []  # a run directory's checkpoints hold no further runs
    elif "metrics.jsonl" in files:
      # The trainer writes metrics.jsonl from the start and results.json only at the end.
      warnings.append(f"{root}: no results.json (run unfinished or failed)")
      dirs[:] = []
    else:  # hidden names are files being written (lra.paths.temp_path)
      found += [root / name for name in files
                if name.endswith(".json") and not name.startswith(".")]
  return found


def run_root(workdirs: list[str]) -> str:
  """The folder the tables name runs relative to (lra.paths.relative), so that they hold no
  absolute path: the folder named, or the one that holds a run or record named alone; of
  several, the deepest folder that holds them all."""
  folders = []
  for workdir in workdirs:
    path = paths.resolve(workdir)
    run = not path.is_dir() or (path / "results.json").exists() or (
        path / "metrics.jsonl").exists()
    folders.append(str(path.parent if run else path).rstrip("/").split("/"))
  common = [part[0] for part in itertools.takewhile(lambda part: len(set(part)) == 1,
                                                     zip(*folders))]
  return "/".join(common) or "/"


def _fraction(value: Any) -> bool:
  return is_real(value) and 0.0 <= value <= 1.0


def problem(result: Any) -> str | None:
  """Why a results.json cannot be reported (None when it can): a missing or impossible figure
  (an accuracy outside [0, 1], a count below 1), an unknown task."""
  if not isinstance(result, dict):
    return "not a JSON object"
  for key in ("model", "task", "test_accuracy"):
    if key not in result:
      return f"no {key!r} field"
  if not isinstance(result["model"], str) or not result["model"]:
    return f"model {result['model']!r} is not a model name"
  if result["task"] not in TASKS + EXTRA_TASKS:
    return f"unknown task {result['task']!r} (valid: {', '.join(TASKS + EXTRA_TASKS)})"
  for key in ("test_accuracy", "best_val_accuracy", "test_majority_rate"):
    if (key == "test_accuracy" or result.get(key) is not None) and not _fraction(result[key]):
      return f"{key}={result[key]!r} is not an accuracy between 0 and 1"
  for key in ("test_count", "train_count", "val_count", "num_train_steps"):
    value = result.get(key)
    if value is not None and (not is_int(value) or value < 1):
      return f"{key}={value!r} is not a positive integer"
  if result.get("config") is not None and not isinstance(result["config"], dict):
    return "config is not a JSON object"
  return None


# The rule for one cell with several runs, as the tables state it.
CHOICE_RULE = ("Of several runs of one model and task, a run on the task's full data with the "
               "paper-comparable config is preferred; runs on the same data are chosen by best "
               "validation accuracy (never by test accuracy); runs on different data are not "
               "compared by validation accuracy: the one with more training, then test, "
               "examples is kept, then the first one found. Runs that differ only in the seed "
               "are pooled first; such a set is compared by its mean validation accuracy.")


def _choose(old: dict, new: dict, references: comparable.References) -> tuple[dict, dict, str]:
  """(kept, dropped, why) of two runs of one (model, task), by CHOICE_RULE."""
  old_ok = not comparable.differences(old, references)
  new_ok = not comparable.differences(new, references)
  if old_ok != new_ok:
    return (new, old, "full data and the paper's config") if new_ok else (
        old, new, "full data and the paper's config")
  if comparable.data_key(old) == comparable.data_key(new):
    new_val = finite(new.get("best_val_accuracy"))
    old_val = finite(old.get("best_val_accuracy"))
    if new_val is not None and (old_val is None or new_val > old_val):
      return new, old, f"best val {new_val} over {old_val}"
    return old, new, f"best val {old_val} over {new_val}"
  size = lambda r: (r.get("train_count") or 0, r.get("test_count") or 0)
  if size(new) > size(old):
    return new, old, "different data, not compared by validation: more examples"
  return old, new, ("different data, not compared by validation: "
                    + ("more examples" if size(old) > size(new) else "the first one found"))


# The checkpoint a run tested, as the tables name it (lra.training.checkpoint.restore_best).
CHECKPOINT_RULE = ("Checkpoint: the one each run tested, as its results.json records it "
                   "(tested_checkpoint, tested_step): `best val` = the best-on-validation "
                   "checkpoint (the trainer's rule); `last` = the final state, tested where no "
                   "copy of the best one restored and the final step is not the best; `?` = "
                   "not recorded; `mixed` = the row's runs (a cell's seeds included) tested "
                   "different ones, listed by rule.")
CHECKPOINT_TITLES = {"best": "best val", "last": "last", "unrecorded": "?"}


def checkpoint_rule(result: dict) -> str:
  """"best" (the best-on-validation checkpoint was tested) or "last" (the final state, the
  trainer's fallback where no copy of the best restores), from results.json's
  tested_checkpoint and tested_step against best_step (a final state at the best step is the
  best one); "unrecorded" where neither is recorded."""
  tested = result.get("tested_checkpoint")
  step, best = result.get("tested_step"), result.get("best_step")
  steps = is_int(step) and is_int(best)
  if steps and step == best:
    return "best"
  if isinstance(tested, str) and tested:
    return "last" if tested.startswith("the final state") else "best"
  return "last" if steps else "unrecorded"


def run_label(result: dict) -> str:
  """The table's name for a run: its mixer, or `transformer_chunked` for the Transformer's
  exact O(N)-memory implementation, `mega_chunk` for Mega attending within chunks, `windowW`
  for the Longformer mixer without global tokens (the grid's window-limited control),
  `NAME_rotary` for rotary positions (the names lra.commands.leaderboard gives them), each a row
  of its own; a run started from another run's encoder adds its source, `_spt` (a denoise
  run), `_from_classify` or `_from_run` (lra.reporting.paper), and is never pooled with runs
  from scratch."""
  config = result.get("config")
  model = (config.get("model") or {}) if isinstance(config, dict) else {}
  model = model if isinstance(model, dict) else {}
  attention = model.get("attention") or {}
  name = result["model"]
  if name == "mega" and isinstance(attention, dict) and is_int(attention.get("chunk_size")) \
      and attention["chunk_size"] > 0:
    name = "mega_chunk"  # Mega-chunk (Ma et al. 2023, section 3.4)
  if name == "longformer" and isinstance(attention, dict) and attention.get(
      "global_positions") == [] and is_int(attention.get("window")):
    name = f"window{attention['window']}"  # attention within w tokens only, in every layer
  if model.get("positions") == "rotary":
    name += "_rotary"
  init = result.get("init")
  if isinstance(init, dict):  # started from another run's encoder: a row of its own
    name += {"denoise": SPT, "classify": FROM_CLASSIFY}.get(init.get("objective"), FROM_RUN)
  if isinstance(attention, dict) and attention.get("implementation") == "chunked":
    return f"{name}_chunked"
  return name


def _read(file, warnings: list[str]) -> dict | None:
  try:
    return json.loads(file.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    warnings.append(f"{file}: unreadable results ({type(e).__name__}: {e}); skipped")
    return None


def read_results(workdirs: list[str], warnings: list[str], root: str | None = None
                 ) -> list[dict]:
  """Every valid results.json under the folders (runs, parents of runs or the files; folders
  of published records too), with "workdir" (the run's folder, or a published record's file
  less .json, relative to `root`: by default run_root), "path" (the file read on this
  machine), "mixer" and the table's "model"; a broken one is a warning."""
  root = run_root(workdirs) if root is None else root
  found = []
  for workdir in workdirs:
    start, records = len(warnings), 0
    for file in _find_results(workdir, warnings):
      result = _read(file, warnings)
      named = file.name == "results.json" or str(file) == str(paths.resolve(workdir))
      if result is None or not (named or published.is_record(result)):
        continue  # a table's or chart's JSON beside published records
      records += 1
      if isinstance(result, dict) and result.get("objective") == "denoise":
        continue  # [SPT] pretraining: no classification result
      why = problem(result)
      if why is not None:
        warnings.append(f"{file}: {why}; skipped")
        continue
      run = file.parent if file.name == "results.json" else str(file)[:-len(".json")]
      found.append({**result, "workdir": paths.relative(run, root), "path": str(file),
                    "mixer": result["model"], "model": run_label(result)})
    if not records and len(warnings) == start:
      warnings.append(f"{workdir}: no results.json found")
  return found


def _where(result: dict) -> str:
  dirs = seeds.workdirs(result)
  return dirs[0] if len(dirs) == 1 else f"the {len(dirs)} seeds in {', '.join(dirs)}"


def _keep(runs: list[dict], references: comparable.References, warnings: list[str]) -> dict:
  """One of several runs (or pooled sets of seeds) of one cell, by CHOICE_RULE in the order
  found; the kept one lists the others' run directories in "superseded"."""
  kept = runs[0]
  for new in runs[1:]:
    winner, loser, why = _choose(kept, new, references)
    winner["superseded"] = (list(winner.get("superseded", [])) + seeds.workdirs(loser) +
                            list(loser.get("superseded", [])))
    what = "two runs" if "seeds" not in kept and "seeds" not in new else "runs of other settings"
    warnings.append(f"{new['model']}/{new['task']}: {what}; kept {_where(winner)} over "
                    f"{_where(loser)} ({why})")
    kept = winner
  return kept


def collect_results(workdirs: list[str], warnings: list[str] | None = None, *,
                    references: comparable.References, root: str | None = None) -> list[dict]:
  """Reads every results.json under the given run or parent directories.

  Problems (missing results, unreadable or impossible files, unknown tasks, duplicate runs)
  are appended to `warnings` (the caller prints them) instead of raised, one line per file,
  so one broken run does not hide the others. Runs of one (model, task) that differ only in
  the seed are pooled (lra.reporting.seeds: their mean, and "seeds"), the points of a sweep
  give the point chosen on validation per seed (lra.reporting.sweeps: "sweep"); of several
  runs or sets that differ in more, one is kept by CHOICE_RULE (paper-comparable: against the
  configs `references` makes); it gets "workdir" (named relative to `root`, read_results) and,
  when it won a choice, "superseded" (the other run directories).
  """
  warnings = [] if warnings is None else warnings
  cells: dict[tuple[str, str], list[dict]] = {}
  for result in read_results(workdirs, warnings, root):
    cells.setdefault((result["model"], result["task"]), []).append(result)
  kept = []
  for runs in cells.values():
    swept, runs = sweeps.split(runs, warnings)  # the grid's --sweep points: one result each
    pooled = [seeds.pool([_keep(repeats, references, warnings)
                          for repeats in seeds.by_seed(group)])
              for group in seeds.groups(runs)] + [sweeps.sweep_result(s) for s in swept]
    kept.append(_keep(pooled, references, warnings))
  return sorted(kept, key=lambda r: (r["model"], r["task"]))
