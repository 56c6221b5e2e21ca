"""Statistics of a batch of Pathfinder images, to compare two generators (numpy and scipy only).

Inputs: `images` uint8 [N, S, S], `labels` [N], `markers` [N, 2, 2] (the integer (row, col)
pixel of each marker's centre: origin marker, then terminal marker). Every statistic is a
per-image value (`per_image`), summarised over the images as mean, sd and n (`summarise`):

- `zero`, `hist_01`..`hist_16`: share of pixels == 0, and in 16 equal bins over 1..255
  (bin = (value - 1) * 16 // 255);
- `nonzero`, `mean`, `above_128`: share of pixels > 0, mean pixel value (0..255), share > 128;
- strokes, with ink = pixel > 0: `components` (8-connected components of ink per image) and
  `component_size` (their mean size in pixels); `run_h_*` / `run_v_*`: horizontal and vertical
  runs of ink (`mean` length, and `1`..`5`, `6+`: the share of runs of that length);
  `gap_h_*` / `gap_v_*`: runs of zeros with ink at both ends in the same row / column and
  length <= MAX_GAP (mean and shares likewise). Runs stand for dash lengths, gaps for the
  spacing between dashes. `bright_run_*` / `bright_gap_*`: the same of pixels > 128 (dashes
  without an antialiased fringe, which at > 0 can join dashes and fill gaps). An image without
  any such run has no value (NaN; not counted in n);
- markers: the patch of side 2 * h + 1 centred on each marker pixel, with
  h = max(1, 3 + ceil(log2(S / 32))) (7x7 at 32, 9x9 at 64, 11x11 at 128, 13x13 at 256), zero
  outside the image. `marker_centre`: the centre value; `marker_footprint`: pixels of the patch
  >= half the centre value (and > 0), both averaged over the image's two markers. The mean patch
  over all markers is `summarise(...)["marker_patch"]` (to look at, not a tested statistic);
- `label`: the label (its mean is the share of 1s).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

NUM_BINS = 16
MAX_GAP = 8
RUN_SHARES = 6  # shares of lengths 1..5 and 6+


def marker_half(size: int) -> int:
  """Half-width of the marker patch for images of side `size` (see the module docstring)."""
  return max(1, 3 + math.ceil(math.log2(size / 32)))


def _check(images: np.ndarray) -> np.ndarray:
  images = np.asarray(images)
  if images.ndim != 3 or images.shape[1] != images.shape[2]:
    raise ValueError(f"expected images [N, S, S], got shape {images.shape}")
  return images


def pixel_values(images: np.ndarray) -> dict[str, np.ndarray]:
  """Histogram shares, share of ink, mean intensity and share above 128, per image."""
  images = _check(images)
  n, pixels = images.shape[0], images.shape[1] * images.shape[2]
  flat = images.reshape(n, pixels).astype(np.int64)
  out = {"zero": np.mean(flat == 0, axis=1)}
  bins = np.where(flat > 0, (flat - 1) * NUM_BINS // 255, NUM_BINS)  # NUM_BINS: zero pixels
  counts = np.zeros((n, NUM_BINS + 1))
  np.add.at(counts, (np.repeat(np.arange(n), pixels), bins.reshape(-1)), 1)
  for b in range(NUM_BINS):
    out[f"hist_{b + 1:02d}"] = counts[:, b] / pixels
  out["nonzero"] = np.mean(flat > 0, axis=1)
  out["mean"] = np.mean(flat, axis=1)
  out["above_128"] = np.mean(flat > 128, axis=1)
  return out


def components(ink: np.ndarray) -> dict[str, np.ndarray]:
  """8-connected components of ink [N, S, S] (bool): count and mean size per image."""
  n = ink.shape[0]
  structure = np.zeros((3, 3, 3), bool)
  structure[1] = True  # connect within one image only
  labelled, num = ndimage.label(ink, structure=structure)
  sizes = np.bincount(labelled.reshape(-1), minlength=num + 1)[1:]
  owner = np.zeros(num + 1, np.int64)
  image_of = np.broadcast_to(np.arange(n)[:, None, None], ink.shape)
  owner[labelled[ink]] = image_of[ink]
  count = np.bincount(owner[1:], minlength=n).astype(np.float64)
  total = np.bincount(owner[1:], weights=sizes, minlength=n)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean_size = np.where(count > 0, total / np.maximum(count, 1), np.nan)
  return {"components": count, "component_size": mean_size}


def runs(ink: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Runs of ink along the last axis of [N, R, S]: (image, row, start, length) of each, in
  row-major order."""
  n, r, s = ink.shape
  padded = np.zeros((n, r, s + 2), np.int8)
  padded[:, :, 1:-1] = ink
  step = np.diff(padded, axis=2)
  img, row, start = np.nonzero(step == 1)
  end = np.nonzero(step == -1)[2]
  return img, row, start, end - start


