"""One image: two target snakes, distractor snakes and two markers on a reservation board."""

from __future__ import annotations

import numpy as np

from lra.data.pathfinder_gen.params import NUM_ANGLES, SUBPIXEL, Params
from lra.data.pathfinder_gen.stamps import Stamps, make_stamps

# A placed item: (row0, col0, reserved counts, pixel values or None) in grid coordinates.
_Record = tuple[int, int, np.ndarray, "np.ndarray | None"]


class _Board:
  """Reservation counts (so an item can be taken back) over a grid with a blocked border."""

  def __init__(self, params: Params, stamps: Stamps):
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
  stamps = make_stamps(params)
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

