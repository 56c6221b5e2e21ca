"""The record of what made a data folder (`lra-data.json`): written last, compared on load.

Every folder this code base generates or prepares gets one record: the task, the settings that
decide its content (each named as the config.data field that asks for it), where the data came
from, and the files it made. It gives three promises:

- A user's files are never overwritten: data is written only into an empty folder or one whose
  record lists every file in it. A rewrite removes the files the old record listed that the new
  one does not make (no leftovers of an older run are read), and touches nothing else.
- Data made with other settings is never used silently: `compare` stops a run whose config asks
  for other settings, naming the field and the command that remakes the data. The one setting a
  config may ask smaller than the data is `max_len`: the rows are cut, and the loader measures
  the cut (lra.data.notes) into the note that goes with the task into results.json.
- Files changed after they were made are never read, nor written over: the record holds each
  file's size and SHA-256 (`files`: {name: {"bytes", "sha256"}}, one line each), hashed once
  when the data is made, so two folders of the same data have the same record. `verify`
  refuses a folder one of whose files is missing or differs, naming the file: training before
  it reads the data, and the writers before they write over it. The check is a stat of each
  file; a file is hashed again unless its inode, size, modification and status-change times
  are those it had when its hash was last found right (kept in CHECKED beside the record).
  The status-change time (st_ctime) is the one a user cannot set back: `os.utime` or
  `touch -d` after an edit moves it on, so an edit is always hashed; a copy or a move is
  hashed once, then instant again. In a folder this process cannot write, CHECKED is not
  updated and the files it does not vouch for are hashed on every load (full ListOps: ~2 s,
  docs/results.md). Records of older versions list names only, and are not checked.

Data a user provides by hand (the LRA release files, raw archives) has no record and is read as
it is; the record exists for what this code made from it.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from typing import Iterable, Iterator

from lra import paths
from lra.data import publish, store
from lra.errors import UserError

NAME = "lra-data.json"
CHECKED = ".lra-data-checked.json"  # {file: its stat stamp when its hash last matched}
FORMAT = 1  # raised when an encoding changes, so data of an older encoding is made again
CUTTABLE = "max_len"  # rows longer than the config asks for are cut (the loader notes it)


def npy_files(splits: Iterable[str], fields: Iterable[str]) -> list[str]:
  """The file names of prepared splits (lra.data.store)."""
  return [os.path.basename(store.path("", s, f)) for s in splits for f in fields]


def read(folder: str | os.PathLike) -> dict | None:
  """The folder's record, or None if it has none."""
  path = os.path.join(folder, NAME)
  try:
    with open(path, encoding="utf-8") as f:
      made = json.load(f)
  except FileNotFoundError:
    return None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f"{path} is not a readable data record ({e}); delete {folder} and make "
                    f"the data again") from None
  if not isinstance(made, dict) or not {"task", "settings", "files"} <= made.keys():
    raise UserError(f"{path} is not a data record of this code; delete {folder} and make the "
                    f"data again")
  return made


def _write(folder: str, made: dict) -> None:
  """The record as indented JSON, with one line per file of `files` (a generated Pathfinder
  level lists 200,000 images)."""
  files = made.get("files")
  text = json.dumps({**made, "files": None}, indent=1, sort_keys=True)
  rows = [f"  {json.dumps(name)}: {json.dumps(files[name], sort_keys=True)}"
          for name in sorted(files)] if isinstance(files, dict) else None
  text = text.replace('"files": null', '"files": ' + (
      "{\n" + ",\n".join(rows) + "\n }" if rows else json.dumps(files)), 1)
  with paths.atomic_write(os.path.join(folder, NAME), "w", encoding="utf-8") as f:
    f.write(text + "\n")


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _entry(folder: str, name: str) -> dict:
  """What the record keeps of a file just made: its size and SHA-256."""
  path = os.path.join(folder, name)
  return {"bytes": os.path.getsize(path), "sha256": _sha256(path)}


