"""Safe data preparation when several processes share one data folder (a multi-host run, or
two runs started at once): one writer at a time, unique temporary files, atomic publishing.

- `prepare_once(folder, is_complete, make)`: the first process to find the data missing takes
  an exclusive lock on `folder/.lra-data.lock` and makes it; the others block on the lock, then
  find the data complete and use it without making it again.
- Files are written with lra.paths.atomic_write / temp_path: a unique hidden name beside the
  final path, then renamed over it (os.replace), so a reader sees the old file or the complete
  new one, never a half-written one, and concurrent writers never touch each other's files.
- Files are created with mode 0666 less the umask (0644 under the usual 022), folders 0777 less
  the umask (0755), so other users of a shared machine can read prepared data
  (tempfile.mkstemp would make them 0600).

The lock is fcntl.flock. It holds between processes of one machine on any local filesystem, and
between machines only where the shared filesystem implements locks (NFS with lockd: Linux maps
flock to NFS byte-range locks; Lustre and GPFS when mounted with locking). Where it does not
(some FUSE/object-store mounts), either prepare the data once before the multi-host run starts
(`python -m lra.data TASK ...`), or keep the data on each host's local disk. Without a working
lock, writers still never corrupt each other's files (unique temporary names, atomic renames),
they only duplicate the work.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Callable, Iterator

from lra.errors import UserError

LOCK_NAME = ".lra-data.lock"

_held: set[str] = set()  # lock files this process holds (flock would deadlock on a re-take)


@contextlib.contextmanager
def locked(folder: str | os.PathLike) -> Iterator[None]:
  """Holds the folder's writer lock (blocking until it is free); re-entrant in one process."""
  folder = os.fspath(folder)
  if os.path.exists(folder) and not os.path.isdir(folder):
    raise UserError(f"the data folder {folder} is a file, not a folder; choose another data_dir "
                    "(--config.data.data_dir or --data_dir: a new or existing folder)")
  os.makedirs(folder, exist_ok=True)
  lock_path = os.path.realpath(os.path.join(folder, LOCK_NAME))
  if lock_path in _held:
    yield
    return
  # The lock file itself is never removed: unlinking it would let a late process lock a new
  # file while another still holds the old one.
  fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held.add(lock_path)
    try:
      yield
    finally:
      _held.discard(lock_path)
      fcntl.flock(fd, fcntl.LOCK_UN)
  finally:
    os.close(fd)


def prepare_once(folder: str | os.PathLike, is_complete: Callable[[], bool],
                 make: Callable[[], object]) -> bool:
  """Runs `make` unless the data is complete, one process at a time; True if this one made it.

  `is_complete` must only be true once the last file of the data is published, so a process
  that waited on the lock never sees half a dataset and never makes it a second time.
  """
  if is_complete():
    return False
  with locked(folder):
    if is_complete():  # another process made it while this one waited
      return False
    make()
    return True
