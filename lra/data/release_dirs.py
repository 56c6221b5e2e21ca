"""The original LRA release's folders, found from whichever of its folders a user names.

The release tarball unpacks to lra_release/lra_release/, which holds tsv_data/ (Retrieval's
new_aan_pairs.{train,eval,test}.tsv) and pathfinder{32,64,128,256}/<level>/{imgs,metadata}.
`--release_dir` may name the outer or the inner lra_release, tsv_data, a pathfinderNN folder or
a level folder: each task finds its own folder from any of them, or says in one line what it
looked for. `release_level` tells a Pathfinder data_dir that is (or holds) the release itself,
which is read with `--release_dir`, never generated into.
"""
from __future__ import annotations

import os
import re

from lra.data import record
from lra.data.pathfinder_gen.params import LEVEL_FOLDERS
from lra.errors import UserError

TSV_DATA = "tsv_data"
NESTED = "lra_release"  # the tarball's inner folder, of the same name as the outer one
_PATHFINDER = re.compile(r"pathfinder(\d+)")
_FOLDER_LEVELS = {folder: level for level, folder in LEVEL_FOLDERS.items()}


def _roots(given: str) -> list[str]:
  """The release roots `given` may stand for: itself, and the root above it when it is one of
  the release's own folders; each also with the tarball's nested lra_release/."""
  name = os.path.basename(given)
  roots = [given]
  if name == TSV_DATA or _PATHFINDER.fullmatch(name):
    roots.append(os.path.dirname(given))
  elif name in _FOLDER_LEVELS:
    roots.append(os.path.dirname(os.path.dirname(given)))
  return [path for root in roots for path in (root, os.path.join(root, NESTED))]


def _first(candidates: list[str], fits) -> str | None:
  return next((path for path in dict.fromkeys(candidates) if fits(path)), None)


def aan_dir(given: str, names: list[str]) -> str:
  """The folder holding the AAN TSV files `names` (the release's tsv_data), from `given`."""
  given = os.path.normpath(os.path.abspath(given))
  found = _first([given] + [os.path.join(root, TSV_DATA) for root in _roots(given)],
                 lambda path: any(os.path.isfile(os.path.join(path, n)) for n in names))
  if found is None:
    raise UserError(f"no {names[0]} (nor the other AAN files) in {given} or a {TSV_DATA} "
                    f"folder under it: pass the release's {TSV_DATA} folder, or the "
                    f"lra_release folder that holds it")
  return found


def _level_in(given: str, size: int, folder: str, need=("metadata",)) -> str | None:
  """The level folder `folder` of pathfinder<size> that `given` is or holds, else None."""
  candidates = [given, os.path.join(given, folder)] + [
      os.path.join(root, f"pathfinder{size}", folder) for root in _roots(given)]
  return _first(candidates, lambda path: os.path.basename(path) == folder and all(
      os.path.isdir(os.path.join(path, sub)) for sub in need))


def _named_size(given: str) -> int | None:
  """The image size a pathfinderNN folder (or a level folder inside one) names."""
  for name in (os.path.basename(given), os.path.basename(os.path.dirname(given))):
    match = _PATHFINDER.fullmatch(name)
    if match:
      return int(match.group(1))
  return None


def level_dir(given: str, size: int, level: str) -> str:
  """The release's pathfinder<size>/<level folder> (with its metadata/), from `given`."""
  given, folder = os.path.normpath(os.path.abspath(given)), LEVEL_FOLDERS[level]
  named = _named_size(given)
  if named is not None and named != size:
    raise UserError(f"{given} is the release's pathfinder{named}, but the size asked for is "
                    f"{size}: pass --size={named}, or the folder that holds pathfinder{size}")
  other = _FOLDER_LEVELS.get(os.path.basename(given))
  if other is not None and other != level:
    raise UserError(f"{given} is the release's {other} level, but the level asked for is "
                    f"{level}: pass --level={other}, or the lra_release folder to read {level}")
  found = _level_in(given, size, folder)
  if found is None:
    raise UserError(f"no pathfinder{size}/{folder}/metadata in {given} or under it: pass the "
                    f"release's lra_release folder (or its pathfinder{size} or {folder} "
                    f"folder)")
  return found


def release_level(folder: str, size: int, level: str) -> str | None:
  """A level folder of the release (imgs/ and metadata/, no record of this code's generator)
  that `folder` is, is in or holds: the asked level first, then any; None when there is none."""
  folder = os.path.normpath(os.path.abspath(folder))
  for name in dict.fromkeys([LEVEL_FOLDERS[level], *LEVEL_FOLDERS.values()]):
    found = _level_in(folder, size, name, need=("metadata", "imgs"))
    if found is not None and record.read(found) is None:
      return found
  return None
