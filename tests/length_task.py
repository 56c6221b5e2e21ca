"""A made-up length-generalisation task for the tests: running parity of bits (tokens 1 and
2; 0 pads), a label at every real position (its prefix's parity), NO_TARGET at padding; short
train rows, longer validation and test rows, each example's task length in "lengths"."""
from __future__ import annotations

import numpy as np

from lra.data import tasks

NAME = "toy_parity"
FACTS = tasks.Facts("listops", num_classes=2, vocab_size=3, pair=False, test_size=40,
                    train_size=64, lra=False, per_position=True)
TRAIN_WIDTH, TEST_WIDTH = 8, 16


def split(n: int, lengths: tuple[int, int], width: int, seed: int) -> dict[str, np.ndarray]:
  """`n` examples of lengths drawn from `lengths` (both ends included) in rows of `width`."""
  rng = np.random.default_rng(seed)
  length_N = rng.integers(lengths[0], lengths[1] + 1, n)
  real_NxW = np.arange(width)[None, :] < length_N[:, None]
  bits_NxW = rng.integers(0, 2, (n, width)) * real_NxW
  inputs = np.where(real_NxW, bits_NxW + 1, 0).astype(np.uint8)
  labels = np.where(real_NxW, np.cumsum(bits_NxW, 1) % 2, tasks.NO_TARGET).astype(np.int16)
  return {"inputs": inputs, "labels": labels, "lengths": length_N}


def load(config) -> tasks.Task:
  """The task as tasks.load would give it (config.data.max_len: the test width)."""
  splits = {"train": split(64, (2, TRAIN_WIDTH), TRAIN_WIDTH, 0),
            "val": split(24, (TRAIN_WIDTH, TEST_WIDTH), TEST_WIDTH, 1),
            "test": split(40, (TRAIN_WIDTH + 1, TEST_WIDTH), TEST_WIDTH, 2)}
  return tasks.Task.of(NAME, config.data.max_len, splits, chance=0.5)
