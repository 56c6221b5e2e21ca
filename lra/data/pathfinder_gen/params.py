"""The LRA parameters of the Pathfinder generator: per level and per image size."""

from __future__ import annotations

import dataclasses

from lra.data.pathfinder import LEVEL_FOLDERS

# Paddles per target snake at each level; the folder names are the reader's (LEVEL_FOLDERS).
CONTOUR_LENGTHS = {"easy": 6, "intermediate": 9, "hard": 14}
LEVELS: dict[str, tuple[str, int]] = {
  level: (LEVEL_FOLDERS[level], length) for level, length in CONTOUR_LENGTHS.items()}

# The table of LRA's parameters per image size. `distractor_budget` is the numerator of the
# distractor count: budget // distractor_length snakes. Path-X (128) uses margin 2.
SIZE_TABLE: dict[int, dict] = {
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

SIZES: tuple[int, ...] = tuple(SIZE_TABLE)

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
  if size not in SIZE_TABLE:
    raise ValueError(f"unknown Pathfinder size {size!r}; valid sizes: "
                     f"{', '.join(map(str, SIZE_TABLE))}")
  if level not in LEVELS:
    raise ValueError(f"unknown Pathfinder level {level!r}; valid levels: {', '.join(LEVELS)}")
  folder, contour_length = LEVELS[level]
  row = SIZE_TABLE[size]
  distractor_length = max(1, contour_length // 3)
  return Params(size=size, level=level, level_folder=folder, contour_length=contour_length,
                distractor_length=distractor_length,
                num_distractors=row["distractor_budget"] // distractor_length, **row)

