"""Reading a raw download (a .tar or .tar.gz archive) in one streaming pass, refusing a damaged one.

tarfile alone reads a damaged archive as if it ended early: an unreadable header after the first
one ends its member list without an error, and its gzip reader never checks the checksum. So the
archive is read to its very end through gzip.GzipFile (which checks the CRC and length there),
and what follows the tar's end must be zeros. The readers then count what they found against
what the download must hold, which catches a tar cut off between two members.
"""
from __future__ import annotations

import gzip
import tarfile
import zlib
from typing import Callable

from lra.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"
# What a damaged or cut-off archive raises while it is read.
READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def corrupt(path: str, what: str) -> UserError:
  return UserError(f"{path} is corrupt or truncated: {what}; fetch it again")


def _only_zeros_left(stream) -> bool:
  """Reads `stream` to its end (a gzip stream checks its CRC there); True if all bytes were 0."""
  zeros = True
  while chunk := stream.read(1 << 20):
    zeros = zeros and chunk.count(0) == len(chunk)
  return zeros


def read_members(path: str, wanted: Callable[[str], bool]) -> dict[str, bytes]:
  """Contents of the regular-file members whose name `wanted` accepts, in archive order.

  Reads a .tar or .tar.gz in one pass (seeking back in a gzip stream would decompress it
  again). A read that fails part-way, or a tar that stops before the archive ends, raises
  UserError naming the archive.
  """
  found: dict[str, bytes] = {}
  members = 0
  try:
    with open(path, "rb") as raw:
      gzipped = raw.read(2) == GZIP_MAGIC
      raw.seek(0)
      stream = gzip.GzipFile(fileobj=raw) if gzipped else raw
      with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
          members += 1
          if member.isfile() and wanted(member.name):
            handle = tar.extractfile(member)
            assert handle is not None  # regular files always have contents
            found[member.name] = handle.read()
      clean_end = _only_zeros_left(stream)
  except READ_ERRORS as e:
    if members == 0 and isinstance(e, tarfile.ReadError):
      raise UserError(f"{path} is not a tar or tar.gz archive ({e})") from None
    raise corrupt(path, f"reading failed after {members} members ({e})") from None
  if not clean_end:
    raise corrupt(path, f"the tar stream ends after {members} members, but data follows")
  return found
