"""Pathfinder / Path-X: reads the release layout (PNG + text metadata) into prepared splits,
and the task loader (generating the images on first use, lra.data.pathfinder_gen).

Layout: <level>/imgs/<n>/sample_<i>.png and <level>/metadata/<n>.npy, which are plain text:
one line per image, `imgs/<n> sample_<i>.png 0 <label> ...` (field 0 folder, 1 file, 3 label).
"""
from __future__ import annotations

import os

import numpy as np
from PIL import Image

from lra.data import console, pathfinder_gen, publish, record, store
from lra.data.pathfinder_gen.params import IMAGES_TASK, LEVEL_FOLDERS
from lra.data.reading import decode_utf8
from lra.data.tasks import SPLITS, Task
from lra.errors import UserError

# The one known empty image of the original release.
KNOWN_EMPTY = {("curv_baseline", "imgs/0", "sample_172.png")}
# Contiguous parts of the metadata order, in this order.
SPLIT_FRACTIONS = (("train", 0.8), ("val", 0.1), ("test", 0.1))


def find_level_dir(root: str, size: int, level: str) -> str:
  """Accepts the level folder itself, a pathfinder<size> folder or the whole lra_release."""
  folder = LEVEL_FOLDERS[level]
  for candidate in (root, os.path.join(root, folder),
                    os.path.join(root, f"pathfinder{size}", folder),
                    os.path.join(root, "lra_release", f"pathfinder{size}", folder)):
    if os.path.isdir(os.path.join(candidate, "metadata")) and \
        os.path.basename(os.path.normpath(candidate)) == folder:
      return candidate
  raise UserError(f"no {folder}/metadata folder for pathfinder{size} under {root}")


def read_metadata(level_dir: str) -> list[tuple[str, int]]:
  """(png path, label) of every image, metadata files in numeric order, known empty skipped."""
  meta_dir = os.path.join(level_dir, "metadata")
  names = sorted((f for f in os.listdir(meta_dir) if f.endswith(".npy")),
                 key=lambda f: (len(f), f))
  level = os.path.basename(os.path.normpath(level_dir))
  items = []
  for name in names:
    meta_path = os.path.join(meta_dir, name)
    with open(meta_path, "rb") as f:
      for number, raw in enumerate(f, 1):
        line = decode_utf8(raw, f"{meta_path}, line {number}")
        fields = line.split()
        if not fields:
          continue
        if len(fields) < 4 or fields[3] not in ("0", "1"):
          raise UserError(f"{meta_path}, line {number}: expected `imgs/<n> sample_<i>.png "
                          f"0 <label 0 or 1> ...`, got {line.strip()[:80]!r}")
        if (level, fields[0], fields[1]) in KNOWN_EMPTY:
          continue
        items.append((os.path.join(level_dir, fields[0], fields[1]), int(fields[3])))
  if not items:
    raise UserError(f"{meta_dir} lists no images")
  return items


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


def _made(level_dir: str, size: int) -> dict:
  """The record of splits prepared from level_dir: the generator's settings if our generator
  made it (its own record says so), else the release folder's size and level."""
  images = record.read(level_dir)
  if images is not None and images["task"] == IMAGES_TASK and images.get("complete"):
    return {"task": "pathfinder", "source": images["source"], "settings": {
        k: images["settings"][k] for k in ("size", "level", "num_images", "seed")}}
  level = {v: k for k, v in LEVEL_FOLDERS.items()}.get(os.path.basename(
      os.path.normpath(level_dir)))
  return {"task": "pathfinder", "settings": {"size": size, "level": level},
          "source": {"release_dir": os.path.abspath(level_dir)}}


def prepare(level_dir: str, data_dir: str, size: int, progress: bool = True) -> dict[str, int]:
  """Decodes the release's images into prepared splits in data_dir, one writer at a time."""
  items = read_metadata(level_dir)
  bounds = split_bounds(len(items))
  for split, (start, end) in bounds.items():
    if start == end:
      raise UserError(f"{level_dir} lists {len(items)} images, too few for the "
                      f"{'/'.join(str(round(f * 100)) for _, f in SPLIT_FRACTIONS)} splits (the "
                      f"{split} split would be empty); at least 10 are needed")
  counts = {}
  # A concurrent prepare of this folder waits (its lock), then rewrites it; the record of
  # what made the splits is written last.
  with record.writing(data_dir, _made(level_dir, size), record.npy_files(SPLITS, (
      "inputs", "labels"))):
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
