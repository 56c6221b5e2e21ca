"""One image: two target snakes, distractor snakes and two markers, as the snakes code makes them.

Coordinates are whole pixels (row, col); orientations are radians with the row along sin.
The occupancy `mask` holds, per pixel, the resampled masks of placed paddles (0..1) and 1 on
the padding border; `image` holds the maximum of the placed paddles' ink times their contrast.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from lra.data.pathfinder_gen import stamps
from lra.data.pathfinder_gen.params import Params

_FREE = 0.3       # a pixel whose occupancy is at most this can take a seed
_OVERLAP = 1.8    # a paddle is refused where its mask plus the occupancy reaches this
_CROWDED = 0.01   # no more distractors once under this share of the image is free


@dataclasses.dataclass
class _Snake:
  pivot: tuple[int, int]      # the point the next paddle is placed around
  orientation: float          # direction of the last step (radians)
  last: tuple                 # (row, col, mask window) of the last paddle, not yet in `mask`
  points: list                # the paddles' first pixels; [0] is the origin tip, [-1] the far tip


@functools.lru_cache(maxsize=16384)
def _paddle(orientation: float, length: int, thickness: float, margin: int, aa: int,
            contrast: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Float windows (ink times contrast, mask, mask grown by the margin's disk), in float32 as
  the snakes code stores them; the grown window is `margin` wider on every side."""
  ink, mask = stamps.paddle(orientation, length, thickness, margin, aa)
  mask = (mask / 255).astype(np.float32)
  return (ink / 255 * contrast).astype(np.float32), mask, _grow_window(mask, margin)


class _Canvas:
  """The occupancy of one image in the making, and the paddles placed so far.

  `mask` is the occupancy; `grown` the occupancy grown by a disk of radius margin (what a
  paddle's end is weighted by), kept up to date paddle by paddle since growing commutes with
  the maximum. Both sit inside zero borders wider than a paddle's window, so a window is read
  without clipping. Ink is only drawn once the image is complete (`render`): most target
  pairs are abandoned before that.
  """

  def __init__(self, p: Params, margin: int):
    self.p, self.margin, self.size = p, margin, p.size
    self.half = stamps.half_size(p.paddle_length, p.paddle_thickness, margin)
    self.pad = self.half + margin
    self.style = (p.paddle_length, p.paddle_thickness, margin, p.antialias_scale)
    self.paddles: list[tuple[tuple[int, int], float, float]] = []
    self.empty = True  # nothing occupied yet: seeds come from a cache, no arrays are made

  def materialize(self) -> None:
    """Makes the occupancy arrays (most target pairs fail at their first seed, without)."""
    empty = _empty(self.size, self.p.padding, self.margin, self.pad)
    self.padded_mask, self.padded_grown = empty[0].copy(), empty[1].copy()
    self._views()

  def _views(self) -> None:
    inner = slice(self.pad, self.pad + self.size)
    self.mask = self.padded_mask[inner, inner]
    self.flat_grown = self.padded_grown.reshape(-1)

  def copy(self) -> "_Canvas":
    other = object.__new__(_Canvas)
    other.__dict__.update(self.__dict__, padded_mask=self.padded_mask.copy(),
                          padded_grown=self.padded_grown.copy(), paddles=list(self.paddles))
    other._views()
    return other

  def inside(self, point: tuple[int, int]) -> bool:
    return 0 <= point[0] < self.size and 0 <= point[1] < self.size

  def _box(self, point: tuple[int, int], half: int) -> tuple[slice, slice]:
    y, x = point[0] + self.pad, point[1] + self.pad  # a padded window centred on the pixel
    return slice(y - half, y + half + 1), slice(x - half, x + half + 1)

  def ink(self, point: tuple[int, int], orientation: float, contrast: float) -> tuple:
    """Places a paddle from `point`; returns its (row, col, mask, grown mask) record."""
    self.paddles.append((point, orientation, contrast))
    return (point[0], point[1]) + _paddle(orientation, *self.style, contrast)[1:]

  def occupy(self, record: tuple) -> None:
    """Adds a paddle's mask to the occupancy; what falls outside the image is cut off."""
    y, x, mask, grown = record
    if not (self.half <= y < self.size - self.half and self.half <= x < self.size - self.half):
      _, inner = stamps.window(y, x, self.half, self.size, self.size)
      mask = np.zeros_like(mask)
      mask[inner] = record[2][inner]
      grown = _grow_window(mask, self.margin)
    box = self.padded_mask[self._box((y, x), self.half)]
    np.maximum(box, mask, out=box)
    box = self.padded_grown[self._box((y, x), self.pad)]
    np.maximum(box, grown, out=box)
    self.empty = False

  def fits(self, point: tuple[int, int], mask: np.ndarray) -> bool:
    return bool((self.padded_mask[self._box(point, self.half)] + mask).max() < _OVERLAP)

  def free_seeds(self, orientation: float, border: int) -> np.ndarray:
    """Flat indices of pixels a paddle in `orientation` may start from (`border` kept clear)."""
    if self.empty:  # the first target's seed: the same for every image
      return _free_on_empty(orientation, self.style, self.size, self.p.padding, border)
    return _free(self.mask, orientation, self.style, border)

  def render(self) -> np.ndarray:
    """The image: the maximum of every placed paddle's ink times its contrast."""
    image = np.zeros_like(self.padded_mask)
    for point, orientation, contrast in self.paddles:
      box = image[self._box(point, self.half)]
      np.maximum(box, _paddle(orientation, *self.style, contrast)[0], out=box)
    inner = slice(self.pad, self.pad + self.size)
    return image[inner, inner]


