"""Rendering: paddles, their occupancy masks and the markers, drawn as the snakes code draws them.

A paddle is a PIL line `round(thickness * aa)` sub-pixels wide and `length * aa` long drawn
on a float canvas `aa` times finer than the image, brought to 8 bits by a min/max byte
scaling, then shrunk to pixels with PIL's Lanczos filter (the grey fringe around every dash
comes from this filter). Its mask is the same line grown by a disk of radius `margin * aa`
before shrinking. Both live in a window of half size length + ceil(thickness) + margin around
the paddle's first pixel; a window depends only on the direction, so each is drawn once per
(direction, margin) and cached.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PIL import Image, ImageDraw


def bytescale(data: np.ndarray) -> np.ndarray:
  """uint8 as the snakes code's image I/O made it: min..max stretched to 0..255, rounded."""
  if data.dtype == np.uint8:
    return data
  low, high = data.min(), data.max()
  span = high - low if high > low else 1
  return (((data - low) * (255.0 / span)).clip(0, 255) + 0.5).astype(np.uint8)


def shrink(data: np.ndarray, size: int) -> np.ndarray:
  """A square array resampled to size x size with PIL's Lanczos filter, as uint8."""
  image = Image.fromarray(bytescale(data), mode="L")
  return np.asarray(image.resize((size, size), resample=Image.Resampling.LANCZOS))


def translate(point: tuple[int, int], orientation: float, distance: float) -> tuple[int, int]:
  """The pixel `distance` away along `orientation` (radians, row = sin), rounded up."""
  dy, dx = _step(orientation, distance)
  return int(math.ceil(point[0] + dy)), int(math.ceil(point[1] + dx))


@functools.lru_cache(maxsize=1 << 14)
def _step(orientation: float, distance: float) -> tuple[float, float]:
  return float(distance) * float(np.sin(orientation)), float(distance) * float(np.cos(orientation))


def flip(orientation: float) -> float:
  return orientation + np.pi if orientation < 0 else orientation - np.pi


@functools.lru_cache(maxsize=16)
def disk(radius: int) -> np.ndarray:
  """Offsets (dy, dx) with dy^2 + dx^2 <= radius^2: the morphological disk."""
  d = np.arange(-radius, radius + 1)
  dy, dx = np.meshgrid(d, d, indexing="ij")
  keep = dy ** 2 + dx ** 2 <= radius ** 2
  return np.stack([dy[keep], dx[keep]], axis=1)