def _stamp(stat: os.stat_result) -> list[int]:
  """What changes whenever a file's content may have: inode, size, mtime and ctime (the last
  cannot be set back, so an edit with its mtime restored still shows)."""
  return [stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _cache_is_not_a_folder(folder: str) -> None:
  """CHECKED is this code's own cache: a folder in its place (which the OS would refuse as
  "is a directory") is refused with the fix, which is to remove it."""
  path = os.path.join(folder, CHECKED)
  if os.path.isdir(path):
    raise UserError(f"{path} is a folder, where this code keeps a file of its own (the cache "
                    f"of which data files were last found unchanged): remove that folder, "
                    f"then run the same command again (the cache is made again)")


def _read_checked(folder: str) -> dict:
  """The stamps of CHECKED ({} if absent or unreadable: everything is hashed again)."""
  _cache_is_not_a_folder(folder)
  try:
    with open(os.path.join(folder, CHECKED), encoding="utf-8") as f:
      checked = json.load(f)
  except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
    return {}
  return checked if isinstance(checked, dict) else {}


def _write_checked(folder: str, checked: dict) -> None:
  """Keeps the stamps of the files whose hashes matched, where the folder is writable."""
  try:
    with paths.atomic_write(os.path.join(folder, CHECKED), "w", encoding="utf-8") as f:
      json.dump(checked, f, sort_keys=True)
  except OSError as e:  # a read-only copy of the data: it is hashed on each load instead
    if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
      raise


def _changed(folder: str, files: dict) -> str | None:
  """How the first file that differs from its record entry differs (a phrase naming it), or
  None. Sizes always; the hash of every file whose stamp is not the one CHECKED vouches for."""
  checked = _read_checked(folder)
  vouched = dict(checked)
  for name, entry in sorted(files.items()):
    path = os.path.join(folder, name)
    try:
      stat = os.stat(path)
    except FileNotFoundError:
      return f"{path} was deleted after this code made it ({NAME} lists it)"
    if stat.st_size != entry["bytes"]:
      return (f"{path} was changed after this code made it ({stat.st_size:,} bytes, "
              f"{entry['bytes']:,} in {NAME})")
    if vouched.get(name) != _stamp(stat):
      if _sha256(path) != entry["sha256"]:
        return (f"{path} was changed after this code made it (its SHA-256 is not the one in "
                f"{NAME})")
      vouched[name] = _stamp(stat)
  if vouched != checked:
    _write_checked(folder, vouched)
  return None


def verify(folder: str | os.PathLike, remake: str | None = None) -> None:
  """Refuses, in one line naming the file, a finished folder of ours one of whose files was
  deleted or changed since it was made; nothing for a folder without a record, an unfinished
  one (it is being made, or will be made again) or an older record of names only. `remake`:
  the command that makes the data again, for the message."""
  folder = os.fspath(folder)
  made = read(folder) if os.path.isdir(folder) else None
  if not made or not made.get("complete") or not isinstance(made["files"], dict):
    return
  problem = _changed(folder, made["files"])
  if problem:
    again = f" and make it again with: {remake}" if remake else " to make the data again"
    raise UserError(f"{problem}, so the folder is neither read nor written over: delete "
                    f"{folder}{again}, or point data_dir at another folder")


def _present(folder: str) -> list[str]:
  """Every file under folder (relative paths) but the lock, temporary files and the record."""
  found = []
  for root, _, names in os.walk(folder):
    for name in names:
      if name not in (NAME, CHECKED, publish.LOCK_NAME) and not name.startswith(
          paths.TEMP_PREFIX):
        found.append(os.path.relpath(os.path.join(root, name), folder))
  return sorted(found)


def _stamps(folder: str, names: Iterable[str]) -> dict:
  """Which file each name is now (inode, modification time, size), to see if any changed."""
  stamps = {}
  for name in names:
    try:
      stat = os.stat(os.path.join(folder, name))
      stamps[name] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
      stamps[name] = None
  return stamps


def _remove(folder: str, name: str) -> None:
  """Removes one file and the folders it leaves empty, up to (not including) `folder`."""
  path = os.path.join(folder, name)
  with contextlib.suppress(FileNotFoundError):
    os.unlink(path)
  parent = os.path.dirname(path)
  while os.path.normpath(parent) != os.path.normpath(folder) and not os.listdir(parent):
    os.rmdir(parent)
    parent = os.path.dirname(parent)


def few(names: list[str], shown: int = 3) -> str:
  """The first `shown` names and how many more: a message lists thousands of files in a line."""
  rest = len(names) - shown
  return ", ".join(names[:shown]) + (f" and {rest:,} more ({len(names):,} in all)" if rest > 0
                                     else "")


def _listed(folder: str, files: list[str], previous: dict | None) -> set[str]:
  """The files the folder's record lists; refuses a folder holding any file it does not list."""
  old = read(folder) or previous
  listed = set(old["files"]) if old else set()
  foreign = [name for name in _present(folder) if name not in listed]
  if foreign:
    missing = [name for name in files if not os.path.exists(os.path.join(folder, name))]
    partial = 0 < len(missing) < len(files)  # the user's own copy, with files missing
    advice = (f"add the missing {few(missing)} yourself, or " if partial else "") + \
        "use an empty folder (another data_dir)"
    raise UserError(f"{folder} holds files this code did not make ({few(foreign)}; no {NAME} "
                    f"lists them), so nothing is written there and they are kept: {advice}")
  return listed


@contextlib.contextmanager
def writing(folder: str | os.PathLike, made: dict, files: Iterable[str],
            previous: dict | None = None) -> Iterator[None]:
  """The block writes `files` into folder; then the record `made` (+ the files) is published.

  One writer at a time (the folder's lock). A folder holding files that no record of ours lists
  is refused, and so is one whose files of ours were changed or deleted since (`verify`).
  While the block runs the record says "incomplete" and lists the old and the new files, so an
  interrupted run is redone by the next one, and no reader takes half-made data for finished;
  a failure that replaced no file puts the old record back. The finished record holds each
  file's size and SHA-256. `previous` stands for
  a record kept in an older form (ListOps' generator.json).
  """
  folder, files = os.fspath(folder), sorted(files)
  if os.path.isdir(folder):  # refused before the lock file is made in a folder not ours
    _cache_is_not_a_folder(folder)
    _listed(folder, files, previous)
  with publish.locked(folder):
    listed = _listed(folder, files, previous)  # again: another process may have written
    verify(folder)  # a user's edit of data we made is not written over either
    made, old, touched = {**made, "format": FORMAT}, read(folder), sorted(listed | set(files))
    before = _stamps(folder, touched)
    _write(folder, {**made, "complete": False, "files": touched})
    try:
      yield
    except BaseException:  # cleanup only, re-raised: a failure that replaced no file
      if _stamps(folder, touched) == before:  # leaves the older data (or none) as it was
        if old:
          _write(folder, old)
        else:
          os.unlink(os.path.join(folder, NAME))
      raise
    for name in sorted(listed - set(files)):  # leftovers of the older data: never read again
      _remove(folder, name)
    # Each file's stamp is taken before it is hashed: one edited while hashing is not vouched for.
    stamps = {name: _stamp(os.stat(os.path.join(folder, name))) for name in files}
    _write(folder, {**made, "complete": True,
                    "files": {name: _entry(folder, name) for name in files}})
    _write_checked(folder, stamps)


def is_complete(made: dict | None) -> bool:
  """False only for a record whose writing has not finished (no record: data given by hand)."""
  return made is None or bool(made.get("complete"))


def compare(made: dict, folder: str, task: str, data, remake: str) -> dict:
  """Checks a finished record against config.data; returns the note for Task.data.

  Every recorded setting must equal the config's field of that name; a smaller `max_len` cuts
  the rows (the note's "cut" is left None here: the loader measures it on the rows it reads,
  lra.data.notes). A difference stops the run, naming the fields and the remake command.
  """
  if not made.get("complete"):
    raise UserError(f"the data in {folder} is incomplete (making it was interrupted, or another "
                    f"process is making it now); make it again with: {remake}")
  differences = []
  if made["task"] != task:
    differences.append(f"it holds {made['task']} data, the config's task is {task}")
  if made.get("format") != FORMAT:
    differences.append(f"data format {made.get('format')}, this code reads format {FORMAT}")
  for key, value in sorted(made["settings"].items()):
    wanted = data.get(key)
    if key == CUTTABLE and isinstance(wanted, int) and wanted < 1:
      raise UserError(f"config.data.{key}={wanted}: give at least 1 (token per example)")
    cut = key == CUTTABLE and isinstance(wanted, int) and wanted < value  # the rows are cut
    if wanted != value and not cut:
      differences.append(f"config.data.{key}={wanted!r}, the data has {key}={value!r}")
  if differences:
    raise UserError(f"{folder} was made with other settings ({'; '.join(differences)}); make "
                    f"it again with: {remake}  (or point config.data.data_dir at another folder)")
  return {"record": {k: v for k, v in made.items() if k not in ("files", "complete")},
          "cut": None}


def check(folder: str, task: str, data, remake: str) -> dict:
  """compare() for a prepared folder, which always has a record (this code made it)."""
  made = read(folder)
  if made is None:
    raise UserError(f"{folder} has no {NAME}: it was prepared by an older version of this code "
                    f"or by hand, so what made it is unknown; delete it and make it again with: "
                    f"{remake}")
  return compare(made, folder, task, data, remake)