def _grow_window(mask: np.ndarray, margin: int) -> np.ndarray:
  """A window grown by the disk of radius margin, into a window `margin` wider each side."""
  h, w = mask.shape
  out = np.zeros((h + 2 * margin, w + 2 * margin), mask.dtype)
  for dy, dx in stamps.disk(margin):  # the disk is symmetric: spreading equals gathering
    box = out[margin + dy:margin + dy + h, margin + dx:margin + dx + w]
    np.maximum(box, mask, out=box)
  return out


@functools.lru_cache(maxsize=64)
def _empty(size: int, padding: int, margin: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
  """The padded (occupancy, grown occupancy) of an empty image: its padding border is taken."""
  mask = np.zeros((size, size))
  mask[:padding], mask[-padding:], mask[:, :padding], mask[:, -padding:] = 1, 1, 1, 1
  grown = stamps.grow(mask, stamps.disk(margin))  # outside the image counts as free
  return np.pad(mask, pad), np.pad(grown, pad)


def _free(mask: np.ndarray, orientation: float, style: tuple, border: int) -> np.ndarray:
  offsets = stamps.seed_offsets(orientation, *style, mask.shape[0])
  if offsets is None:
    return np.zeros(0, np.int64)
  blocked = mask > _FREE
  blocked[:border], blocked[-border:], blocked[:, :border], blocked[:, -border:] = (
    True, True, True, True)
  return np.flatnonzero(~stamps.grow(blocked, offsets))


@functools.lru_cache(maxsize=4096)
def _free_on_empty(orientation: float, style: tuple, size: int, padding: int,
                   border: int) -> np.ndarray:
  pad = style[2]
  mask = _empty(size, padding, style[2], pad)[0][pad:pad + size, pad:pad + size]
  return _free(mask.copy(), orientation, style, border)


_ORIENTATION_IDS: dict[bytes, int] = {}  # equal orientation arrays share an id ...
_ORIENTATIONS: list[np.ndarray] = []       # ... indexing this list


@functools.lru_cache(maxsize=1 << 16)
def _circle(size: int, radius: int, pad: int, py: int, px: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
  """The distinct in-image pixels on the circle around a pivot, one sample per pixel of arc,
  in row-major order: (pixels [K, 2], orientations from the pivot [K], flat indices in the
  padded canvas [K], an id shared by equal orientation arrays); None when none is inside."""
  dy, dx = stamps.circle_offsets(radius)
  ys, xs = py + dy, px + dx
  keep = (ys < size) & (ys >= 0) & (xs < size) & (xs >= 0)
  if not keep.any():
    return None
  flat = np.unique(ys[keep].astype(np.int64) * size + xs[keep].astype(np.int64))
  ends = np.stack(np.divmod(flat, size), axis=1)
  orientations = np.arctan2(ends[:, 0] - py, ends[:, 1] - px)
  padded = (ends[:, 0] + pad) * (size + 2 * pad) + ends[:, 1] + pad
  key = _ORIENTATION_IDS.setdefault(orientations.tobytes(), len(_ORIENTATION_IDS))
  if key == len(_ORIENTATIONS):
    _ORIENTATIONS.append(orientations)
  return ends, orientations, padded, key


@functools.lru_cache(maxsize=1 << 16)
def _continuity(key: int, orientation: float, continuity: float
                ) -> tuple[np.ndarray, np.ndarray]:
  """(indices, weights) of the ends of circle `key` with a nonzero continuity weight
  max(cos(min(turn * continuity, pi/2)), 0)^2; the others can never be drawn."""
  turn = np.abs(_ORIENTATIONS[key] - orientation)
  turn = np.minimum(np.minimum(turn, 2 * np.pi - turn) * continuity, 0.5 * np.pi)
  weights = np.maximum(np.cos(turn), 0) ** 2
  nonzero = np.flatnonzero(weights)
  return nonzero, weights[nonzero]


def _reverse(orientation: float) -> float:
  return orientation + np.pi if orientation + np.pi < np.pi else orientation - np.pi


def _seed(c: _Canvas, rng: np.random.Generator, border: int
          ) -> tuple[tuple[int, int], float, tuple[int, int]] | None:
  """A first paddle's (start pixel, orientation, pivot) on a free pixel, or None."""
  p = c.p
  for _ in range(p.paddle_tries):
    orientation = int(rng.integers(-180, 180)) * np.pi / 180
    free = c.free_seeds(orientation, border)
    if free.size == 0:
      return None
    tail = tuple(int(v) for v in divmod(int(free[rng.integers(0, free.size)]), c.size))
    head = stamps.translate(tail, orientation, p.paddle_length)
    pivot = stamps.translate(head, _reverse(orientation), p.paddle_length + c.margin)
    if c.inside(head) and c.inside(pivot):
      return tail, orientation, pivot
  return None


def _partner(c: _Canvas, rng: np.random.Generator, tail1: tuple[int, int]
             ) -> tuple[tuple[int, int], float, tuple[int, int]] | None:
  """The second target's first paddle: seed_distance from the first in any direction."""
  p = c.p
  for _ in range(p.paddle_tries):
    orientation = int(rng.integers(-180, 180)) * np.pi / 180
    angle = int(rng.integers(0, 360)) * np.pi / 180
    tail = (int(np.round(tail1[0] + p.seed_distance * np.sin(angle))),
            int(np.round(tail1[1] + p.seed_distance * np.cos(angle))))
    head = stamps.translate(tail, orientation, p.paddle_length)
    pivot = stamps.translate(head, _reverse(orientation), p.paddle_length + c.margin)
    if c.inside(head) and c.inside(pivot):
      return tail, orientation, pivot
  return None


def _candidates(c: _Canvas, pivot: tuple[int, int], orientation: float) -> tuple | None:
  """Ends on the circle around `pivot`: (pixels [K, 2], orientations [K], the indices of the
  ends that can be drawn [J], their cumulative weights [J]); None if no end can be.

  An end's weight: the continuity term of its turn, times how free it is (1 minus the
  occupancy grown by the margin)."""
  circle = _circle(c.size, c.p.paddle_length + c.margin, c.pad, pivot[0], pivot[1])
  if circle is None:
    return None
  ends, orientations, padded, key = circle
  nonzero, weights = _continuity(key, orientation, c.p.continuity)
  cumulative = np.cumsum((1 - c.flat_grown[padded[nonzero]]) * weights)
  if cumulative.size == 0 or cumulative[-1] < 1e-4:
    return None
  return ends, orientations, nonzero, cumulative


def _extend(c: _Canvas, rng: np.random.Generator, snake: _Snake, contrast: float) -> bool:
  """Adds one paddle to a snake, drawn around a pivot one gap past its last paddle."""
  p = c.p
  pivot = stamps.translate(snake.pivot, snake.orientation, p.paddle_length + 2 * c.margin)
  found = _candidates(c, pivot, snake.orientation)
  if found is None:
    return False
  ends, orientations, nonzero, cumulative = found
  for _ in range(p.paddle_tries):
    # The first end whose cumulative weight passes r (the snakes code falls back to its first
    # end, here the first with a nonzero weight, when rounding leaves the total below r).
    k = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    k = nonzero[k % len(cumulative)]
    head = (int(ends[k, 0]), int(ends[k, 1]))
    backwards = stamps.flip(orientations[k])  # the paddle is drawn from its end to the pivot
    if c.fits(head, _paddle(backwards, *c.style, contrast)[1]):
      break
  else:
    return False
  record = c.ink(head, backwards, contrast)
  c.occupy(snake.last)  # a paddle may touch its predecessor's room, so that joins only now
  snake.pivot, snake.orientation, snake.last = pivot, float(orientations[k]), record
  snake.points.append(head)
  return True


def _targets(p: Params, margin: int, rng: np.random.Generator
             ) -> tuple[_Canvas, list[_Snake]] | None:
  """The two target snakes, grown alternately; None when they do not fit (start again)."""
  c = _Canvas(p, margin)
  first = _seed(c, rng, border=2 * p.seed_distance)
  if first is None:
    return None
  second = _partner(c, rng, first[0])
  if second is None:
    return None
  c.materialize()
  contrast = p.paddle_contrast * p.snake_contrast
  snakes = [_Snake(pivot, orientation, c.ink(tail, orientation, contrast), [tail])
            for tail, orientation, pivot in (first, second)]
  for _ in range(p.contour_length - 1):
    for snake in snakes:
      if not _extend(c, rng, snake, contrast):
        return None
  c.occupy(snakes[1].last)  # as the snakes code: the first snake's last paddle stays out
  return c, snakes


def _distractor(c: _Canvas, rng: np.random.Generator) -> _Canvas | None:
  """The canvas with one more distractor snake, or None when it does not fit."""
  p = c.p
  if np.count_nonzero(c.mask <= _FREE) / c.mask.size < _CROWDED:
    return None
  c = c.copy()
  seed = _seed(c, rng, border=1)
  if seed is None:
    return None
  tail, orientation, pivot = seed
  snake = _Snake(pivot, orientation, c.ink(tail, orientation, p.snake_contrast), [tail])
  for _ in range(p.distractor_length - 1):
    if not _extend(c, rng, snake, p.snake_contrast):
      return None
  c.occupy(snake.last)
  return c


def generate_image(params: Params, rng: np.random.Generator,
                   label: int) -> tuple[np.ndarray, dict]:
  """One image (uint8 [size, size]) and its geometry.

  Geometry: `snakes` (two int arrays [contour_length, 2]: each paddle's first pixel, origin tip
  first, far tip last), `markers` ([2, 2] marker centre pixels), `marker_snakes` (the target
  snake each marker sits on), `margin`, `distractors` (how many were placed), `label`,
  `pair_restarts`.
  """
  if label not in (0, 1):
    raise ValueError(f"label must be 0 or 1, got {label!r}")
  p = params
  margin = p.margins[int(rng.integers(0, len(p.margins)))]
  for restarts in range(p.max_pair_tries):
    placed = _targets(p, margin, rng)
    if placed is not None:
      break
  else:
    raise RuntimeError(f"pathfinder{p.size} {p.level}: could not place the two target snakes "
                       f"in {p.max_pair_tries} tries")
  canvas, snakes = placed
  distractors = 0
  for _ in range(p.num_distractors):
    for _ in range(p.distractor_tries):
      grown = _distractor(canvas, rng)
      if grown is not None:
        canvas, distractors = grown, distractors + 1
        break
  first = int(rng.integers(0, 2))
  second = first if label == 1 else 1 - first
  centres = [snakes[first].points[0], snakes[second].points[-1]]
  markers = np.maximum(*(stamps.marker(p.size, centre, p.marker_radius, p.antialias_scale)
                         for centre in centres))
  image = stamps.bytescale(np.maximum(canvas.render(), markers.astype(np.float64) / 255))
  geometry = {
    "label": label,
    "snakes": [np.asarray(s.points) for s in snakes],
    "markers": np.asarray(centres),
    "marker_snakes": (first, second),
    "margin": margin,
    "distractors": distractors,
    "pair_restarts": restarts,
  }
  return image, geometry


def sample(params: Params, seed: int, index: int) -> tuple[np.ndarray, int, dict]:
  """Image `index` of a release made with `seed`: (image, label, geometry)."""
  rng = np.random.default_rng([seed, index])
  label = int(rng.integers(2))
  image, geometry = generate_image(params, rng, label)
  return image, label, geometry
