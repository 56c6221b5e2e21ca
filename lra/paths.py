"""The one path layer: every workdir and report path, local or a cloud URL (gs://, s3://).

Paths go through etils.epath, the library Orbax itself uses, so checkpoints, metrics, configs,
results and reports reach the same storage. Local paths are made absolute (Orbax needs that).
Only memory-mapped data needs a local disk (lra.data.tasks refuses a remote data_dir).
Local files are written atomically (atomic_write: a unique hidden name beside the final one,
then a rename), so readers and concurrent writers never see a half-written file.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from typing import Iterator

from etils import epath

from lra import errors

TEMP_PREFIX = ".tmp-"  # hidden names of local files being written (temp_path)


def is_remote(path) -> bool:
  """A URL with a scheme (gs://bucket/run), not a local path."""
  return "://" in os.fspath(path)


def resolve(path) -> epath.Path:
  """A URL as it is; a local path with ~ expanded and made absolute."""
  text = os.fspath(path)
  if is_remote(text):
    return epath.Path(text)
  return epath.Path(os.path.abspath(os.path.expanduser(text)))


def relative(path, base) -> str:
  """`path` written relative to the folder `base` ("best/3000", "../run_pretrain"): what runs
  and reports record, so that a copied or committed folder names no absolute path of the
  machine that made it. A URL stays whole unless it lies under a `base` URL."""
  path, base = os.fspath(resolve(path)), os.fspath(resolve(base))
  if is_remote(path) or is_remote(base):
    prefix = base.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path
  return os.path.relpath(path, base)


def write_bytes(path, data: bytes) -> None:
  """Writes a whole file that readers never see half written: a local file is written beside
  and renamed; an object store publishes an object only when its upload completes."""
  path = resolve(path)
  with errors.naming(path):  # a full disk's write() names no file
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_remote(path):
      path.write_bytes(data)
      return
    with atomic_write(path, "wb") as f:
      f.write(data)


def temp_path(final: str | os.PathLike) -> str:
  """Creates an empty, uniquely named hidden file beside `final` and returns its path.

  O_EXCL with mode 0666 (not tempfile.mkstemp's 0600): the umask decides who may read it.
  """
  final = os.fspath(final)
  folder, name = os.path.split(os.path.abspath(final))
  while True:
    tmp = os.path.join(folder, f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}-{name}")
    try:
      os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:  # a name another writer drew: draw again
      continue
    return tmp


@contextlib.contextmanager
def atomic_write(final: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
  """Yields a file open on a temporary path; renames it to `final` once the block succeeds.

  If the block raises, the temporary file is removed and `final` is left as it was."""
  final = os.fspath(final)
  tmp = temp_path(final)
  try:
    with open(tmp, mode, **open_kwargs) as f:
      yield f
    os.replace(tmp, final)
  finally:
    if os.path.exists(tmp):  # only after a failure: a published file has left this name
      os.unlink(tmp)


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
