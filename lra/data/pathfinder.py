"""Pathfinder / Path-X: reads the release layout (PNG + metadata) into prepared splits, and the
task loader (generating the images on first use, lra.data.pathfinder_gen).

Layout: <level>/imgs/<n>/sample_<i>.png and <level>/metadata/<n>.npy, one line per image:
`imgs/<n> sample_<i>.png 0 <label> ...` (field 0 folder, 1 file, 3 label). The release's
metadata files are plain text despite the name; the original generator's own are binary
np.save arrays of strings, one row per image: both are read. An empty (0-byte) image is
skipped, as the original pipelines skip the release's one (curv_baseline/imgs/0/sample_172.png),
and counted; a missing or undecodable one is an error.
"""
from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image

from lra.data import console, pathfinder_gen, publish, record, release_dirs, store
from lra.data.pathfinder_gen.params import IMAGES_TASK, LEVEL_FOLDERS
from lra.data.reading import decode_utf8
from lra.data.tasks import SPLITS, Task
from lra.errors import UserError

# Contiguous parts of the metadata order, in this order.
SPLIT_FRACTIONS = (("train", 0.8), ("val", 0.1), ("test", 0.1))
NPY_MAGIC = b"\x93NUMPY"  # how a binary np.save file begins

find_level_dir = release_dirs.level_dir  # the release's level folder from any of its folders


def metadata_lines(path: str) -> list[str]:
  """A metadata file's lines: text (UTF-8), or a binary np.save array of strings whose rows
  are the lines' fields (allow_pickle stays off: an object array is refused)."""
  with open(path, "rb") as f:
    data = f.read()
  if not data.startswith(NPY_MAGIC):
    return [decode_utf8(raw, f"{path}, line {number}")
            for number, raw in enumerate(data.splitlines(), 1)]
  try:
    rows = np.load(io.BytesIO(data), allow_pickle=False)
  except ValueError as e:
    raise UserError(f"{path}: an np.save array that cannot be read as metadata ({e}); copy "
                    f"the file again from the release") from None
  if rows.dtype.kind not in "US" or rows.ndim not in (1, 2):
    raise UserError(f"{path}: an np.save array of {rows.dtype} and shape {rows.shape}, not "
                    f"metadata rows (strings, one row per image)")
  # Python 2 (the original generator's) saved byte strings: UTF-8, as the text files are.
  return [" ".join(decode_utf8(v, f"{path}, row {number}") if isinstance(v, bytes) else str(v)
                   for v in np.atleast_1d(row)) for number, row in enumerate(rows, 1)]


def _listed(level_dir: str) -> list[tuple[str, int]]:
  """(png path, label) of every line of every metadata file, files in numeric order."""
  meta_dir = os.path.join(level_dir, "metadata")
  names = sorted((f for f in os.listdir(meta_dir) if f.endswith(".npy")),
                 key=lambda f: (len(f), f))
  items = []
  for name in names:
    meta_path = os.path.join(meta_dir, name)
    for number, line in enumerate(metadata_lines(meta_path), 1):
      fields = line.split()
      if not fields:
        continue
      if len(fields) < 4 or fields[3] not in ("0", "1"):
        raise UserError(f"{meta_path}, line {number}: expected `imgs/<n> sample_<i>.png "
                        f"0 <label 0 or 1> ...`, got {line.strip()[:80]!r}")
      items.append((os.path.join(level_dir, fields[0], fields[1]), int(fields[3])))
  if not items:
    raise UserError(f"{meta_dir} lists no images")
  return items


def read_listing(level_dir: str) -> tuple[list[tuple[str, int]], list[str]]:
  """(items, skipped): the (png path, label) of every image the metadata lists, and the paths
  of the empty (0-byte) ones left out of items. A listed image that is missing is an error."""
  items, skipped = [], []
  for png, label in _listed(level_dir):
    try:
      empty = os.path.getsize(png) == 0
    except FileNotFoundError:
      raise UserError(f"{png} is listed in {os.path.join(level_dir, 'metadata')} but missing: "
                      f"the copy of the release is incomplete, unpack it again") from None
    if empty:
      skipped.append(png)
    else:
      items.append((png, label))
  if not items:
    raise UserError(f"{level_dir}: every image its metadata lists is empty (0 bytes)")
  return items, skipped


