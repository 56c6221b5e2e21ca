"""Pathfinder / Path-X: reads the release layout (PNG + text metadata) into prepared splits.

Layout: <level>/imgs/<n>/sample_<i>.png and <level>/metadata/<n>.npy, which are plain text:
one line per image, `imgs/<n> sample_<i>.png 0 <label> ...` (field 0 folder, 1 file, 3 label).
"""
from __future__ import annotations

import os

import numpy as np
import tqdm
from PIL import Image

from lra import store

LEVEL_FOLDERS = {"easy": "curv_baseline", "intermediate": "curv_contour_length_9",
                 "hard": "curv_contour_length_14"}
# The one known empty image of the original release.
KNOWN_EMPTY = {("curv_baseline", "imgs/0", "sample_172.png")}
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
  raise FileNotFoundError(f"no {folder}/metadata folder for pathfinder{size} under {root}")


def read_metadata(level_dir: str) -> list[tuple[str, int]]:
  """(png path, label) of every image, metadata files in numeric order, known empty skipped."""
  meta_dir = os.path.join(level_dir, "metadata")
  names = sorted((f for f in os.listdir(meta_dir) if f.endswith(".npy")),
                 key=lambda f: (len(f), f))
  level = os.path.basename(os.path.normpath(level_dir))
  items = []
  for name in names:
    meta_path = os.path.join(meta_dir, name)
    with open(meta_path) as f:
      for number, line in enumerate(f, 1):
        fields = line.split()
        if not fields:
          continue
        if len(fields) < 4 or fields[3] not in ("0", "1"):
          raise ValueError(f"{meta_path}, line {number}: expected `imgs/<n> sample_<i>.png "
                           f"0 <label 0 or 1> ...`, got {line.strip()[:80]!r}")
        if (level, fields[0], fields[1]) in KNOWN_EMPTY:
          continue
        items.append((os.path.join(level_dir, fields[0], fields[1]), int(fields[3])))
  if not items:
    raise ValueError(f"{meta_dir} lists no images")
  return items


def decode_png(path: str, size: int) -> np.ndarray:
  """8-bit grayscale pixels, row-major, as uint8 [size * size]."""
  try:
    with Image.open(path) as image:
      pixels = np.asarray(image.convert("L"), np.uint8)
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: not a readable PNG image ({e})") from None
  if pixels.shape != (size, size):
    raise ValueError(f"{path}: expected a {size}x{size} image, got {pixels.shape}")
  return pixels.reshape(-1)


def split_bounds(num: int) -> dict[str, tuple[int, int]]:
  """Contiguous 80% / 10% / 10% of the metadata order."""
  train_end, val_end = int(num * 0.8), int(num * 0.9)
  return {"train": (0, train_end), "val": (train_end, val_end), "test": (val_end, num)}


def prepare(level_dir: str, data_dir: str, size: int, progress: bool = True) -> dict[str, int]:
  items = read_metadata(level_dir)
  counts = {}
  for split, (start, end) in split_bounds(len(items)).items():
    writer = store.SplitWriter(data_dir, split, end - start,
                               {"inputs": ((size * size,), np.uint8), "labels": ((), np.int32)})
    rows = tqdm.tqdm(items[start:end], desc=f"pathfinder{size} {split}", disable=not progress,
                     unit="img")
    for row, (png, label) in enumerate(rows):
      writer[row] = {"inputs": decode_png(png, size), "labels": label}
    writer.close()
    counts[split] = end - start
  return counts


def prepared_dir(data_dir: str, level: str) -> str:
  return os.path.join(data_dir, LEVEL_FOLDERS[level] + "_prepared")


def generate_and_prepare(data_dir: str, *, size: int, level: str, num_images: int,
                         seed: int = 0, workers: int | None = None,
                         progress: bool = True) -> dict[str, int]:
  """Generates the release layout into data_dir/<level folder>, then prepares the splits."""
  from lra import pathfinder_gen  # the generator is only needed when generating
  level_dir = pathfinder_gen.generate_release(data_dir, size=size, level=level,
                                              num_images=num_images, seed=seed,
                                              workers=workers, progress=progress)
  return prepare(level_dir, prepared_dir(data_dir, level), size, progress)