def grow(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
  """Max over data shifted by each offset (dst[p] = max src[p + o]); outside counts as 0."""
  r = int(np.abs(offsets).max()) if len(offsets) else 0
  padded = np.pad(data, r)
  h, w = data.shape
  out = np.zeros_like(data)
  for dy, dx in offsets:
    np.maximum(out, padded[r + dy:r + dy + h, r + dx:r + dx + w], out=out)
  return out


def half_size(length: int, thickness: float, margin: int) -> int:
  """Half the side of a paddle's window."""
  return length + int(math.ceil(thickness)) + margin


@functools.lru_cache(maxsize=8192)
def paddle(orientation: float, length: int, thickness: float, margin: int,
           aa: int) -> tuple[np.ndarray, np.ndarray]:
  """(ink, mask) uint8 windows of a paddle starting at the window's centre pixel."""
  half = half_size(length, thickness, margin)
  centre, side = half * aa, 2 * half * aa + 1
  head = translate((centre, centre), orientation, length * aa)
  fine = Image.new("F", (side, side), "black")
  ImageDraw.Draw(fine).line([(centre, centre), (head[1], head[0])], fill="white",
                            width=int(round(thickness * aa)))
  fine = np.asarray(fine)
  grown = grow(fine, disk(margin * aa)).astype(np.uint8)
  ink, mask = shrink(fine, 2 * half + 1), shrink(grown, 2 * half + 1)
  ink.flags.writeable = mask.flags.writeable = False
  return ink, mask


def window(y: int, x: int, half: int, height: int, width: int
           ) -> tuple[tuple[slice, slice], tuple[slice, slice]]:
  """(canvas slices, window slices) of a (2 half + 1)^2 window centred on (y, x), clipped."""
  side = 2 * half + 1
  top, left = y - half, x - half
  canvas = (slice(max(top, 0), min(y + half, height - 1) + 1),
            slice(max(left, 0), min(x + half, width - 1) + 1))
  inner = (slice(max(0, -top), side - max(0, y + half - (height - 1))),
           slice(max(0, -left), side - max(0, x + half - (width - 1))))
  return canvas, inner


@functools.lru_cache(maxsize=8192)
def seed_offsets(orientation: float, length: int, thickness: float, margin: int, aa: int,
                 size: int) -> np.ndarray | None:
  """Where a seed's room is checked: the fully covered pixels of its paddle's mask.

  The mask is placed, as the snakes code places it, in a (2 (length + margin) + 1)^2 window
  with the paddle starting one pixel below and right of the centre; offsets are from the
  centre. A seed is free when the occupancy is low at the seed plus every offset.
  None where the snakes code finds no free seed anywhere: its OpenCV dilation leaves a pixel
  whose offsets all fall outside the image at -DBL_MAX, and any negative value there makes its
  search report no free pixel (at 32 pixels this rules out most directions of a first paddle).
  """
  half = length + margin
  side = 2 * half + 1
  _, mask = paddle(orientation, length, thickness, margin, aa)
  struct = np.zeros((side, side), np.uint8)
  canvas, inner = window(half + 1, half + 1, half_size(length, thickness, margin), side, side)
  struct[canvas] = mask[inner]
  rows, cols = np.nonzero(struct == 255)
  offsets = np.stack([rows - half, cols - half], axis=1)
  # Whether every pixel reaches into the image only depends on its distances to the edges up
  # to the offsets' reach, so a canvas 2 reach + 1 wide answers it for any larger image.
  reach = int(np.abs(offsets).max()) if len(offsets) else 0
  side = min(size, 2 * reach + 1)
  if len(offsets) == 0 or not grow(np.ones((side, side), bool), offsets).all():
    return None
  return offsets


@functools.lru_cache(maxsize=16)
def circle_offsets(radius: int) -> tuple[np.ndarray, np.ndarray]:
  """(dy, dx) of the candidate ends on a circle: one sample per pixel of arc."""
  step = 360. / (2 * radius * np.pi)
  angles = np.arange(0, 360, step) * np.pi / 180
  return radius * np.sin(angles), radius * np.cos(angles)


def marker(size: int, centre: tuple[int, int], radius: float, aa: int
           ) -> tuple[tuple[slice, slice], np.ndarray]:
  """A disk marker as the snakes code draws it on the whole image (aa times finer, then
  resampled): (its window in the image, the uint8 values there; zero elsewhere).

  Only a window around the centre is drawn and resampled: Lanczos reaches 3 pixels at this
  scale, so a window reaching 3 pixels past the last nonzero one (and clipped at the image's
  edges, as the whole image is) gives the same pixels.
  """
  reach = int(math.ceil(radius)) + 1 + 3 + 3
  top, left = max(centre[0] - reach, 0), max(centre[1] - reach, 0)
  bottom, right = min(centre[0] + reach + 1, size), min(centre[1] + reach + 1, size)
  y, x = np.ogrid[(top - centre[0]) * aa:(bottom - centre[0]) * aa,
                  (left - centre[1]) * aa:(right - centre[1]) * aa]
  fine = ((x ** 2 + y ** 2) <= (radius * aa) ** 2).astype(np.float64)
  image = Image.fromarray(bytescale(fine), mode="L")
  resized = image.resize((right - left, bottom - top), resample=Image.Resampling.LANCZOS)
  return (slice(top, bottom), slice(left, right)), np.asarray(resized)
