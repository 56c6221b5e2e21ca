"""Finding and reading the results.json of finished runs (one per model and task)."""
from __future__ import annotations

import json
import logging
import os

from lra.reporting.numbers import finite

log = logging.getLogger(__name__)


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
      new_val = finite(result.get("best_val_accuracy"))
      old_val = finite(old.get("best_val_accuracy"))
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
