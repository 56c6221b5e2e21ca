"""Writes generated images in the original release layout, in parallel, in a fixed order."""

from __future__ import annotations

import multiprocessing
import os
from typing import Iterator

import numpy as np
from PIL import Image

from lra import paths
from lra.data import console, record
from lra.data.pathfinder_gen.params import IMAGES_TASK, Params, params_for
from lra.data.pathfinder_gen.snakes import sample
from lra.errors import UserError


def _metadata_line(params: Params, folder: int, i: int, label: int, geometry: dict) -> str:
  # The snakes code's fields: folder, file, index, label, continuity, contour length,
  # distractor length, paddle length, paddle thickness, margin, paddle contrasts. Readers use
  # fields 0, 1 and 3.
  return (f"imgs/{folder} sample_{i}.png {i} {label} {float(params.continuity)} "
          f"{params.contour_length} {params.distractor_length} {params.paddle_length} "
          f"{float(params.paddle_thickness)} {geometry['margin']} 1")


def _write_png(path: str, image: np.ndarray) -> None:
  """Writes through a unique temporary file beside it, so a PNG is never half written."""
  with paths.atomic_write(path, "wb") as f:
    Image.fromarray(image, mode="L").save(f, format="PNG")


def _write_text(path: str, lines: list[str]) -> None:
  with paths.atomic_write(path, "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(line + "\n" for line in lines))


def _make_chunk(args: tuple[str, int, str, int, int, int, int]) -> tuple[int, list[str]]:
  """Writes images start..stop-1 (all in one folder); returns (folder, metadata lines)."""
  level_dir, size, level, seed, start, stop, per_folder = args
  params = params_for(size, level)
  folder = start // per_folder
  lines = []
  for k in range(start, stop):
    image, label, geometry = sample(params, seed, k)
    i = k % per_folder
    _write_png(os.path.join(level_dir, "imgs", str(folder), f"sample_{i}.png"), image)
    lines.append(_metadata_line(params, folder, i, label, geometry))
  return folder, lines


def _chunks(num_images: int, per_folder: int, chunk: int) -> Iterator[tuple[int, int]]:
  """(start, stop) ranges that never cross a folder boundary."""
  for folder_start in range(0, num_images, per_folder):
    folder_stop = min(folder_start + per_folder, num_images)
    for start in range(folder_start, folder_stop, chunk):
      yield start, min(start + chunk, folder_stop)


def generate_release(out_dir: str | os.PathLike, *, size: int, level: str, num_images: int,
                     seed: int = 0, workers: int | None = None, images_per_folder: int = 1000,
                     progress: bool = True) -> str:
  """Writes out_dir/<level folder>/imgs/<n>/sample_<i>.png and metadata/<n>.npy (text).

  Image k is folder k // images_per_folder, i = k % images_per_folder, and depends only on
  (seed, k). A folder's metadata file is written once all its images are. Returns the level
  folder.
  """
  params = params_for(size, level)
  if num_images < 0:
    raise UserError(f"num_images must be >= 0, got {num_images}")
  if images_per_folder < 1:
    raise ValueError(f"images_per_folder must be >= 1, got {images_per_folder}")
  if workers is None:
    workers = os.cpu_count() or 1
  if workers < 1:
    raise UserError(f"workers must be >= 1, got {workers}")
  level_dir = os.path.join(os.fspath(out_dir), params.level_folder)
  settings = dict(size=size, level=level, num_images=num_images, seed=seed,
                  images_per_folder=images_per_folder)
  made = {"task": IMAGES_TASK, "settings": settings, "source": {"generator": __package__}}
  # Only into an empty folder or one generated before, whose other images and metadata files
  # (a bigger run's) are removed: the reader takes every metadata file it finds.
  with record.writing(level_dir, made, _files(num_images, images_per_folder)):
    _write_all(level_dir, size, level, seed, num_images, images_per_folder, workers, progress)
  return level_dir


def _files(num_images: int, per_folder: int) -> list[str]:
  """The files a generated level folder holds (relative paths), for its record."""
  return ([f"metadata/{folder}.npy" for folder in range(-(-num_images // per_folder))]
          + [f"imgs/{k // per_folder}/sample_{k % per_folder}.png" for k in range(num_images)])


def _write_all(level_dir: str, size: int, level: str, seed: int, num_images: int,
               images_per_folder: int, workers: int, progress: bool) -> None:
  params = params_for(size, level)
  num_folders = -(-num_images // images_per_folder)
  os.makedirs(os.path.join(level_dir, "metadata"), exist_ok=True)
  for folder in range(num_folders):
    os.makedirs(os.path.join(level_dir, "imgs", str(folder)), exist_ok=True)

  # Small chunks keep every worker busy and the bar moving; big images take longer each.
  chunk = max(1, min(images_per_folder, 4096 // size))
  args = [(level_dir, size, level, seed, start, stop, images_per_folder)
          for start, stop in _chunks(num_images, images_per_folder, chunk)]
  pending = {f: min(images_per_folder, num_images - f * images_per_folder)
             for f in range(num_folders)}
  lines: dict[int, list[str]] = {f: [] for f in range(num_folders)}
  with console.bar(total=num_images, progress=progress, unit="img",
            desc=f"pathfinder{size} {params.level_folder}") as bar:

    def collect(results):
      for folder, chunk_lines in results:
        lines[folder].extend(chunk_lines)
        pending[folder] -= len(chunk_lines)
        bar.update(len(chunk_lines))
        if pending[folder] == 0:  # chunks arrive in order, so the lines are in order too
          _write_text(os.path.join(level_dir, "metadata", f"{folder}.npy"), lines.pop(folder))

    if workers == 1 or len(args) <= 1:
      collect(map(_make_chunk, args))
    else:
      # spawn, not fork: the caller may already run JAX's threads, which a fork would copy broken.
      with multiprocessing.get_context("spawn").Pool(min(workers, len(args))) as pool:
        collect(pool.imap(_make_chunk, args))

