"""A formal task's split as rows: a pure function of (task, settings, seed, split).

Each split is {"inputs": N x W uint8 tokens (0 pads; symbol i is token i + 1, an output slot
token inputs + 1), "labels": N x W int8 (NO_TARGET = -1 where a position has no target),
"lengths": N int32 (the layout's task length)}, W the split's longest row. A class task
labels its answer position only (the slot after the string; Grazzi's parity: its last bit); a
sequence task each output slot its accuracy counts (stack manipulation and binary addition:
up to the end symbol; the slots after it are real tokens without a target); a word problem
every position. Train lengths come from train_min_length..train_max_length, validation and
test from test_min_length..test_max_length, each value drawn equally often (the examples go
round the values from the longest down, then are shuffled), so the longest value is always
in a split and its width follows from the settings alone (`widths`).
"""
from __future__ import annotations

import zlib

import numpy as np

from lra.data.formal import specs
from lra.data.tasks import NO_TARGET, SPLITS

_STREAM = {"train": 0, "val": 1, "test": 2}  # each split's own random stream


def layout_of(task: str, settings: dict) -> str:
  return settings.get("layout", specs.SPECS[task].layouts[0])


def _range(settings: dict, split: str) -> tuple[int, int]:
  part = "train" if split == "train" else "test"
  return settings[f"{part}_min_length"], settings[f"{part}_max_length"]


def assemble(spec: specs.Spec, slots: bool, x: np.ndarray, y: np.ndarray, scored):
  """(tokens, labels) of strings x and answers y, laid out as the module says."""
  count, m = x.shape
  tokens = x + 1
  if spec.kind == "tagging":
    return tokens, y
  if not slots:  # the answer read at the string's last symbol (Grazzi's parity)
    labels = np.full((count, m), NO_TARGET, np.int64)
    labels[:, -1] = y[:, 0]
    return tokens, labels
  outputs = y.shape[1]
  if scored is not None:
    y = np.where(np.arange(outputs)[None, :] < np.asarray(scored)[:, None], y, NO_TARGET)
  tokens = np.concatenate([tokens, np.full((count, outputs), spec.inputs + 1)], axis=1)
  labels = np.concatenate([np.full((count, m), NO_TARGET), y], axis=1)
  return tokens, labels


def _rows(task: str, layout: str, rng: np.random.Generator, count: int, value: int):
  spec, ax = specs.SPECS[task], specs.axis(task, layout)
  return assemble(spec, ax.slots, *spec.sample(rng, count, ax.n(value)))


def widths(task: str, settings: dict) -> dict[str, int]:
  """Each split's width: the row length of its longest length value (rows grow with it)."""
  layout = layout_of(task, settings)
  ax = specs.axis(task, layout)
  out = {}
  for split in SPLITS:
    longest = max(ax.values(*_range(settings, split)))
    out[split] = _rows(task, layout, np.random.default_rng(0), 1, longest)[0].shape[1]
  return out


def _values(ax: specs.Axis, lo: int, hi: int, count: int, rng) -> np.ndarray:
  """Each length value equally often (the longest first when they do not divide), shuffled."""
  values = np.array(sorted(ax.values(lo, hi), reverse=True))
  return rng.permutation(values[np.arange(count) % len(values)])


def generate(task: str, settings: dict, seed: int, split: str) -> dict[str, np.ndarray]:
  """The split's examples (count settings["num_<split>"])."""
  layout, count = layout_of(task, settings), settings[f"num_{split}"]
  ax = specs.axis(task, layout)
  rng = np.random.default_rng([seed, zlib.crc32(task.encode()), _STREAM[split]])
  values = _values(ax, *_range(settings, split), count, rng)
  width = widths(task, settings)[split]
  inputs = np.zeros((count, width), np.uint8)
  labels = np.full((count, width), NO_TARGET, np.int8)
  for value in np.unique(values):
    where = np.flatnonzero(values == value)
    tokens, targets = _rows(task, layout, rng, len(where), int(value))
    inputs[where, :tokens.shape[1]] = tokens
    labels[where, :targets.shape[1]] = targets
  lengths = np.array([ax.length(int(v)) for v in range(values.max() + 1)])[values]
  return {"inputs": inputs, "labels": labels, "lengths": lengths.astype(np.int32)}
