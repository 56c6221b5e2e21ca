"""The formal-language tasks' files and loader: each split generated on first use into
config.data.data_dir (as MQAR), recorded (lra.data.record), read back and checked, and given
as a per-position Task with splits of their own widths and a "lengths" field.
"""
from __future__ import annotations

import numpy as np

from lra.data import publish, record, store
from lra.data.formal import rows, specs
from lra.data.tasks import NO_TARGET, SPLITS, Task
from lra.errors import UserError

FIELDS = ("inputs", "labels", "lengths")
LENGTH_KEYS = ("train_min_length", "train_max_length", "test_min_length", "test_max_length")


def setting_names(task: str) -> tuple[str, ...]:
  """The generator's settings of `task` (its config.data fields but data_dir, seed and
  generate_if_missing), in their order."""
  return tuple(specs.defaults(task))


def max_len(task: str, data) -> int:
  """The widest split's width (Task.max_len) from config.data alone, before any data is made."""
  return max(rows.widths(task, {k: data[k] for k in setting_names(task)}).values())


def check_settings(task: str, s: dict) -> None:
  """Refuses, in one line, settings no split can be made from."""
  spec = specs.SPECS[task]
  layout = rows.layout_of(task, s)
  least = specs.LEAST.get(task, 1) if layout == "grazzi" else 1
  if layout not in spec.layouts:
    raise UserError(f"{task}: layout={layout!r}; valid: {', '.join(spec.layouts)}")
  for part in ("train", "test"):
    lo, hi = s[f"{part}_min_length"], s[f"{part}_max_length"]
    if lo < least or hi < lo:
      raise UserError(f"{task}: {part}_min_length={lo} and {part}_max_length={hi}: give "
                      f"{least} <= {part}_min_length <= {part}_max_length ({layout} layout)")
  for split in SPLITS:
    if s[f"num_{split}"] < 1:
      raise UserError(f"{task}: num_{split}={s[f'num_{split}']}: give at least 1")


def plan(task: str, s: dict) -> str:
  counts = "/".join(f"{s[f'num_{split}']:,}" for split in SPLITS)
  size = sum(s[f"num_{split}"] * w * 2 for split, w in rows.widths(task, s).items())
  return (f"{counts} examples ({'/'.join(SPLITS)}), lengths {s['train_min_length']}.."
          f"{s['train_max_length']} to train, {s['test_min_length']}..{s['test_max_length']} "
          f"to validate and test ({rows.layout_of(task, s)} layout), about {size / 1e6:,.0f} MB")


def make_folder(task: str, data_dir: str, settings: dict, seed: int) -> dict:
  """Generates the three splits into an empty folder or one generated before; returns
  split -> examples."""
  check_settings(task, settings)
  made = {"task": task, "settings": {**settings, "seed": seed},
          "source": {"generator": rows.__name__, "reference": specs.SPECS[task].source}}
  with record.writing(data_dir, made, record.npy_files(SPLITS, FIELDS)):
    for split in SPLITS:
      store.write_split(data_dir, split, rows.generate(task, settings, seed, split))
  return {split: settings[f"num_{split}"] for split in SPLITS}


def generate_command(task: str, data) -> str:
  flags = {**{k: data[k] for k in setting_names(task)}, "seed": data.seed}
  return f"python -m lra.data {task} --data_dir={data.data_dir}" + "".join(
      f" --{k}={v}" for k, v in flags.items())


def read_split(task: str, data_dir: str, split: str, remake: str) -> dict:
  """A split's three files, in memory, checked: a token, target or length that no example of
  the task can have raises one UserError naming the file and `remake`."""
  spec = specs.SPECS[task]
  files = {field: store.path(data_dir, split, field) for field in FIELDS}
  arrays = {f: np.asarray(store.open_array(files[f], 1 if f == "lengths" else 2, remake))
            for f in FIELDS}
  inputs, labels, lengths = arrays["inputs"], arrays["labels"], arrays["lengths"]
  problems = {
      "labels": labels.shape != inputs.shape and f"shape {labels.shape}, its inputs' "
                                                  f"{inputs.shape}",
      "lengths": lengths.shape != inputs.shape[:1] and f"{len(lengths)} lengths for "
                                                       f"{len(inputs)} rows",
  }
  if not any(problems.values()):
    problems = {
        "inputs": inputs.size and int(inputs.max()) >= spec.vocab_size
                  and f"token {int(inputs.max())} outside 0..{spec.vocab_size - 1}",
        "labels": labels.size and (labels.min() < NO_TARGET or labels.max() >= spec.classes
                                   or (labels[inputs == 0] != NO_TARGET).any())
                  and f"a target outside 0..{spec.classes - 1} or at a padding position",
        "lengths": lengths.size and lengths.min() < 1 and "a length below 1"}
  for field, what in problems.items():
    if what:
      raise UserError(f"{files[field]} is not {task} data ({what}); make the data again "
                      f"with: {remake}")
  return {"inputs": inputs, "labels": labels.astype(np.int16),
          "lengths": lengths.astype(np.int32)}


def _complete(data_dir: str) -> bool:
  return store.exists(data_dir, SPLITS) and record.is_complete(record.read(data_dir))


def load(config) -> Task:
  """config.task's data from config.data.data_dir, generated there first if missing and
  allowed; files generated with other settings are refused (record.compare)."""
  task, data = config.task, config.data
  settings = {k: data[k] for k in setting_names(task)}
  check_settings(task, settings)
  remake = generate_command(task, data)
  record.verify(data.data_dir, remake)
  if not _complete(data.data_dir):
    if not data.generate_if_missing:
      raise UserError(f"{task} data not found in {data.data_dir}; make it with: {remake}")

    def make():
      print(f"{task} data not found in {data.data_dir}; generating {plan(task, settings)} "
            f"there (same as: {remake})", flush=True)
      make_folder(task, data.data_dir, settings, data.seed)

    publish.prepare_once(data.data_dir, lambda: _complete(data.data_dir), make)
  made = record.read(data.data_dir)
  note = ({"record": None, "cut": None} if made is None
          else record.compare(made, data.data_dir, task, data, remake))
  splits = {s: read_split(task, data.data_dir, s, remake) for s in SPLITS}
  record.verify(data.data_dir, remake)
  width = max(split["inputs"].shape[1] for split in splits.values())
  spec = specs.SPECS[task]
  return Task.of(task, width, splits, data=note, chance=1.0 / spec.classes)
