"""The LRA parameters of the Pathfinder generator: per level and per image size.

The settings are those of LRA's TFDS builders (which name what was changed from the snakes
wrapper's defaults); everything else is the wrapper's default: no single-paddle distractors,
2 retries per paddle, 4 per distractor snake.
"""

from __future__ import annotations

import dataclasses

# Level name -> the release's folder: the generator writes it, the reader
# (lra.data.pathfinder) finds it, the data command offers the names.
LEVEL_FOLDERS = {"easy": "curv_baseline", "intermediate": "curv_contour_length_9",
                 "hard": "curv_contour_length_14"}
IMAGES_TASK = "pathfinder images"  # the record task of a folder the generator wrote
# Paddles per target snake at each level.
CONTOUR_LENGTHS = {"easy": 6, "intermediate": 9, "hard": 14}
LEVELS: dict[str, tuple[str, int]] = {
  level: (LEVEL_FOLDERS[level], length) for level, length in CONTOUR_LENGTHS.items()}

# Per image size. `distractor_budget` // distractor_length distractor snakes; `margins`: one is
# drawn per image (Path-X: 2 or 3). Lengths are whole pixels, thickness * antialias_scale must
# be whole too (the paddle is drawn that many sub-pixels wide).
SIZE_TABLE: dict[int, dict] = {
  32: dict(padding=1, margins=(1,), seed_distance=7, marker_radius=1.5, paddle_length=2,
           paddle_thickness=0.5, continuity=1.0, distractor_budget=20, snake_contrast=2.0,
           paddle_contrast=0.75),
  64: dict(padding=1, margins=(1,), seed_distance=12, marker_radius=2.5, paddle_length=5,
           paddle_thickness=1.0, continuity=1.8, distractor_budget=22, snake_contrast=0.8),
  128: dict(padding=1, margins=(2, 3), seed_distance=20, marker_radius=3.0, paddle_length=5,
            paddle_thickness=1.5, continuity=1.8, distractor_budget=35, snake_contrast=0.9),
  # Path-256 (the release's pathfinder256, which S4 and SPT train on): LRA's Pathfinder256
  # TFDS builder (google-research/long-range-arena, lra_benchmarks/data/pathfinder.py) sets
  # margin [3], window 256, marker radius 5, thickness 2, aa 2, continuity 1.8, 30 //
  # distractor_length distractor snakes and contrast [1.0]: the snakes2_wrapper.py run of
  # Linsley et al. (drewlinsley/pathfinder, its 300x300 images) at 256. It leaves the rest at
  # the wrapper's Args defaults: padding 22, seed_distance 27, paddle length 5. As at 32, 64
  # and 128, the level alone sets the contour length (6/9/14 paddles; hard: 14) and the
  # distractor length (contour_length // 3: 4 at hard, so 30 // 4 = 7 distractor snakes).
  256: dict(padding=22, margins=(3,), seed_distance=27, marker_radius=5.0, paddle_length=5,
            paddle_thickness=2.0, continuity=1.8, distractor_budget=30, snake_contrast=1.0),
}

SIZES: tuple[int, ...] = tuple(SIZE_TABLE)


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
  margins: tuple[int, ...]
  seed_distance: int
  marker_radius: float
  paddle_length: int
  paddle_thickness: float
  continuity: float
  snake_contrast: float
  paddle_contrast: float = 1.0  # target paddles only; distractors take snake_contrast alone
  antialias_scale: int = 2      # paddles and markers are drawn this much finer, then resampled
  paddle_tries: int = 3         # draws of a paddle's end before its snake fails
  distractor_tries: int = 5     # attempts per distractor snake before it is left out
  max_pair_tries: int = 10000   # target-pair restarts before giving up on an image


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
