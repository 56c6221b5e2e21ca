"""Deterministic batching: the batch at a step is a pure function of (seed, step).

This makes the data position part of the train step number, so a resumed run reads exactly
the batches an uninterrupted run would, with nothing extra to checkpoint. Each process reads
only its own slice of every global batch (multi-host).
"""
from __future__ import annotations

import functools
from typing import Iterator

import jax
import numpy as np


@functools.lru_cache(maxsize=2)
def _epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def train_indices(num_examples: int, batch_size: int, step: int, seed: int) -> np.ndarray:
  """Global batch `step`: a new shuffle every epoch, the incomplete last batch dropped."""
  per_epoch = num_examples // batch_size
  epoch, position = divmod(step, per_epoch)
  order = _epoch_permutation(num_examples, seed, epoch)
  return order[position * batch_size:(position + 1) * batch_size]


def process_slice(global_batch: int) -> slice:
  """This process's rows of a global batch."""
  count, index = jax.process_count(), jax.process_index()
  per_process = global_batch // count
  return slice(index * per_process, (index + 1) * per_process)


def take(split: dict[str, np.ndarray], indices: np.ndarray) -> dict[str, np.ndarray]:
  return {key: value[indices] for key, value in split.items()}


def train_batch(split: dict[str, np.ndarray], batch_size: int, step: int,
                seed: int) -> dict[str, np.ndarray]:
  """This process's part of global batch `step`."""
  num = len(split["labels"])
  indices = train_indices(num, batch_size, step, seed)[process_slice(batch_size)]
  return take(split, indices)


def eval_batches(split: dict[str, np.ndarray],
                 batch_size: int) -> Iterator[dict[str, np.ndarray]]:
  """Every example exactly once: the last batch is padded and its padding has weight 0."""
  num = len(split["labels"])
  for start in range(0, num, batch_size):
    indices = np.arange(start, start + batch_size)
    weights = (indices < num).astype(np.float32)
    indices = np.where(indices < num, indices, 0)
    mine = process_slice(batch_size)
    batch = take(split, indices[mine])
    batch["weights"] = weights[mine]
    yield batch
