"""Metrics to a JSON-lines file and TensorBoard (tensorboardX: no TensorFlow needed).

A remote workdir (gs://...) gets the same files: object stores cannot append, so metrics.jsonl
is rewritten whole at each write, and tensorboardX (local files only without TensorFlow) writes
its events to a local folder that is uploaded at each write.
"""
from __future__ import annotations

import json
import os

import jax

from lra import paths


class MetricWriter:
  """Writes on process 0 only; other processes get a writer that does nothing."""

  def __init__(self, workdir):
    self._active = jax.process_index() == 0
    if not self._active:
      return
    from tensorboardX import SummaryWriter  # imported here: only process 0 writes
    workdir = paths.resolve(workdir)
    self._path = workdir / "metrics.jsonl"
    self._remote = paths.is_remote(workdir)
    if self._remote:
      # A resumed run continues the file it finds.
      self._text = self._path.read_text() if self._path.exists() else ""
    else:
      self._jsonl = open(os.fspath(self._path), "a")
    self._tb_dir = paths.LocalStaging(workdir / "tensorboard")
    self._tb = SummaryWriter(self._tb_dir.path)

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self._active:
      return
    line = json.dumps({"step": step, **metrics}) + "\n"
    if self._remote:
      self._text += line
      self._path.write_text(self._text)
    else:
      self._jsonl.write(line)
      self._jsonl.flush()
    for key, value in metrics.items():
      self._tb.add_scalar(key, value, step)
    self._tb.flush()
    self._tb_dir.sync()

  def close(self) -> None:
    if self._active:
      if not self._remote:
        self._jsonl.close()
      self._tb.close()
      self._tb_dir.close()
