"""Whether a finished run may stand beside the paper's number: the task's full data and the
paper-comparable config (the task config's base or `,paper` option for that model).

A run that differs (a CPU or toy run, cut data, other sizes or steps) is still reported, but
marked and explained, and left out of every comparison with the paper.
"""
from __future__ import annotations

import functools
import importlib
import json
from typing import Any

from lra import config_record
from lra.errors import UserError
from lra.training import options
from models.settings import SettingError

# The test split of each task's full data (LRA release / the standard downloads), and the
# train split its default config makes from them (Text and Image hold out part of train for
# validation: 22,500 of IMDb's 25,000; CIFAR-10's train[:90%]).
FULL_TEST = {"listops": 2000, "text": 25000, "retrieval": 17437, "image": 10000,
             "pathfinder": 20000, "pathx": 20000}
FULL_TRAIN = {"listops": 96000, "text": 22500, "retrieval": 147086, "image": 45000,
              "pathfinder": 160000, "pathx": 160000}

# Config fields that do not change what a run measures: the trainer's are flagged in
# lra/training/options.py (seeds, the cadence of logs, evaluations and saves, a time limit,
# which shows as `stopped_early`); the others are not trainer settings (the task configs set the
# data, the encoder its dtype), so they are named here, beside their one use: the data's seeds
# (another draw of the same setup), where data lives and how it is made, the compute dtype.
_IGNORED = options.IGNORED_BY_COMPARISON | {
    "data.seed", "data.split_seed", "data.data_dir", "data.workers", "data.generate_if_missing",
    "model.dtype"}


# Data settings that leave the examples as they are (where they live, how they are made, where
# they are cut: the same validation split either way).
_NOT_DATA = {"data_dir", "workers", "generate_if_missing", "max_len"}


@functools.lru_cache(maxsize=None)
def _references(task: str, model: str) -> tuple[tuple[str, dict[str, Any]], ...]:
  """(option, flat config) of the task config's base and `,paper` options for `model`."""
  module = importlib.import_module(f"configs.{task}")
  refs = []
  for option in ("base", "paper"):
    try:
      config = module.get_config(model if option == "base" else f"{model},paper")
    except (UserError, SettingError):  # a model this repository does not know
      return ()
    # Through JSON, as results.json stores it (tuples become lists).
    refs.append((option, config_record.flat(config_record.as_json(config))))
  return tuple(refs)


def _config_differences(result: dict) -> list[str]:
  """What in the run's recorded config differs from the closest paper-comparable config."""
  recorded = result.get("config")
  if not isinstance(recorded, dict):
    return ["no config recorded"]
  mixer = result.get("mixer", result["model"])
  refs = _references(result["task"], mixer)
  if not refs:
    return [f"this repository has no config of model {mixer!r}"]
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
        diffs.append(f"{key}={ours[key]!r} (the {option} config: {value!r})")
    if best is None or len(diffs) < len(best):
      best = diffs
  return best


def _data_differences(result: dict) -> list[str]:
  task = result["task"]
  test, train = result.get("test_count"), result.get("train_count")
  if test is None:
    return ["test split size not recorded"]
  diffs = []
  if test != FULL_TEST[task]:
    diffs.append(f"tested on {test} examples (full test split: {FULL_TEST[task]})")
  if train is not None and train < FULL_TRAIN[task]:
    diffs.append(f"trained on {train} examples (full: {FULL_TRAIN[task]})")
  return diffs


def differences(result: dict) -> list[str]:
  """Why this run cannot stand beside the paper's number; [] when it can."""
  changed = ["settings changed on a resume (config_changes in results.json)"
             ] if result.get("config_changes") else []
  stopped = result.get("stopped_early")
  if isinstance(stopped, dict):
    changed.append(f"stopped by {stopped.get('by')} after {stopped.get('step')} of "
                   f"{stopped.get('planned_num_train_steps')} steps")
  return _data_differences(result) + _config_differences(result) + changed


def data_key(result: dict) -> str:
  """What identifies the data a run used: two runs with different keys ran on different
  data, so their validation accuracies say nothing about which model is better."""
  recorded = (result.get("config") or {}).get("data") or {}
  data = {k: v for k, v in config_record.flat(recorded).items()
          if k not in _NOT_DATA}
  counts = {k: result.get(k) for k in ("train_count", "val_count", "test_count")}
  return json.dumps([data, counts, result.get("data")], sort_keys=True, default=str)