def read_metadata(level_dir: str) -> list[tuple[str, int]]:
  """(png path, label) of every image, metadata files in numeric order, empty images skipped."""
  return read_listing(level_dir)[0]


def decode_png(path: str, size: int) -> np.ndarray:
  """8-bit grayscale pixels, row-major, as uint8 [size * size]."""
  try:
    with Image.open(path) as image:
      pixels = np.asarray(image.convert("L"), np.uint8)
  except (OSError, ValueError) as e:
    raise UserError(f"{path}: not a readable PNG image ({e})") from None
  if pixels.shape != (size, size):
    raise UserError(f"{path}: expected a {size}x{size} image, got {pixels.shape}")
  return pixels.reshape(-1)


def split_bounds(num: int) -> dict[str, tuple[int, int]]:
  """(start, end) of each split's part of the metadata order (SPLIT_FRACTIONS); the last one
  ends at `num`."""
  bounds, start, reached = {}, 0, 0.0
  for split, fraction in SPLIT_FRACTIONS:
    reached += fraction
    end = num if split == SPLIT_FRACTIONS[-1][0] else int(num * reached)
    bounds[split], start = (start, end), end
  return bounds


def _made(level_dir: str, size: int, skipped: int) -> dict:
  """The record of splits prepared from level_dir: the generator's settings if our generator
  made it (its own record says so), else the release folder's size and level, and how many
  empty images were skipped."""
  images = record.read(level_dir)
  if images is not None and images["task"] == IMAGES_TASK and images.get("complete"):
    return {"task": "pathfinder", "source": images["source"], "settings": {
        k: images["settings"][k] for k in ("size", "level", "num_images", "seed")}}
  level = {v: k for k, v in LEVEL_FOLDERS.items()}.get(os.path.basename(
      os.path.normpath(level_dir)))
  return {"task": "pathfinder", "settings": {"size": size, "level": level},
          "source": {"release_dir": os.path.abspath(level_dir),
                     "empty_images_skipped": skipped}}


def prepare(level_dir: str, data_dir: str, size: int, progress: bool = True) -> dict[str, int]:
  """Decodes the release's images into prepared splits in data_dir, one writer at a time."""
  items, skipped = read_listing(level_dir)
  if skipped:
    print(f"skipped {len(skipped)} empty (0-byte) image{'s' * (len(skipped) > 1)} that "
          f"{level_dir}/metadata lists, as the original did: "
          f"{record.few([os.path.relpath(p, level_dir) for p in skipped])}", flush=True)
  bounds = split_bounds(len(items))
  for split, (start, end) in bounds.items():
    if start == end:
      raise UserError(f"{level_dir} lists {len(items)} images, too few for the "
                      f"{'/'.join(str(round(f * 100)) for _, f in SPLIT_FRACTIONS)} splits (the "
                      f"{split} split would be empty); at least 10 are needed")
  counts = {}
  # A concurrent prepare of this folder waits (its lock), then rewrites it; the record of
  # what made the splits is written last.
  with record.writing(data_dir, _made(level_dir, size, len(skipped)), record.npy_files(
      SPLITS, ("inputs", "labels"))):
    for split, (start, end) in bounds.items():
      with store.SplitWriter(data_dir, split, end - start, {
          "inputs": ((size * size,), np.uint8), "labels": ((), np.int32)}) as writer:
        rows = console.bar(items[start:end], desc=f"pathfinder{size} {split}",
                           progress=progress, unit="img")
        for row, (png, label) in enumerate(rows):
          writer[row] = {"inputs": decode_png(png, size), "labels": label}
      counts[split] = end - start
  return counts