def gaps(ink: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Runs of zeros with ink at both ends (same row), any length: (image, length) of each."""
  img, row, start, length = runs(ink)
  same = (img[1:] == img[:-1]) & (row[1:] == row[:-1])
  gap = start[1:] - (start[:-1] + length[:-1])
  return img[1:][same], gap[same]


def _length_stats(prefix: str, img: np.ndarray, length: np.ndarray, n: int
                  ) -> dict[str, np.ndarray]:
  """Mean length and shares of lengths 1..5, 6+ per image (NaN where an image has none)."""
  count = np.bincount(img, minlength=n).astype(np.float64)
  safe = np.maximum(count, 1)
  has = count > 0
  out = {f"{prefix}_mean": np.where(has, np.bincount(img, weights=length, minlength=n) / safe,
                                    np.nan)}
  capped = np.minimum(length, RUN_SHARES)
  for k in range(1, RUN_SHARES + 1):
    share = np.bincount(img, weights=(capped == k).astype(np.float64), minlength=n) / safe
    name = f"{prefix}_{k}+" if k == RUN_SHARES else f"{prefix}_{k}"
    out[name] = np.where(has, share, np.nan)
  return out


def run_stats(mask: np.ndarray, prefix: str = "") -> dict[str, np.ndarray]:
  """Horizontal and vertical run and gap lengths of a bool mask [N, S, S], per image."""
  n = mask.shape[0]
  out = {}
  for axis, view in (("h", mask), ("v", np.swapaxes(mask, 1, 2))):
    img, _, _, length = runs(view)
    out.update(_length_stats(f"{prefix}run_{axis}", img, length, n))
    gap_img, gap_length = gaps(view)
    keep = gap_length <= MAX_GAP
    out.update(_length_stats(f"{prefix}gap_{axis}", gap_img[keep], gap_length[keep], n))
  return out


def strokes(images: np.ndarray) -> dict[str, np.ndarray]:
  """Components, run lengths and gap lengths of ink (pixel > 0), and run and gap lengths of
  bright pixels (> 128: dashes without their antialiased fringe), per image."""
  images = _check(images)
  ink = images > 0
  out = components(ink)
  out.update(run_stats(ink))
  out.update(run_stats(images > 128, "bright_"))
  return out


def marker_patches(images: np.ndarray, markers: np.ndarray) -> np.ndarray:
  """The float patches [N, 2, P, P] centred on each marker pixel (zero outside the image)."""
  images = _check(images)
  markers = np.asarray(markers, np.int64)
  if markers.shape != (images.shape[0], 2, 2):
    raise ValueError(f"expected markers [N, 2, 2], got shape {markers.shape}")
  h = marker_half(images.shape[1])
  padded = np.pad(images.astype(np.float64), ((0, 0), (h, h), (h, h)))
  offsets = np.arange(2 * h + 1)
  rows = markers[:, :, 0, None, None] + offsets[:, None]  # [N, 2, P, 1]; padding shifts by h
  cols = markers[:, :, 1, None, None] + offsets[None, :]  # [N, 2, 1, P]
  image_index = np.arange(images.shape[0])[:, None, None, None]
  return padded[image_index, rows, cols]


def marker_values(patches: np.ndarray) -> dict[str, np.ndarray]:
  """Centre value and footprint of each image's two marker patches [N, 2, P, P], averaged."""
  h = patches.shape[-1] // 2
  centre = patches[:, :, h, h]
  inked = (patches >= centre[:, :, None, None] / 2) & (patches > 0)
  footprint = inked.sum(axis=(2, 3)).astype(np.float64)
  return {"marker_centre": centre.mean(axis=1), "marker_footprint": footprint.mean(axis=1)}


def per_image(images: np.ndarray, labels: np.ndarray | None = None,
              markers: np.ndarray | None = None) -> dict[str, np.ndarray]:
  """Every per-image statistic, name -> float [N] (NaN: the image has no such value)."""
  out = pixel_values(images)
  out.update(strokes(images))
  if markers is not None:
    out.update(marker_values(marker_patches(images, markers)))
  if labels is not None:
    out["label"] = np.asarray(labels, np.float64).reshape(-1)
  return out


def describe(values: np.ndarray) -> dict[str, float]:
  """Mean, sd (n - 1) and n of the finite values (NaN mean and sd when there are none)."""
  values = np.asarray(values, np.float64)
  values = values[np.isfinite(values)]
  n = int(values.size)
  mean = float(values.mean()) if n else float("nan")
  sd = float(values.std(ddof=1)) if n > 1 else 0.0
  return {"mean": mean, "sd": sd, "n": n}


def summarise(images: np.ndarray, labels: np.ndarray | None = None,
              markers: np.ndarray | None = None) -> dict:
  """{"stats": {name: {mean, sd, n}}, "marker_patch": mean patch (list of lists) or None}."""
  values = per_image(images, labels, markers)
  patch = None
  if markers is not None:
    patch = np.round(marker_patches(images, markers).mean(axis=(0, 1)), 2).tolist()
  return {"stats": {name: describe(v) for name, v in values.items()}, "marker_patch": patch}


def standard_error(ref: dict[str, float], ours: dict[str, float]) -> float:
  """The combined standard error of a difference of two means: sqrt(sd1^2/n1 + sd2^2/n2)."""
  return math.sqrt(ref["sd"] ** 2 / max(ref["n"], 1) + ours["sd"] ** 2 / max(ours["n"], 1))
