"""Pathfinder / Path-X generator: a fast reimplementation of the "snakes" images of
Linsley et al. (2018) as LRA used them, writing the original release layout.

One image: two target snakes seeded `seed_distance` apart grow alternately, one paddle at a
time, `contour_length` paddles each; distractor snakes of `contour_length // 3` paddles then
fill the image; two disk markers sit on snake tips. Label 1: both markers on the two tips of
one target snake; label 0: the origin tip of one target and the far tip of the other.

Geometry, as read here from the algorithm description:
- A paddle is a straight antialiased bar of length `paddle_length` and full width
  `paddle_thickness` (flat ends). From a pivot it is placed on the circle of radius
  `paddle_length + margin` around that pivot: the bar ends on the circle (the new pivot) and
  starts `margin` pixels out, so a snake is a dashed line with gaps of about `margin`.
- Occupancy: a pixel is inked when any antialias sub-sample falls inside a bar. Every placed
  bar reserves its ink grown by a disk of radius `margin + 0.5` (at least `margin` clear
  pixels in every direction, diagonals included). A new bar's ink must miss everything
  reserved except its own snake's previous bar, and stay inside the `padding` border.
- Direction: candidates are NUM_ANGLES directions, all tested at once; a free one is drawn
  with weight max(cos(min(|dtheta| * continuity, pi/2)), 0)^2 relative to the previous
  direction (uniform for a snake's first bar). Since every candidate is tested, a retry could
  never find anything new: a target placement with no free candidate restarts the pair, and
  a stuck distractor is taken back and re-seeded (a few times, then skipped).
- Tips: the origin tip is the seed point (a marker-sized disk is reserved there from the
  start), the far tip is the last pivot. Far tips whose marker disk would touch the other
  target snake restart the pair, for both tips whatever the label, so label 0 and label 1
  images have the same geometry statistics. Marker disks are reserved before distractors.
- Contrast: a bar's pixel value is min(1, snake_contrast * paddle_contrast * coverage), the
  contrast acting as a gain on the antialiased coverage before clipping (32px: 2 * 0.75).
  Markers are drawn at full intensity. Image = pixelwise max of everything, times 255,
  rounded to uint8.
- Pivots live on a 1/SUBPIXEL pixel grid, so each (sub-pixel offset, direction) bar is a
  precomputed stamp: generation is a few small numpy operations per bar.

Every image's randomness comes from np.random.default_rng([seed, k]) alone (the label is its
first draw), so a release is the same for any number of worker processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import multiprocessing
import os
import tempfile
import time
from typing import Iterator

import numpy as np
from PIL import Image
from tqdm import tqdm

LEVELS: dict[str, tuple[str, int]] = {
  "easy": ("curv_baseline", 6),
  "intermediate": ("curv_contour_length_9", 9),
  "hard": ("curv_contour_length_14", 14),
}

# The table of LRA's parameters per image size. `distractor_budget` is the numerator of the
# distractor count: budget // distractor_length snakes. Path-X (128) uses margin 2.
_SIZE_TABLE: dict[int, dict] = {
  32: dict(padding=1, margin=1, seed_distance=7.0, marker_radius=1.5, paddle_length=2.0,
           paddle_thickness=0.5, continuity=1.0, distractor_budget=20, snake_contrast=2.0,
           paddle_contrast=0.75),
  64: dict(padding=1, margin=1, seed_distance=12.0, marker_radius=2.5, paddle_length=5.0,
           paddle_thickness=1.0, continuity=1.8, distractor_budget=22, snake_contrast=0.8),
  128: dict(padding=1, margin=2, seed_distance=20.0, marker_radius=3.0, paddle_length=5.0,
            paddle_thickness=1.5, continuity=1.8, distractor_budget=35, snake_contrast=0.9),
  256: dict(padding=22, margin=3, seed_distance=27.0, marker_radius=5.0, paddle_length=5.0,
            paddle_thickness=2.0, continuity=1.8, distractor_budget=30, snake_contrast=1.0),
}

NUM_ANGLES = 64  # candidate directions per bar (5.6 degrees apart)
SUBPIXEL = 4     # pivots are quantised to 1/SUBPIXEL pixel, so stamps can be precomputed


@dataclasses.dataclass(frozen=True)
class Params:
  """Everything one image depends on (besides its random generator and label)."""
  size: int
  level: str
  level_folder: str
  contour_length: int        # paddles per target snake
  distractor_length: int     # paddles per distractor snake: contour_length // 3
  num_distractors: int       # distractor_budget // distractor_length
  distractor_budget: int
  padding: int
  margin: int
  seed_distance: float
  marker_radius: float
  paddle_length: float
  paddle_thickness: float
  continuity: float
  snake_contrast: float
  paddle_contrast: float = 1.0
  antialias_scale: int = 4    # sub-samples per pixel side when drawing bars and disks
  max_pair_tries: int = 2000  # target-pair restarts before giving up on an image
  distractor_tries: int = 10  # seeds tried per distractor snake before skipping it

  @property
  def step(self) -> float:
    """Distance between consecutive pivots: the radius of the placement circle."""
    return self.paddle_length + self.margin


def params_for(size: int, level: str) -> Params:
  """The LRA parameters for one image size (32, 64, 128, 256) and level name."""
  if size not in _SIZE_TABLE:
    raise ValueError(f"unknown Pathfinder size {size!r}; valid sizes: "
                     f"{', '.join(map(str, _SIZE_TABLE))}")
  if level not in LEVELS:
    raise ValueError(f"unknown Pathfinder level {level!r}; valid levels: {', '.join(LEVELS)}")
  folder, contour_length = LEVELS[level]
  row = _SIZE_TABLE[size]
  distractor_length = max(1, contour_length // 3)
  return Params(size=size, level=level, level_folder=folder, contour_length=contour_length,
                distractor_length=distractor_length,
                num_distractors=row["distractor_budget"] // distractor_length, **row)


# ---------------------------------------------------------------------------------------------
# Precomputed stamps


@dataclasses.dataclass(frozen=True)
class _Stamps:
  """Per (sub-pixel row, sub-pixel col[, direction]) images in boxes centred on the pivot pixel.

  Box (bar or disk) covers pixel rows iy - half .. iy + half of the pivot's pixel iy.
  """
  half: int                 # bar box half size
  ink_flat: np.ndarray      # float32 [Q, Q, A, B*B]: 1 where the bar inks a pixel
  reserved: np.ndarray      # int16 [Q, Q, A, B, B]: ink grown by the margin
  value: np.ndarray         # float32 [Q, Q, A, B, B]: pixel values after contrast
  step_q: np.ndarray        # int64 [A, 2]: pivot displacement in 1/Q pixels, (row, col)
  weights: np.ndarray       # float64 [A, A]: continuity weight of direction b after a
  disk_half: int
  disk_ink: np.ndarray      # bool [Q, Q, D, D]: marker disk ink
  disk_reserved: np.ndarray  # int16 [Q, Q, D, D]
  disk_value: np.ndarray    # float32 [Q, Q, D, D]
  pad: int                  # grid border so every box around a pivot stays inside the grid


def _sample_coords(half: int, scale: int) -> np.ndarray:
  """Sub-sample centres along one box axis, relative to the pivot pixel's corner."""
  return (np.arange((2 * half + 1) * scale) + 0.5) / scale - half


