"""Faults of the machine during a run, as one line each: a workdir that cannot take the run's
files (checked before anything is written), memory that a config needs and the machine lacks,
and what Orbax's threads print about a fault that the main thread reports anyway.

Orbax writes a checkpoint from background threads; a full disk or a file size limit there
filled stderr with hundreds of lines of their tracebacks. So the storage is checked first
(folder, writable, room for the checkpoints, file size limit), and what still fails mid-run
(the disk filled by another program) is printed once by train.py, while QuietFaults keeps the
threads' reports of it off stderr.
"""
from __future__ import annotations

import logging
import os
import re
import resource
import shutil
import sys
import tempfile

import jax

from lra import paths
from lra.errors import ENVIRONMENT_ERRNOS, UserError, environment_fault


def size_text(size: int) -> str:
  for unit, scale in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20)):
    if size >= scale:
      return f"{size / scale:.1f} {unit}"
  return f"{size / 2**10:.1f} KB"


def prepare_workdir(workdir) -> None:
  """Makes `workdir` and checks that this process can write into it, before the run loads
  data or writes anything there."""
  if paths.is_remote(workdir):  # an object store has no folders to check
    workdir.mkdir(parents=True, exist_ok=True)
    return
  path = os.fspath(workdir)
  if os.path.exists(path) and not os.path.isdir(path):
    raise UserError(f"the workdir {path} is a file, not a folder; choose another --workdir "
                    f"(a new or existing folder)")
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryFile(dir=path) as probe:  # permissions alone can mislead (root)
      probe.write(b"0")
      probe.flush()
  except OSError as e:
    if e.errno not in ENVIRONMENT_ERRNOS:
      raise
    raise UserError(f"cannot write into the workdir {path}: {e.strerror}; "
                    f"{ENVIRONMENT_ERRNOS[e.errno]}") from None


def _bytes_under(folder: str) -> int:
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(folder) for name in names)


def check_room(workdir, state, keep: int) -> None:
  """Refuses a run whose checkpoints cannot be written: a file size limit (ulimit -f) below
  the largest array, or too little free disk for config.keep_checkpoints of them, the best
  one and the one being written (less what the workdir's checkpoints already take)."""
  if paths.is_remote(workdir):
    return
  path = os.fspath(workdir)
  leaves = jax.tree_util.tree_leaves(state)
  largest = max(x.nbytes for x in leaves)
  limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
  if limit != resource.RLIM_INFINITY and limit < largest:
    raise UserError(f"the file size limit (ulimit -f) is {size_text(limit)}, but a checkpoint "
                    f"of this model writes an array of {size_text(largest)}; raise the limit "
                    f"(ulimit -f unlimited) and run the same command again")
  # Orbax's metadata files, measured: about 50 KB for 100 arrays.
  size = sum(x.nbytes for x in leaves) + 64 * 2**10 + 2**10 * len(leaves)
  held = sum(_bytes_under(os.path.join(path, d)) for d in ("checkpoints", "best"))
  need = (keep + 2) * size - held
  free = shutil.disk_usage(path).free
  if free < need:
    raise UserError(f"the disk of the workdir {path} has {size_text(free)} free, but this "
                    f"run's checkpoints need about {size_text(need)} more ({keep} + 2 of "
                    f"{size_text(size)}: config.keep_checkpoints, the best one, one being "
                    f"written); free space or choose a --workdir on another disk")


_XLA_OOM = re.compile(r"(?:Out of memory|RESOURCE_EXHAUSTED)\D*?(\d+) bytes")


def out_of_memory(error: BaseException, config) -> str | None:
  """One line for a run that needs more memory than the machine has (XLA's allocation error,
  or numpy's MemoryError while reading data), naming the sizes that set it; None otherwise."""
  if isinstance(error, MemoryError):
    what = str(error) or "an allocation failed"  # numpy names the size and the shape
  elif isinstance(error, jax.errors.JaxRuntimeError) and _XLA_OOM.search(str(error)):
    what = f"XLA could not allocate {size_text(int(_XLA_OOM.search(str(error)).group(1)))}"
  else:
    return None
  return memory_message("host" if jax.devices()[0].platform == "cpu" else "device", what,
                        config)


def memory_message(where: str, what: str, config) -> str:
  """The line of a run out of `where` ("host" or "device") memory, `what` saying by how much:
  the sizes that set it and what lowers them (also lra.training.memory_check's refusal)."""
  sizes = [f"config.data.{k}={config.data[k]}" for k in ("max_len", "size") if k in config.data]
  sizes.append(f"config.batch_size={config.batch_size}")
  return (f"out of {where} memory ({what}) with {', '.join(sizes)} and the model "
          f"config.model.name={config.model.name!r}; lower these, or the model's sizes "
          f"(config.model.emb_dim, mlp_dim, num_layers), or pick a mixer that needs less memory")


class _FaultRecordFilter(logging.Filter):
  """Drops the log records (Orbax's threads, asyncio's unretrieved futures) of an error the
  machine caused."""

  def filter(self, record: logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return error is None or environment_fault(error) is None


class QuietFaults:
  """While a run trains: what Orbax's threads report about a fault of the machine (a full
  disk, a file size limit) stays off stderr, since the main thread meets the same fault and
  train.py prints it once. Their log records of it are dropped; the reports of exceptions
  in callbacks (sys.unraisablehook; dozens, none naming the fault) are held, and printed when
  the run ends any other way."""

  def __init__(self, handler: logging.Handler):
    self.handler, self.filter, self.held = handler, _FaultRecordFilter(), []

  def __enter__(self):
    self.handler.addFilter(self.filter)
    self.previous, sys.unraisablehook = sys.unraisablehook, self.held.append
    return self

  def __exit__(self, kind, error, traceback) -> None:
    if error is not None and environment_fault(error) is not None:
      sys.unraisablehook = lambda report: None  # the process exits now; threads may still fail
      return
    sys.unraisablehook = self.previous
    self.handler.removeFilter(self.filter)
    for report in self.held:
      self.previous(report)
