"""Whether a finished run may stand beside the paper's number: the task's full data and the
paper-comparable config (the task config's base or `,paper` option for that model).

A run that differs (a CPU or toy run, cut data, other sizes or steps) is still reported, but
marked and explained, and left out of every comparison with the paper.

The reference configs come from configs/, which this library never imports: the commands
give a `References` function (lra.commands.references.paper_configs) to the functions that need it.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from lra import config_record
from lra.data import settings as data_settings
from lra.data.tasks import FACTS
from lra.training import options

# (task, model) -> ((option, flat config as results.json records it), ...) of the task config's
# base and `,paper` options for the model; () where this repository has no config of it.
References = Callable[[str, str], tuple[tuple[str, dict[str, Any]], ...]]

# Config fields that do not change what a run measures, as their declarations flag them: the
# trainer's (lra/training/options.py: seeds, the cadence of logs, evaluations and saves, a time
# limit, which shows as `stopped_early`) and the data's (lra/data/settings.py: the data's seeds,
# where data lives and how it is made); and the encoder's compute dtype.
_IGNORED = options.IGNORED_BY_COMPARISON | data_settings.IGNORED | {"model.dtype"}


# Data settings that leave the examples as they are (where they live, how they are made, where
# they are cut: the same validation split either way).
_NOT_DATA = {"data_dir", "workers", "generate_if_missing", "max_len"}


def _config_differences(result: dict, references: References) -> list[str]:
  """What in the run's recorded config differs from the closest paper-comparable config."""
  recorded = result.get("config")
  if not isinstance(recorded, dict):
    return ["no config recorded"]
  mixer = result.get("mixer", result["model"])
  refs = references(result["task"], mixer)
  if not refs:
    return [f"no paper-comparable config of model {mixer!r} (it is not one of this "
            f"repository's models/)"]
  ours = config_record.flat(recorded)
  best = None
  for option, ref in refs:
    diffs = []
    for key, value in ref.items():
      if key in _IGNORED:
        continue
      if key not in ours:
        diffs.append(f"{key} not recorded")
      elif ours[key] != value:
        diffs.append(f"{key}={ours[key]!r} ({option}: {value!r})")
    if best is None or len(diffs) < len(best):
      best = diffs
  return best


def _data_differences(result: dict) -> list[str]:
  task = result["task"]
  test, train = result.get("test_count"), result.get("train_count")
  if test is None:
    return ["test split size not recorded"]
  diffs, full = [], FACTS[task]
  if test != full.test_size:
    sample = " (a sample: config.eval_max_examples)" if _sampled(result, "final") else ""
    diffs.append(f"tested on {test} of {full.test_size} examples{sample}")
  if train is not None and train < full.train_size:
    diffs.append(f"trained on {train} of {full.train_size}")
  val = _sampled(result, "validation")
  if val:
    diffs.append(f"validated on {val['examples']} of {val['available']} examples (a sample: "
                 f"config.eval_max_examples)")
  return diffs


def sample_text(result: dict) -> str | None:
  """What a run evaluated where it read samples (config.eval_max_examples), for a table's line
  on the run; None where it read every example."""
  found = [e for e in (_sampled(result, "validation"), _sampled(result, "final")) if e]
  if not found:
    return None
  return "evaluated on samples (config.eval_max_examples): " + ", ".join(
      f"{e['split']} {e['examples']:,} of {e['available']:,}" for e in found)


def _sampled(result: dict, role: str) -> dict | None:
  """The record of a run's `role` passes ("validation", "final") where they read a sample of
  their split (config.eval_max_examples), else None."""
  entry = (result.get("evaluation") or {}).get(role)
  return entry if entry and entry["examples"] < entry["available"] else None


def differences(result: dict, references: References) -> list[str]:
  """Why this run cannot stand beside the paper's number ([] when it can), against the
  reference configs that `references` makes."""
  changed = ["settings changed on a resume (config_changes)"] if result.get(
      "config_changes") else []
  idle = result.get("idle_settings")  # first: what the row's name does not say
  idle = [f"a setting did nothing: {line}" for line in idle] if isinstance(idle, list) else []
  init = result.get("init")
  if isinstance(init, dict) and init.get("objective") != "denoise":  # SPT has its own figures
    changed.append(f"started from the encoder of a {init.get('objective', 'recorded')} run "
                   f"(config.init_from: {init.get('workdir')} from this run's workdir); the "
                   f"paper's runs start from scratch")
  stopped = result.get("stopped_early")
  if isinstance(stopped, dict):
    changed.append(f"stopped by {stopped.get('by')} after {stopped.get('step')} of "
                   f"{stopped.get('planned_num_train_steps')} steps")
  return idle + _data_differences(result) + _config_differences(result, references) + changed


def data_key(result: dict) -> str:
  """What identifies the data a run used: two runs with different keys ran on different
  data, so their validation accuracies say nothing about which model is better."""
  recorded = (result.get("config") or {}).get("data") or {}
  data = {k: v for k, v in config_record.flat(recorded).items()
          if k not in _NOT_DATA}
  counts = {k: result.get(k) for k in ("train_count", "val_count", "test_count")}
  val = _sampled(result, "validation")
  if val:  # validated on a sample: only runs on the same sample compare
    counts["val_examples"] = val["examples"]
  return json.dumps([data, counts, result.get("data")], sort_keys=True, default=str)
