"""The one path layer: every workdir and report path, local or a cloud URL (gs://, s3://).

Paths go through etils.epath, the library Orbax itself uses, so checkpoints, metrics, configs,
results and reports reach the same storage. Local paths are made absolute (Orbax needs that).
Only memory-mapped data needs a local disk (lra.data.tasks refuses a remote data_dir).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

from etils import epath


def is_remote(path) -> bool:
  """A URL with a scheme (gs://bucket/run), not a local path."""
  return "://" in os.fspath(path)


def resolve(path) -> epath.Path:
  """A URL as it is; a local path with ~ expanded and made absolute."""
  text = os.fspath(path)
  if is_remote(text):
    return epath.Path(text)
  return epath.Path(os.path.abspath(os.path.expanduser(text)))


def write_bytes(path, data: bytes) -> None:
  """Writes a whole file that readers never see half written: a local file is written beside
  and renamed; an object store publishes an object only when its upload completes."""
  path = resolve(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  if is_remote(path):
    path.write_bytes(data)
    return
  # A unique temporary name, removed if the write fails (publish.atomic_write).
  from lra.data import publish
  with publish.atomic_write(path, "wb") as f:
    f.write(data)


def write_text(path, text: str) -> None:
  write_bytes(path, text.encode("utf-8"))


def walk(top: epath.Path) -> Iterator[tuple[epath.Path, list[str], list[str]]]:
  """os.walk over any epath (top-down; prune by editing the dirs list). epath's own walk loses
  the gs:// of the folders it yields, so this one builds each child from its parent."""
  dirs, files = [], []
  for child in sorted(top.iterdir()):
    (dirs if child.is_dir() else files).append(child.name)
  yield top, dirs, files
  for name in dirs:
    yield from walk(top / name)


def upload_tree(local_dir: str, dest: epath.Path) -> None:
  """Copies the files under a local folder to `dest` (any epath), overwriting."""
  for root, _, files in os.walk(local_dir):
    rel = os.path.relpath(root, local_dir)
    folder = dest if rel == "." else dest / rel
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
      with open(os.path.join(root, name), "rb") as f:
        (folder / name).write_bytes(f.read())


class LocalStaging:
  """A local folder standing in for `dest` where a writer needs local files (TensorBoard
  events, profiler traces): for a local `dest` it is `dest` itself; for a remote one a temp
  folder whose files `sync` uploads to `dest` and `close` uploads and removes."""

  def __init__(self, dest):
    self.dest = resolve(dest)
    self.remote = is_remote(self.dest)
    if self.remote:
      self.path = tempfile.mkdtemp(prefix="lra_staging_")
    else:
      self.path = os.fspath(self.dest)
      os.makedirs(self.path, exist_ok=True)

  def sync(self) -> None:
    if self.remote:
      upload_tree(self.path, self.dest)

  def close(self) -> None:
    if self.remote:
      self.sync()
      shutil.rmtree(self.path)
