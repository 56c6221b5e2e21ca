"""Finding and reading the results.json of finished runs (one per model and task)."""
from __future__ import annotations

import json
import logging

from lra import paths
from lra.reporting.numbers import finite

log = logging.getLogger(__name__)


def _find_results(path: str, warnings: list[str]) -> list:
  """results.json files under `path` (local or a URL such as gs://bucket/runs); unfinished run
  directories go to `warnings`."""
  top = paths.resolve(path)
  if not top.exists():
    warnings.append(f"{path}: does not exist")
    return []
  if not top.is_dir():
    if top.name == "results.json":
      return [top]
    warnings.append(f"{path}: not a directory or results.json; skipped")
    return []
  found, start = [], len(warnings)
  for root, dirs, files in paths.walk(top):  # sorted: ties resolve the same way every time
    if "results.json" in files:
      found.append(root / "results.json")
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
        result = json.loads(file.read_text())
        key = (str(result["model"]), str(result["task"]))
        float(result["test_accuracy"])
      except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.append(f"{file}: unreadable results ({type(e).__name__}: {e})")
        continue
      result = {**result, "workdir": str(file.parent)}
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
