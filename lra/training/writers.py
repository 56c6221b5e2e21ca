"""Metrics to a JSON-lines file and TensorBoard (tensorboardX: no TensorFlow needed).

Each metrics.jsonl row: {"step", "kind" (train, val or test), "time" (UTC, ISO 8601), metrics}.
A run resumed from the checkpoint of step S first drops the rows that the interrupted run wrote
after it (step > S, and any test rows): the file then reads as one uninterrupted run would have
written it. TensorBoard drops its own events past S the same way (purge_step).

A run that starts from step 0 in a workdir holding metrics.jsonl (its checkpoints deleted, or
all of them damaged) moves that file aside to metrics.old-N.jsonl, says so in one line, and has
TensorBoard hide the earlier events (purge_step 1): the earlier run's numbers are kept, never
mixed into the new run's.

A remote workdir (gs://...) gets the same files: object stores cannot append, so metrics.jsonl
is rewritten whole at each write, and tensorboardX (local files only without TensorFlow) writes
its events to a local folder that is uploaded at each write.
"""
from __future__ import annotations

import datetime
import json
import os

import jax

from lra import paths


def kind_of(metrics: dict) -> str:
  """'val' or 'test' for the trainer's val_* / test_* metrics, else 'train'."""
  for kind in ("val", "test"):
    if metrics and all(key.startswith(f"{kind}_") for key in metrics):
      return kind
  return "train"


def _kept_rows(text: str, resume_step: int) -> str:
  """The rows of an earlier metrics.jsonl that a run resumed at `resume_step` keeps."""
  kept = []
  for line in text.splitlines(keepends=True):
    if not line.endswith("\n"):  # the last row, torn by a kill in mid-write
      break
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      row = None
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
      kept.append(line)  # not a row of ours: kept as it was
      continue
    metrics = {k: v for k, v in row.items() if k not in ("step", "kind", "time")}
    kind = row.get("kind") or kind_of(metrics)  # rows of older runs have no kind
    if row["step"] <= resume_step and kind != "test":
      kept.append(line)
  return "".join(kept)


def _set_aside(path) -> bool:
  """Moves the metrics.jsonl of an earlier run (a run starting at step 0 found it) to the
  first free metrics.old-N.jsonl beside it and says so; False if there is none."""
  if not path.exists() or not path.read_text().strip():
    return False
  n = 1
  while (path.parent / f"metrics.old-{n}.jsonl").exists():
    n += 1
  aside = path.parent / f"metrics.old-{n}.jsonl"
  path.rename(aside)
  print(f"warning: found {path} but no checkpoint: training starts from step 0; the earlier "
        f"metrics are moved to {aside} (and TensorBoard hides their events)", flush=True)
  return True


class MetricWriter:
  """Writes on process 0 only; other processes get a writer that does nothing."""

  def __init__(self, workdir, resume_step: int = 0):
    self._active = jax.process_index() == 0
    if not self._active:
      return
    from tensorboardX import SummaryWriter  # imported here: only process 0 writes
    workdir = paths.resolve(workdir)
    self._path = workdir / "metrics.jsonl"
    self._remote = paths.is_remote(workdir)
    restarted = not resume_step and _set_aside(self._path)
    # A resumed run continues the file it finds, less what came after its checkpoint.
    self._text = (_kept_rows(self._path.read_text(), resume_step)
                  if self._path.exists() else "")
    if self._path.exists():
      paths.write_text(self._path, self._text)  # whole, never half a file
    if not self._remote:
      self._jsonl = open(os.fspath(self._path), "a")
    self._tb_dir = paths.LocalStaging(workdir / "tensorboard")
    # Events at steps after the checkpoint (written before the stop) are dropped.
    self._tb = SummaryWriter(self._tb_dir.path, purge_step=resume_step + 1
                             if resume_step or restarted else None)

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self._active:
      return
    time = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    line = json.dumps({"step": step, "kind": kind_of(metrics), "time": time, **metrics}) + "\n"
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
