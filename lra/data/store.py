"""Prepared splits on disk: one .npy file per field, read back through memory maps.

The data command writes them once; training reads only the rows of each batch (and on a
multi-host run only this process's rows), so no split has to fit in memory.
"""
from __future__ import annotations

import os
from typing import Iterable

import numpy as np

from lra import paths
from lra.errors import UserError


def path(data_dir: str, split: str, field: str) -> str:
  return os.path.join(data_dir, f"{split}.{field}.npy")


def exists(data_dir: str, splits: Iterable[str]) -> bool:
  """Labels are written last, so their presence means the split is complete."""
  return all(os.path.exists(path(data_dir, s, "labels")) for s in splits)


class SplitWriter:
  """Fills `num` rows of each field in place (memory-mapped), then publishes the files.

  Each field is written under a unique temporary name (lra.paths.temp_path), so several processes
  writing one folder at once never touch each other's files; close() renames them into place,
  labels last.
  """

  def __init__(self, data_dir: str, split: str, num: int, fields: dict[str, tuple]):
    if num < 1:  # the readers name the source first where they can; this is the last guard
      raise UserError(f"the {split} split for {data_dir} would be empty: its source holds no "
                      f"examples for it; check the input files (or the TFDS split)")
    os.makedirs(data_dir, exist_ok=True)
    self._final = {f: path(data_dir, split, f) for f in fields}
    self._tmp = {f: paths.temp_path(p) for f, p in self._final.items()}
    self.arrays = {f: np.lib.format.open_memmap(self._tmp[f], mode="w+", dtype=dtype,
                                                shape=(num, *tail))
                   for f, (tail, dtype) in fields.items()}

  def __setitem__(self, row: int, values: dict[str, np.ndarray]) -> None:
    for field, value in values.items():
      self.arrays[field][row] = value

  def close(self) -> None:
    for array in self.arrays.values():
      array.flush()
    self.arrays = {}
    for field in sorted(self._final, key=lambda f: f == "labels"):  # labels last
      os.replace(self._tmp[field], self._final[field])

  def discard(self) -> None:
    """Drops the unfinished files; the published ones (if any) stay as they were."""
    self.arrays = {}
    for tmp in self._tmp.values():
      if os.path.exists(tmp):
        os.unlink(tmp)

  def __enter__(self) -> "SplitWriter":
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    # Publish only a split whose every row was written; a failure leaves no hidden files.
    if exc_type is None:
      self.close()
    else:
      self.discard()


def write_split(data_dir: str, split: str, arrays: dict[str, np.ndarray]) -> None:
  """Writes in-memory arrays (small splits) in the same format."""
  with SplitWriter(data_dir, split, len(arrays["labels"]),
                   {f: (a.shape[1:], a.dtype) for f, a in arrays.items()}) as writer:
    for field, array in arrays.items():
      writer.arrays[field][:] = array


class Rows:
  """Row `i` of this view is row `index[i]` of `base` (a memory map); reads on demand."""

  def __init__(self, base, index: np.ndarray, max_len: int | None = None):
    self.base, self.index, self.max_len = base, np.asarray(index), max_len

  def __len__(self) -> int:
    return len(self.index)

  @property
  def shape(self):
    tail = self.base.shape[1:]
    if self.max_len is not None:
      tail = (min(self.max_len, tail[0]), *tail[1:])
    return (len(self.index), *tail)

  def __getitem__(self, rows):
    wanted = self.index[rows]
    order = np.argsort(wanted, kind="stable")  # ascending file offsets read fastest
    out = np.empty((len(wanted), *self.shape[1:]), self.base.dtype)
    picked = self.base[wanted[order]]
    out[order] = picked[:, :self.max_len] if self.max_len is not None else picked
    return out


# np.lib.format's header readers by .npy version; the writer above makes version 1.0 (2.0
# for very wide headers).
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}


def open_array(file: str, ndim: int, remake: str) -> np.memmap:
  """A prepared integer array of `ndim` dimensions, memory-mapped (nothing read but its header).

  A file that is empty, cut short, pickled or of another shape or dtype raises one UserError
  that names it and `remake`, the command that makes it again (never np.load's own advice).
  """
  def damaged(what: str) -> UserError:
    return UserError(f"{file} is damaged ({what}); make the data again with: {remake}")

  try:
    with open(file, "rb") as f:
      version = np.lib.format.read_magic(f)
      if version not in _HEADER_READERS:
        raise damaged(f".npy format version {version}, which the data command never writes")
      shape, _, dtype = _HEADER_READERS[version](f)
      data_start = f.tell()
  except FileNotFoundError:
    raise UserError(f"{file} is missing; make the data again with: {remake}") from None
  except ValueError as e:  # numpy's message for a bad magic string or header
    raise damaged(f"not a readable .npy file: {e}") from None
  if dtype.hasobject:
    raise damaged("it holds pickled Python objects, not a prepared integer array")
  if dtype.kind not in "iu" or len(shape) != ndim:
    raise damaged(f"{dtype} array of shape {shape}, expected {ndim}-D integers")
  size, expected = os.path.getsize(file), data_start + int(np.prod(shape)) * dtype.itemsize
  if size != expected:
    raise damaged(f"{size} bytes, its header's shape {shape} needs {expected}")
  return np.load(file, mmap_mode="r")


def num_rows(data_dir: str, split: str, remake: str) -> int:
  """The number of examples of a prepared split, read from its labels file's header."""
  return len(open_array(path(data_dir, split, "labels"), 1, remake))


def load_split(data_dir: str, split: str, fields: Iterable[str], max_len: int,
               index: np.ndarray | None = None,
               remake: str = "python -m lra.data TASK --data_dir=DIR ...") -> dict:
  """Token fields as on-demand `Rows` cut to `max_len`; labels in memory.

  Every file is checked against its header and the labels' row count first (`remake`: the
  command that makes the data again, for the message)."""
  labels_file = path(data_dir, split, "labels")
  labels = open_array(labels_file, 1, remake)
  index = np.arange(len(labels)) if index is None else index
  out = {"labels": np.asarray(labels[index], np.int32)}
  for field in fields:
    if field != "labels":
      file = path(data_dir, split, field)
      rows = open_array(file, 2, remake)
      if len(rows) != len(labels):
        raise UserError(f"{file} has {len(rows)} rows but {labels_file} has {len(labels)}; "
                        f"make the data again with: {remake}")
      out[field] = Rows(rows, index, max_len)
  return out
