"""Tasks by name: each gives its splits, vocabulary, class count and input kind.

A task never knows about models; the trainer puts the two together. Large tasks are read from
prepared memory-mapped files (lra.store) made by `python -m lra.data TASK ...`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

import numpy as np

from lra import listops, pathfinder, store
from lra.errors import UserError

SPLITS = ("train", "val", "test")


@dataclasses.dataclass
class Task:
  name: str
  num_classes: int
  vocab_size: int
  max_len: int
  pair: bool  # two inputs per example (dual encoder)
  # split -> {"inputs": NxL ints (+ "inputs2" for pair tasks), "labels": N ints}; the token
  # arrays may be lazy row readers (lra.store.Rows).
  splits: dict[str, dict]
  padding: bool = True  # token id 0 is padding; if False every position is real (pixels)


# ----------------------------------------------------------------------------- ListOps


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
    splits[split] = {"inputs": inputs.astype(np.uint8), "labels": labels}
  return Task("listops", listops.NUM_CLASSES, listops.VOCAB_SIZE, data.max_len, False, splits)


# ------------------------------------------------------------- prepared (memory-mapped) tasks


def _require_prepared(data_dir: str, splits, what: str, command: str) -> None:
  if not store.exists(data_dir, splits):
    raise UserError(f"{what} data not found in {data_dir}; prepare it with: {command}")


def load_text(config) -> Task:
  data = config.data
  _require_prepared(data.data_dir, ("train", "test"), "Text",
                    f"python -m lra.data text --data_dir={data.data_dir} "
                    f"--imdb_tar=PATH/aclImdb_v1.tar.gz  (or --tfds_dir=DIR)")
  num_train = len(np.load(store.path(data.data_dir, "train", "labels")))
  if data.validation == "heldout":
    # A fixed random 10% of train, so validation never sees the test set.
    order = np.random.default_rng(data.split_seed).permutation(num_train)
    num_val = int(round(num_train * data.val_fraction))
    train_index, val_index = np.sort(order[num_val:]), np.sort(order[:num_val])
    val_source = "train"
  elif data.validation == "test":  # the original: validate on the test split
    train_index, val_index, val_source = np.arange(num_train), None, "test"
  else:
    raise UserError(f"config.data.validation={data.validation!r} is not 'heldout' or 'test'")
  load = lambda split, index=None: store.load_split(data.data_dir, split, ["inputs"],
                                                    data.max_len, index)
  splits = {"train": load("train", train_index), "val": load(val_source, val_index),
            "test": load("test")}
  return Task("text", 2, 257, data.max_len, False, splits)


def load_retrieval(config) -> Task:
  data = config.data
  _require_prepared(data.data_dir, SPLITS, "Retrieval",
                    f"python -m lra.data retrieval --data_dir={data.data_dir} "
                    f"--release_dir=PATH/lra_release/tsv_data")
  splits = {s: store.load_split(data.data_dir, s, ["inputs", "inputs2"], data.max_len)
            for s in SPLITS}
  return Task("retrieval", 2, 257, data.max_len, True, splits)


def load_image(config) -> Task:
  data = config.data
  _require_prepared(data.data_dir, SPLITS, "Image",
                    f"python -m lra.data image --data_dir={data.data_dir} "
                    f"--cifar=PATH/cifar-10-binary.tar.gz  (or --tfds_dir=DIR)")
  splits = {s: store.load_split(data.data_dir, s, ["inputs"], 1024) for s in SPLITS}
  return Task("image", 10, 256, 1024, False, splits, padding=data.black_is_padding)


def pathfinder_command(data) -> str:
  return (f"python -m lra.data pathfinder --data_dir={data.data_dir} --size={data.size} "
          f"--level={data.level} --num_images={data.num_images} --seed={data.seed}")


def load_pathfinder(config) -> Task:
  data = config.data
  if data.level not in pathfinder.LEVEL_FOLDERS:
    raise UserError(f"config.data.level={data.level!r} is not one of "
                    f"{', '.join(pathfinder.LEVEL_FOLDERS)}")
  prepared = pathfinder.prepared_dir(data.data_dir, data.level)
  if not store.exists(prepared, SPLITS):
    if not data.generate_if_missing:
      raise UserError(f"Pathfinder data not found in {prepared}; make it with: "
                      f"{pathfinder_command(data)}  (or add --release_dir=PATH/lra_release "
                      f"to read the original release)")
    print(f"Pathfinder data not found in {prepared}; generating it "
          f"(same as: {pathfinder_command(data)})", flush=True)
    pathfinder.generate_and_prepare(data.data_dir, size=data.size, level=data.level,
                                    num_images=data.num_images, seed=data.seed,
                                    workers=data.workers or None)
  length = data.size * data.size
  splits = {s: store.load_split(prepared, s, ["inputs"], length) for s in SPLITS}
  return Task(config.task, 2, 256, length, False, splits, padding=data.black_is_padding)


_TASKS: dict[str, Callable[..., Task]] = {
    "listops": load_listops, "text": load_text, "retrieval": load_retrieval,
    "image": load_image, "pathfinder": load_pathfinder, "pathx": load_pathfinder}


def names() -> list[str]:
  return sorted(_TASKS)


def load(config) -> Task:
  if config.task not in _TASKS:
    raise UserError(f"unknown task {config.task!r}; valid tasks: {', '.join(names())}")
  try:
    task = _TASKS[config.task](config)
  except (ValueError, FileNotFoundError) as e:  # malformed or missing files
    raise UserError(str(e)) from None
  for split in SPLITS:
    labels = task.splits[split]["labels"]
    if len(labels) == 0:
      raise UserError(f"the {split} split of task {task.name!r} is empty")
    if labels.min() < 0 or labels.max() >= task.num_classes:
      raise UserError(f"the {split} split of task {task.name!r} has labels outside "
                      f"0..{task.num_classes - 1}")
  return task
