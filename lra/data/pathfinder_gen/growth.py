"""Growing snakes as the snakes code grows them: seeds, one paddle at a time, target pairs.

Almost every attempt at a target pair fails (a snake runs into the border or a dead end:
about 20 restarts per easy image, 300 per hard one, at 32 and 128 pixels alike), and a
failed attempt leaves nothing behind, so an attempt costs as little as it can: seeds come
from caches before any array is made, and ink is only drawn for the finished image.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lra.data.pathfinder_gen import canvas, stamps
from lra.data.pathfinder_gen.params import Params


@dataclasses.dataclass
class Snake:
  pivot: tuple[int, int]      # the point the next paddle is placed around
  orientation: float          # direction of the last step (radians)
  last: tuple                 # the last paddle's canvas record, not yet in the occupancy
  points: list                # the paddles' first pixels; [0] is the origin tip, [-1] the far tip


def _below(rng: np.random.Generator, n: int) -> int:
  """A uniform integer in [0, n): rng.integers' distribution, drawn faster (hot path)."""
  return int(rng.random() * n)


def _reverse(orientation: float) -> float:
  return orientation + np.pi if orientation + np.pi < np.pi else orientation - np.pi


def seed(c: canvas.Canvas, rng: np.random.Generator, border: int
         ) -> tuple[tuple[int, int], float, tuple[int, int]] | None:
  """A first paddle's (start pixel, orientation, pivot) on a free pixel, or None."""
  p = c.p
  for _ in range(p.paddle_tries):
    orientation = (_below(rng, 360) - 180) * np.pi / 180
    free = c.free_seeds(orientation, border)
    if free.size == 0:
      return None
    tail = tuple(int(v) for v in divmod(int(free[_below(rng, free.size)]), c.size))
    head = stamps.translate(tail, orientation, p.paddle_length)
    pivot = stamps.translate(head, _reverse(orientation), p.paddle_length + c.margin)
    if c.inside(head) and c.inside(pivot):
      return tail, orientation, pivot
  return None


def _partner(c: canvas.Canvas, rng: np.random.Generator, tail1: tuple[int, int]
             ) -> tuple[tuple[int, int], float, tuple[int, int]] | None:
  """The second target's first paddle: seed_distance from the first in any direction."""
  p = c.p
  for _ in range(p.paddle_tries):
    orientation = (_below(rng, 360) - 180) * np.pi / 180
    angle = _below(rng, 360) * np.pi / 180
    tail = (int(np.round(tail1[0] + p.seed_distance * np.sin(angle))),
            int(np.round(tail1[1] + p.seed_distance * np.cos(angle))))
    head = stamps.translate(tail, orientation, p.paddle_length)
    pivot = stamps.translate(head, _reverse(orientation), p.paddle_length + c.margin)
    if c.inside(head) and c.inside(pivot):
      return tail, orientation, pivot
  return None


def extend(c: canvas.Canvas, rng: np.random.Generator, snake: Snake, contrast: float) -> bool:
  """Adds one paddle to a snake, drawn around a pivot one gap past its last paddle.

  Its far end is drawn among the ends on the circle around the pivot, each weighted by the
  continuity term of its turn times how free it is (1 minus the occupancy grown by the
  margin); the paddle must then fit (3 draws)."""
  pivot = stamps.translate(snake.pivot, snake.orientation, c.stride)
  circle = canvas.circle(c.size, c.radius, c.pad, pivot[0], pivot[1])
  if circle is None:
    return False
  points, forwards, backwards, padded, key = circle
  nonzero, weights = canvas.continuity(key, snake.orientation, c.p.continuity)
  cumulative = np.cumsum((1 - c.flat_grown[padded[nonzero]]) * weights)
  if cumulative.size == 0 or cumulative[-1] < 1e-4:
    return False
  total, draws = float(cumulative[-1]), len(cumulative)
  for _ in range(c.p.paddle_tries):
    # The first end whose cumulative weight passes r (the snakes code falls back to its first
    # end, here the first with a nonzero weight, when rounding leaves the total below r).
    k = int(nonzero[int(cumulative.searchsorted(rng.random() * total, "right")) % draws])
    mask = canvas.paddle(backwards[k], *c.style, contrast)[1]
    if c.fits(points[k], mask):
      break
  else:
    return False
  record = c.ink(points[k], backwards[k], contrast)
  c.occupy(snake.last)  # a paddle may touch its predecessor's room, so that joins only now
  snake.pivot, snake.orientation, snake.last = pivot, forwards[k], record
  snake.points.append(points[k])
  return True


def targets(p: Params, margin: int, rng: np.random.Generator
            ) -> tuple[canvas.Canvas, list[Snake], int]:
  """The two target snakes, grown alternately and restarted until both fit: (the canvas, the
  snakes, how many attempts failed before)."""
  for restarts in range(p.max_pair_tries):
    placed = _pair(p, margin, rng)
    if placed is not None:
      return placed[0], placed[1], restarts
  raise RuntimeError(f"pathfinder{p.size} {p.level}: could not place the two target snakes "
                     f"in {p.max_pair_tries} tries")


def _pair(p: Params, margin: int, rng: np.random.Generator
          ) -> tuple[canvas.Canvas, list[Snake]] | None:
  """One attempt at the target pair; None when it fails."""
  c = canvas.Canvas(p, margin)
  first = seed(c, rng, border=2 * p.seed_distance)
  if first is None:
    return None
  second = _partner(c, rng, first[0])
  if second is None:
    return None
  c.materialize()
  contrast = p.paddle_contrast * p.snake_contrast
  snakes = [Snake(pivot, orientation, c.ink(tail, orientation, contrast), [tail])
            for tail, orientation, pivot in (first, second)]
  for _ in range(p.contour_length - 1):
    for snake in snakes:
      if not extend(c, rng, snake, contrast):
        return None
  c.occupy(snakes[1].last)  # as the snakes code: the first snake's last paddle stays out
  return c, snakes
