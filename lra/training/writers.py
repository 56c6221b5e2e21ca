"""Metrics to a JSON-lines file and TensorBoard (tensorboardX: no TensorFlow needed)."""
from __future__ import annotations

import json
import os

import jax


class MetricWriter:
  """Writes on process 0 only; other processes get a writer that does nothing."""

  def __init__(self, workdir: str):
    self._active = jax.process_index() == 0
    if not self._active:
      return
    from tensorboardX import SummaryWriter  # imported here: only process 0 writes
    self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")
    self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self._active:
      return
    self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
    self._jsonl.flush()
    for key, value in metrics.items():
      self._tb.add_scalar(key, value, step)
    self._tb.flush()

  def close(self) -> None:
    if self._active:
      self._jsonl.close()
      self._tb.close()