def prepared_dir(data_dir: str, level: str) -> str:
  return os.path.join(data_dir, LEVEL_FOLDERS[level] + "_prepared")


def generate_and_prepare(data_dir: str, *, size: int, level: str, num_images: int,
                         seed: int = 0, workers: int | None = None,
                         progress: bool = True) -> dict[str, int]:
  """Generates the release layout into data_dir/<level folder>, then prepares the splits."""
  level_dir = pathfinder_gen.generate_release(data_dir, size=size, level=level,
                                              num_images=num_images, seed=seed,
                                              workers=workers, progress=progress)
  return prepare(level_dir, prepared_dir(data_dir, level), size, progress)


def generate_command(data) -> str:
  return (f"python -m lra.data pathfinder --data_dir={data.data_dir} --size={data.size} "
          f"--level={data.level} --num_images={data.num_images} --seed={data.seed}")


def _release_advice(data, level_dir: str) -> str:
  """What to do when config.data.data_dir is (or holds) a level folder of the release."""
  out = f"data/pathfinder{data.size}_release"
  return (f"config.data.data_dir={data.data_dir} is the original release's Pathfinder data "
          f"(imgs/ and metadata/ of {os.path.basename(level_dir)}), read, not generated into: "
          f"prepare it with: python -m lra.data pathfinder --release_dir={data.data_dir} "
          f"--size={data.size} --level={data.level} --data_dir={out}  then train with "
          f"--config.data.data_dir={out}")


def _complete(prepared: str) -> bool:
  """All splits published, and the record (if any) finished: the labels alone are not enough
  once a rewrite of the folder has begun."""
  return store.exists(prepared, SPLITS) and record.is_complete(record.read(prepared))


def load(config) -> Task:
  """Pathfinder or Path-X (config.task) from prepared splits, generated first if allowed."""
  data = config.data
  if data.level not in LEVEL_FOLDERS:
    raise UserError(f"config.data.level={data.level!r} is not one of "
                    f"{', '.join(LEVEL_FOLDERS)}")
  prepared = prepared_dir(data.data_dir, data.level)
  if not _complete(prepared):
    record.verify(prepared, generate_command(data))  # a deleted split is not made again
    release = release_dirs.release_level(data.data_dir, data.size, data.level)
    if release is not None:  # the user's copy of the release: read it, never generate there
      raise UserError(_release_advice(data, release))
    if not data.generate_if_missing:
      raise UserError(f"Pathfinder data not found in {prepared}; make it with: "
                      f"{generate_command(data)}  (or add --release_dir=PATH/lra_release "
                      f"to read the original release)")
    if data.size not in pathfinder_gen.SIZES:
      raise UserError(f"config.data.size={data.size!r}: the generator makes sizes "
                      f"{', '.join(map(str, pathfinder_gen.SIZES))}")

    def make():
      print(f"Pathfinder data not found in {prepared}; generating it "
            f"(same as: {generate_command(data)})", flush=True)
      generate_and_prepare(data.data_dir, size=data.size, level=data.level,
                           num_images=data.num_images, seed=data.seed,
                           workers=data.workers or None)

    # Every process of a multi-host run gets here: one generates, the others wait and read
    # (the record, written last, marks the prepared data complete).
    publish.prepare_once(data.data_dir, lambda: _complete(prepared), make)
  # Made with the config's settings (or read from the release at its size and level)?
  note = record.check(prepared, "pathfinder", data, f"{generate_command(data)}  (or, from the "
                      f"original release: python -m lra.data pathfinder --data_dir="
                      f"{data.data_dir} --size={data.size} --level={data.level} "
                      f"--release_dir=PATH/lra_release)")
  length = data.size * data.size
  splits = {s: store.load_split(prepared, s, ["inputs"], length, remake=generate_command(data))
            for s in SPLITS}
  record.verify(prepared, generate_command(data))  # after the files' own checks: no edits
  return Task.of(config.task, length, splits, padding=data.black_is_padding, data=note)
