"""One image: two target snakes, distractor snakes and two markers, as the snakes code makes them.

Coordinates are whole pixels (row, col); orientations are radians with the row along sin.
The occupancy `mask` holds, per pixel, the resampled masks of placed paddles (0..1) and 1 on
the padding border; `image` holds the maximum of the placed paddles' ink times their contrast.
"""

from __future__ import annotations

import numpy as np

from lra.data.pathfinder_gen import canvas, growth, stamps
from lra.data.pathfinder_gen.params import Params

def _distractor(c: canvas.Canvas, rng: np.random.Generator) -> canvas.Canvas | None:
  """The canvas with one more distractor snake, or None when it does not fit."""
  p = c.p
  seed = growth.seed(c, rng, border=1)  # reads the canvas only: most attempts end here
  if seed is None:
    return None
  c = c.copy()
  tail, orientation, pivot = seed
  snake = growth.Snake(pivot, orientation, c.ink(tail, orientation, p.snake_contrast), [tail])
  for _ in range(p.distractor_length - 1):
    if not growth.extend(c, rng, snake, p.snake_contrast):
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
  board, snakes, restarts = growth.targets(p, margin, rng)
  distractors = 0
  for _ in range(p.num_distractors):
    if np.count_nonzero(board.mask <= canvas.FREE) / board.mask.size < canvas.CROWDED:
      continue  # under 1% of the image free: the snakes code finds no seed any more
    for _ in range(p.distractor_tries):
      grown = _distractor(board, rng)
      if grown is not None:
        board, distractors = grown, distractors + 1
        break
  first = int(rng.integers(0, 2))
  second = first if label == 1 else 1 - first
  centres = [snakes[first].points[0], snakes[second].points[-1]]
  image = board.render()
  for centre in centres:  # the snakes code takes the maximum of the image and both markers
    box, values = stamps.marker(p.size, centre, p.marker_radius, p.antialias_scale)
    np.maximum(image[box], values.astype(np.float64) / 255, out=image[box])
  image = stamps.bytescale(image)
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
