"""Tasks by name: each gives arrays for train/val/test, its vocabulary and class count.

A task never knows about models; the trainer puts the two together.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

import numpy as np

from lra import listops
from lra.errors import UserError

SPLITS = ("train", "val", "test")


@dataclasses.dataclass
class Task:
  name: str
  num_classes: int
  vocab_size: int
  max_len: int
  pair: bool  # two inputs per example (dual encoder)
  # split -> {"inputs": NxL int, "labels": N int (+ "inputs2" for pair tasks)}
  splits: dict[str, dict[str, np.ndarray]]


def _listops_generator_settings(data) -> dict:
  return dict(num_train=data.num_train, num_val=data.num_val, num_test=data.num_test,
              min_length=data.min_length, max_length=data.max_length,
              max_depth=data.max_depth, max_args=data.max_args, seed=data.seed)


def listops_generate_command(data) -> str:
  s = _listops_generator_settings(data)
  return ("python -m lra.data listops --data_dir=" + data.data_dir + "".join(
      f" --{k}={v}" for k, v in s.items()))


def load_listops(config) -> Task:
  data = config.data
  files = {s: os.path.join(data.data_dir, f"basic_{s}.tsv") for s in SPLITS}
  missing = [p for p in files.values() if not os.path.exists(p)]
  if missing:
    if not data.generate_if_missing:
      raise UserError(f"ListOps data not found ({missing[0]}); make it with: "
                      f"{listops_generate_command(data)}")
    print(f"ListOps data not found in {data.data_dir}; generating it "
          f"(same as: {listops_generate_command(data)})", flush=True)
    listops.generate_split_files(data.data_dir, **_listops_generator_settings(data),
                                 workers=data.workers or None)
    with open(os.path.join(data.data_dir, "generator.json"), "w") as f:
      json.dump(_listops_generator_settings(data), f, indent=1)
  splits = {}
  for split, path in files.items():
    try:
      inputs, labels = listops.read_split(path, data.max_len)
    except ValueError as e:
      raise UserError(f"{e}; fix or delete the file (ListOps data can be regenerated with: "
                      f"{listops_generate_command(data)})") from None
    splits[split] = {"inputs": inputs, "labels": labels}
  return Task("listops", listops.NUM_CLASSES, listops.VOCAB_SIZE, data.max_len, False, splits)


_TASKS: dict[str, Callable[..., Task]] = {"listops": load_listops}


def names() -> list[str]:
  return sorted(_TASKS)


def load(config) -> Task:
  if config.task not in _TASKS:
    raise UserError(f"unknown task {config.task!r}; valid tasks: {', '.join(names())}")
  task = _TASKS[config.task](config)
  for split in SPLITS:
    if len(task.splits[split]["labels"]) == 0:
      raise UserError(f"the {split} split of task {task.name!r} is empty")
  return task
