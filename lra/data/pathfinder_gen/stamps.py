"""Precomputed stamps: every (sub-pixel offset, direction) bar and marker disk, drawn once.

Pivots live on a 1/SUBPIXEL pixel grid, so placing a bar is indexing these arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from lra.data.pathfinder_gen.params import NUM_ANGLES, SUBPIXEL, Params


@dataclasses.dataclass(frozen=True)
class Stamps:
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
def make_stamps(params: Params) -> Stamps:
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
  return Stamps(
    half=half, ink_flat=ink.reshape(q, q, a_n, box * box).astype(np.float32),
    reserved=reserved, value=value, step_q=step_q, weights=weights, disk_half=disk_half,
    disk_ink=disk_ink, disk_reserved=_grow_by_margin(disk_ink, params.margin).astype(np.int16),
    disk_value=np.minimum(disk_cov, 1.0), pad=max(half, disk_half) + 2)
