"""The state of one image in the making: its occupancy, and the geometry cached across images.

Coordinates are whole pixels (row, col); orientations are radians with the row along sin.
The occupancy `mask` holds, per pixel, the resampled masks of placed paddles (0..1) and 1 on
the padding border, as the snakes code's mask does.
"""

from __future__ import annotations

import functools

import numpy as np

from lra.data.pathfinder_gen import stamps
from lra.data.pathfinder_gen.params import Params

FREE = 0.3       # a pixel whose occupancy is at most this can take a seed
OVERLAP = 1.8    # a paddle is refused where its mask plus the occupancy reaches this
CROWDED = 0.01   # no more distractors once under this share of the image is free


@functools.lru_cache(maxsize=16384)
def paddle(orientation: float, length: int, thickness: float, margin: int, aa: int,
            contrast: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Float windows (ink times contrast, mask, mask grown by the margin's disk), in float32 as
  the snakes code stores them; the grown window is `margin` wider on every side."""
  ink, mask = stamps.paddle(orientation, length, thickness, margin, aa)
  mask = (mask / 255).astype(np.float32)
  return (ink / 255 * contrast).astype(np.float32), mask, grow_window(mask, margin)


class Canvas:
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
    self.radius = p.paddle_length + margin      # of the circle a paddle's far end is drawn on
    self.stride = p.paddle_length + 2 * margin  # from one pivot to the next
    self.style = (p.paddle_length, p.paddle_thickness, margin, p.antialias_scale)
    self.paddles: list[tuple[tuple[int, int], float, float]] = []
    self.empty = True  # nothing occupied yet: seeds come from a cache, no arrays are made

  def materialize(self) -> None:
    """Makes the occupancy arrays (most target pairs fail at their first seed, without)."""
    empty = empty_arrays(self.size, self.p.padding, self.margin, self.pad)
    self.padded_mask, self.padded_grown = empty[0].copy(), empty[1].copy()
    self._views()

  def _views(self) -> None:
    inner = slice(self.pad, self.pad + self.size)
    self.mask = self.padded_mask[inner, inner]
    self.flat_grown = self.padded_grown.reshape(-1)

  def copy(self) -> "Canvas":
    other = object.__new__(Canvas)
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
    return (point[0], point[1]) + paddle(orientation, *self.style, contrast)[1:]

  def interior(self, y: int, x: int) -> bool:
    """Whether a paddle window centred on (y, x) lies wholly inside the image."""
    return self.half <= y < self.size - self.half and self.half <= x < self.size - self.half

  def clipped(self, record: tuple) -> tuple[np.ndarray, np.ndarray]:
    """A record's (mask, grown mask) with what falls outside the image cut off first."""
    y, x, mask, _ = record
    _, inner = stamps.window(y, x, self.half, self.size, self.size)
    mask = np.zeros_like(mask)
    mask[inner] = record[2][inner]
    return mask, grow_window(mask, self.margin)

  def occupy(self, record: tuple) -> None:
    """Adds a paddle's mask to the occupancy; what falls outside the image is cut off."""
    y, x, mask, grown = record
    if not self.interior(y, x):
      mask, grown = self.clipped(record)
    box = self.padded_mask[self._box((y, x), self.half)]
    np.maximum(box, mask, out=box)
    box = self.padded_grown[self._box((y, x), self.pad)]
    np.maximum(box, grown, out=box)
    self.empty = False

  def fits(self, point: tuple[int, int], mask: np.ndarray) -> bool:
    return bool((self.padded_mask[self._box(point, self.half)] + mask).max() < OVERLAP)

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
      np.maximum(box, paddle(orientation, *self.style, contrast)[0], out=box)
    inner = slice(self.pad, self.pad + self.size)
    return image[inner, inner]


def grow_window(mask: np.ndarray, margin: int) -> np.ndarray:
  """A window grown by the disk of radius margin, into a window `margin` wider each side."""
  h, w = mask.shape
  out = np.zeros((h + 2 * margin, w + 2 * margin), mask.dtype)
  for dy, dx in stamps.disk(margin):  # the disk is symmetric: spreading equals gathering
    box = out[margin + dy:margin + dy + h, margin + dx:margin + dx + w]
    np.maximum(box, mask, out=box)
  return out


@functools.lru_cache(maxsize=64)
def empty_arrays(size: int, padding: int, margin: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
  """The padded (occupancy, grown occupancy) of an empty image: its padding border is taken."""
  mask = np.zeros((size, size))
  mask[:padding], mask[-padding:], mask[:, :padding], mask[:, -padding:] = 1, 1, 1, 1
  grown = stamps.grow(mask, stamps.disk(margin))  # outside the image counts as free
  return np.pad(mask, pad), np.pad(grown, pad)


def _free(mask: np.ndarray, orientation: float, style: tuple, border: int) -> np.ndarray:
  offsets = stamps.seed_offsets(orientation, *style, mask.shape[0])
  if offsets is None:
    return np.zeros(0, np.int64)
  blocked = mask > FREE
  blocked[:border], blocked[-border:], blocked[:, :border], blocked[:, -border:] = (
    True, True, True, True)
  return np.flatnonzero(~stamps.grow(blocked, offsets))


@functools.lru_cache(maxsize=4096)
def _free_on_empty(orientation: float, style: tuple, size: int, padding: int,
                   border: int) -> np.ndarray:
  pad = style[2]
  mask = empty_arrays(size, padding, style[2], pad)[0][pad:pad + size, pad:pad + size]
  return _free(mask.copy(), orientation, style, border)


_ORIENTATION_IDS: dict[bytes, int] = {}  # equal orientation arrays share an id ...
_ORIENTATIONS: list[np.ndarray] = []       # ... indexing this list


@functools.lru_cache(maxsize=1 << 16)
def circle(size: int, radius: int, pad: int, py: int, px: int) -> tuple | None:
  """The distinct in-image pixels on the circle around a pivot, one sample per pixel of arc,
  in row-major order: (pixels [K], orientations from the pivot [K], paddle orientations [K],
  flat indices in the padded canvas [K], an id shared by equal orientation arrays); None when
  none is inside."""
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
  # As Python values too: the pixel, the direction from the pivot, and the paddle's direction
  # (drawn from its end back towards the pivot).
  points = [tuple(end) for end in ends.tolist()]
  forwards = orientations.tolist()
  return points, forwards, [stamps.flip(o) for o in forwards], padded, key


@functools.lru_cache(maxsize=1 << 16)
def continuity(key: int, orientation: float, continuity: float
                ) -> tuple[np.ndarray, np.ndarray]:
  """(indices, weights) of the ends of circle `key` with a nonzero continuity weight
  max(cos(min(turn * continuity, pi/2)), 0)^2; the others can never be drawn."""
  turn = np.abs(_ORIENTATIONS[key] - orientation)
  turn = np.minimum(np.minimum(turn, 2 * np.pi - turn) * continuity, 0.5 * np.pi)
  weights = np.maximum(np.cos(turn), 0) ** 2
  nonzero = np.flatnonzero(weights)
  return nonzero, weights[nonzero]