def _downsample(inside: np.ndarray, box: int, scale: int) -> np.ndarray:
  """Coverage of each pixel: the mean of its scale x scale sub-samples."""
  shape = inside.shape[:-2] + (box, scale, box, scale)
  return inside.reshape(shape).mean(axis=(-3, -1), dtype=np.float32)


def _grow_by_margin(ink: np.ndarray, margin: int) -> np.ndarray:
  """Binary dilation of the last two axes by a disk of radius margin + 0.5 (no wrap)."""
  m = margin
  padded = np.pad(ink, [(0, 0)] * (ink.ndim - 2) + [(m, m), (m, m)])
  out = np.zeros_like(ink)
  h, w = ink.shape[-2:]
  for dy in range(-m, m + 1):
    for dx in range(-m, m + 1):
      if dy * dy + dx * dx <= (m + 0.5) ** 2:
        out |= padded[..., m + dy:m + dy + h, m + dx:m + dx + w]
  return out


@functools.lru_cache(maxsize=8)
def _stamps(params: Params) -> _Stamps:
  q, a_n, s = SUBPIXEL, NUM_ANGLES, params.antialias_scale
  length, half_width = params.paddle_length, params.paddle_thickness / 2
  # The box must hold the bar, its margin and the pivot's sub-pixel offset.
  half = math.ceil(params.step + half_width + params.margin) + 2
  box = 2 * half + 1
  angles = 2 * np.pi * np.arange(a_n) / a_n
  step_q = np.rint(q * params.step * np.stack([np.sin(angles), np.cos(angles)], -1))
  step_q = step_q.astype(np.int64)
  unit = step_q / np.linalg.norm(step_q, axis=1, keepdims=True)
  coords = _sample_coords(half, s)
  gain = params.snake_contrast * params.paddle_contrast
  coverage = np.empty((q, q, a_n, box, box), np.float32)
  for fy in range(q):
    for fx in range(q):
      pivot = (np.array([fy, fx]) + 0.5) / q
      end = pivot + step_q / q                  # the bar ends on the new pivot
      start = end - length * unit
      dy = coords[None, :, None] - start[:, 0, None, None]
      dx = coords[None, None, :] - start[:, 1, None, None]
      along = dy * unit[:, 0, None, None] + dx * unit[:, 1, None, None]
      across = dx * unit[:, 0, None, None] - dy * unit[:, 1, None, None]
      eps = 1e-9  # the pivot itself is a sub-sample centre: keep it inked despite rounding
      inside = (along >= -eps) & (along <= length + eps) & (np.abs(across) <= half_width + eps)
      coverage[fy, fx] = _downsample(inside, box, s)
  ink = coverage > 0
  reserved = _grow_by_margin(ink, params.margin).astype(np.int16)
  value = np.minimum(gain * coverage, 1.0).astype(np.float32)

  # Continuity: zero weight once the scaled turn reaches a right angle.
  turn = (np.arange(a_n)[None, :] - np.arange(a_n)[:, None] + a_n // 2) % a_n - a_n // 2
  scaled = np.abs(turn) * (2 * np.pi / a_n) * params.continuity
  weights = np.where(scaled < np.pi / 2, np.cos(np.minimum(scaled, np.pi / 2)) ** 2, 0.0)

  r = params.marker_radius
  disk_half = math.ceil(r + params.margin) + 2
  disk_box = 2 * disk_half + 1
  dcoords = _sample_coords(disk_half, s)
  centres = (np.arange(q) + 0.5) / q
  dist2 = ((dcoords[None, None, :, None] - centres[:, None, None, None]) ** 2 +
           (dcoords[None, None, None, :] - centres[None, :, None, None]) ** 2)
  disk_cov = _downsample(dist2 <= r * r, disk_box, s)
  disk_ink = disk_cov > 0
  return _Stamps(
    half=half, ink_flat=ink.reshape(q, q, a_n, box * box).astype(np.float32),
    reserved=reserved, value=value, step_q=step_q, weights=weights, disk_half=disk_half,
    disk_ink=disk_ink, disk_reserved=_grow_by_margin(disk_ink, params.margin).astype(np.int16),
    disk_value=np.minimum(disk_cov, 1.0), pad=max(half, disk_half) + 2)


# ---------------------------------------------------------------------------------------------
# One image

# A placed item: (row0, col0, reserved counts, pixel values or None) in grid coordinates.
_Record = tuple[int, int, np.ndarray, "np.ndarray | None"]


class _Board:
  """Reservation counts (so an item can be taken back) over a grid with a blocked border."""

  def __init__(self, params: Params, stamps: _Stamps):
    self.params, self.stamps = params, stamps
    pad = stamps.pad
    self.base = np.ones((params.size + 2 * pad,) * 2, np.int16)
    lo, hi = pad + params.padding, pad + params.size - params.padding
    self.base[lo:hi, lo:hi] = 0
    self.counts = self.base.copy()

  def reset(self) -> None:
    np.copyto(self.counts, self.base)

  def add(self, rec: _Record, counts: np.ndarray | None = None) -> None:
    y0, x0, res, _ = rec
    (self.counts if counts is None else counts)[y0:y0 + res.shape[0],
                                                x0:x0 + res.shape[1]] += res

  def remove(self, rec: _Record) -> None:
    y0, x0, res, _ = rec
    self.counts[y0:y0 + res.shape[0], x0:x0 + res.shape[1]] -= res

  def disk(self, pivot_q: tuple[int, int], draw: bool) -> tuple[_Record, np.ndarray]:
    """The record of a marker-sized disk at a pivot, and its ink mask."""
    st = self.stamps
    iy, fy = divmod(pivot_q[0], SUBPIXEL)
    ix, fx = divmod(pivot_q[1], SUBPIXEL)
    y0, x0 = iy + st.pad - st.disk_half, ix + st.pad - st.disk_half
    rec = (y0, x0, st.disk_reserved[fy, fx], st.disk_value[fy, fx] if draw else None)
    return rec, st.disk_ink[fy, fx]

  def disk_fits(self, pivot_q: tuple[int, int], counts: np.ndarray | None = None) -> bool:
    rec, ink = self.disk(pivot_q, draw=False)
    counts = self.counts if counts is None else counts
    y0, x0 = rec[0], rec[1]
    window = counts[y0:y0 + ink.shape[0], x0:x0 + ink.shape[1]]
    return not np.any(window[ink])

  def next_bar(self, rng: np.random.Generator, pivot_q: tuple[int, int], prev: int | None,
               last: _Record | None) -> tuple[int, _Record] | None:
    """Draws the next bar from a pivot among all free directions, or None if none is free."""
    st = self.stamps
    iy, fy = divmod(pivot_q[0], SUBPIXEL)
    ix, fx = divmod(pivot_q[1], SUBPIXEL)
    y0, x0 = iy + st.pad - st.half, ix + st.pad - st.half
    box = 2 * st.half + 1
    if last is not None:  # a bar may sit next to its own predecessor, only that one
      self.remove(last)
    taken = (self.counts[y0:y0 + box, x0:x0 + box] > 0).astype(np.float32).ravel()
    if last is not None:
      self.add(last)
    blocked = st.ink_flat[fy, fx] @ taken
    weights = np.where(blocked > 0, 0.0, 1.0 if prev is None else st.weights[prev])
    cumulative = np.cumsum(weights)
    if cumulative[-1] <= 0:
      return None
    angle = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    angle = min(angle, NUM_ANGLES - 1)
    return angle, (y0, x0, st.reserved[fy, fx, angle], st.value[fy, fx, angle])

  def grow(self, rng: np.random.Generator, pivots: list[tuple[int, int]],
           records: list[_Record], prev: int | None, last: _Record | None
           ) -> tuple[int, _Record] | None:
    """Adds one bar to a snake (pivots and records grow in place); None if stuck."""
    placed = self.next_bar(rng, pivots[-1], prev, last)
    if placed is None:
      return None
    angle, rec = placed
    self.add(rec)
    records.append(rec)
    step = self.stamps.step_q[angle]
    pivots.append((pivots[-1][0] + int(step[0]), pivots[-1][1] + int(step[1])))
    return placed


def _to_pixels(pivots: list[tuple[int, int]]) -> np.ndarray:
  """Quantised pivots as float (row, col) pixel coordinates (pixel centres at .5)."""
  return (np.asarray(pivots, np.float64) + 0.5) / SUBPIXEL


def _seed_pair(board: _Board, rng: np.random.Generator) -> list[tuple[int, int]] | None:
  p = board.params
  lo, hi = p.padding + p.marker_radius, p.size - p.padding - p.marker_radius
  for _ in range(100):
    a = lo + rng.random(2) * (hi - lo)
    phi = rng.random() * 2 * np.pi
    b = a + p.seed_distance * np.array([np.sin(phi), np.cos(phi)])
    if np.all((b >= lo) & (b <= hi)):
      return [tuple(int(v) for v in np.floor(c * SUBPIXEL)) for c in (a, b)]
  return None


def _grow_targets(board: _Board, rng: np.random.Generator
                  ) -> tuple[list[list[tuple[int, int]]], list[list[_Record]], int]:
  """Two target snakes grown alternately; restarts the pair until both fit."""
  p = board.params
  for attempt in range(p.max_pair_tries):
    board.reset()
    seeds = _seed_pair(board, rng)
    if seeds is None:
      continue
    pivots = [[seeds[0]], [seeds[1]]]
    records: list[list[_Record]] = [[], []]
    fits = True
    for s in (0, 1):  # reserve each origin tip (its marker's room) from the start
      if not board.disk_fits(seeds[s]):
        fits = False
        break
      rec, _ = board.disk(seeds[s], draw=False)
      board.add(rec)
      records[s].append(rec)
    if not fits:
      continue
    prev: list[int | None] = [None, None]
    for _ in range(p.contour_length):
      for s in (0, 1):
        placed = board.grow(rng, pivots[s], records[s], prev[s], records[s][-1])
        if placed is None:
          fits = False
          break
        prev[s] = placed[0]
      if not fits:
        break
    if not fits:
      continue
    # Either far tip may carry a marker: its disk must keep the margin from the other snake.
    for s in (0, 1):
      other = board.base.copy()
      for rec in records[1 - s]:
        board.add(rec, other)
      if not board.disk_fits(pivots[s][-1], other):
        fits = False
        break
    if fits:
      return pivots, records, attempt
  raise RuntimeError(f"pathfinder{p.size} {p.level}: could not place the two target snakes "
                     f"in {p.max_pair_tries} tries")


def _grow_distractors(board: _Board, rng: np.random.Generator
                      ) -> tuple[list[list[tuple[int, int]]], list[_Record]]:
  p = board.params
  lo, span = p.padding, p.size - 2 * p.padding
  snakes, drawn = [], []
  for _ in range(p.num_distractors):
    for _ in range(p.distractor_tries):
      seed = tuple(int(v) for v in np.floor((lo + rng.random(2) * span) * SUBPIXEL))
      pixel = [v // SUBPIXEL + board.stamps.pad for v in seed]
      if board.counts[pixel[0], pixel[1]] > 0:
        continue
      pivots, records = [seed], []
      prev, last = None, None
      for _ in range(p.distractor_length):
        placed = board.grow(rng, pivots, records, prev, last)
        if placed is None:
          break
        prev, last = placed
      if len(records) == p.distractor_length:
        snakes.append(pivots)
        drawn.extend(records)
        break
      for rec in records:  # stuck: take the partial snake back and re-seed
        board.remove(rec)
  return snakes, drawn


def generate_image(params: Params, rng: np.random.Generator,
                   label: int) -> tuple[np.ndarray, dict]:
  """One image (uint8 [size, size]) and its geometry.

  Geometry: `snakes` (two float arrays [contour_length + 1, 2] of (row, col) pivots, origin
  tip first), `markers` ([2, 2] marker centres), `marker_snakes` (the target snake each
  marker sits on), `marker_tips` ("origin", "far"), `distractors` (pivot arrays), `label`,
  `pair_restarts`.
  """
  if label not in (0, 1):
    raise ValueError(f"label must be 0 or 1, got {label!r}")
  stamps = _stamps(params)
  board = _Board(params, stamps)
  pivots, records, restarts = _grow_targets(board, rng)
  first = int(rng.integers(2))
  second = first if label == 1 else 1 - first
  marker_pivots = [pivots[first][0], pivots[second][-1]]
  markers = [board.disk(m, draw=True)[0] for m in marker_pivots]
  for rec in markers:  # distractors keep their margin from the markers too
    board.add(rec)
  distractors, distractor_records = _grow_distractors(board, rng)

  pad = stamps.pad
  canvas = np.zeros(board.counts.shape, np.float32)
  for rec in records[0] + records[1] + distractor_records + markers:
    y0, x0, _, value = rec
    if value is not None:
      view = canvas[y0:y0 + value.shape[0], x0:x0 + value.shape[1]]
      np.maximum(view, value, out=view)
  image = np.rint(canvas[pad:pad + params.size, pad:pad + params.size] * 255).astype(np.uint8)
  geometry = {
    "label": label,
    "snakes": [_to_pixels(pivots[0]), _to_pixels(pivots[1])],
    "markers": _to_pixels(marker_pivots),
    "marker_snakes": (first, second),
    "marker_tips": ("origin", "far"),
    "distractors": [_to_pixels(d) for d in distractors],
    "pair_restarts": restarts,
  }
  return image, geometry


def sample(params: Params, seed: int, index: int) -> tuple[np.ndarray, int, dict]:
  """Image `index` of a release made with `seed`: (image, label, geometry)."""
  rng = np.random.default_rng([seed, index])
  label = int(rng.integers(2))
  image, geometry = generate_image(params, rng, label)
  return image, label, geometry


# ---------------------------------------------------------------------------------------------
# The release layout


def _metadata_line(params: Params, folder: int, i: int, label: int, geometry: dict) -> str:
  # Fields 0, 1 and 3 are what readers use; the rest describe the image.
  return (f"imgs/{folder} sample_{i}.png 0 {label} {params.contour_length} "
          f"{params.distractor_length} {len(geometry['distractors'])} {params.size}")


def _write_png(path: str, image: np.ndarray) -> None:
  """Writes through a temporary file in the same folder, so a PNG is never half written."""
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".png")
  try:
    with os.fdopen(fd, "wb") as f:
      Image.fromarray(image, mode="L").save(f, format="PNG")
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise


def _write_text(path: str, lines: list[str]) -> None:
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".npy")
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
      f.write("".join(line + "\n" for line in lines))
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise


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
    raise ValueError(f"num_images must be >= 0, got {num_images}")
  if images_per_folder < 1:
    raise ValueError(f"images_per_folder must be >= 1, got {images_per_folder}")
  if workers is None:
    workers = os.cpu_count() or 1
  if workers < 1:
    raise ValueError(f"workers must be >= 1, got {workers}")
  level_dir = os.path.join(os.fspath(out_dir), params.level_folder)
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
  with tqdm(total=num_images, disable=not progress, unit="img",
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
  return level_dir


# ---------------------------------------------------------------------------------------------
# Benchmark


def benchmark(size: int, level: str, n: int = 200, seed: int = 0) -> dict[str, float]:
  """Seconds per image on this core (stamps precomputed first and timed apart)."""
  params = params_for(size, level)
  start = time.perf_counter()
  _stamps(params)
  setup = time.perf_counter() - start
  start = time.perf_counter()
  restarts = 0
  for k in range(n):
    restarts += sample(params, seed, k)[2]["pair_restarts"]
  per_image = (time.perf_counter() - start) / n
  return {"setup_s": setup, "s_per_image": per_image, "pair_restarts_per_image": restarts / n}


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description="Pathfinder generator benchmark (one core).")
  parser.add_argument("--bench", nargs=2, metavar=("SIZE", "LEVEL"), required=True,
                      help=f"image size ({', '.join(map(str, _SIZE_TABLE))}) and level "
                           f"({', '.join(LEVELS)})")
  parser.add_argument("--n", type=int, default=200, help="images to time")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--save", help="also write image 0 as a PNG here, to look at")
  args = parser.parse_args(argv)
  size, level = int(args.bench[0]), args.bench[1]
  result = benchmark(size, level, args.n, args.seed)
  print(f"pathfinder{size} {level}: {result['s_per_image'] * 1e3:.2f} ms/image "
        f"({1 / result['s_per_image']:.0f} images/s on one core), stamps "
        f"{result['setup_s']:.2f} s once, {result['pair_restarts_per_image']:.2f} pair "
        f"restarts/image")
  if args.save:
    Image.fromarray(sample(params_for(size, level), args.seed, 0)[0], mode="L").save(args.save)


if __name__ == "__main__":
  main()
