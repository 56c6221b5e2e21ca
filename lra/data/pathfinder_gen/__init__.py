"""Pathfinder / Path-X generator: the "snakes" images of Linsley et al. (2018) as LRA used them,
written in the original release layout.

It follows the original program (snakes.py / snakes2.py of drewlinsley/pathfinder, with the
settings of LRA's TFDS builders, params.py) step for step, so its images have the same
distribution; it draws every paddle once per direction and keeps the occupancy up to date
locally instead of redrawing whole images, which makes it many times faster. The randomness is
numpy's Generator, so an image is not the original's for the same seed, only alike.

Geometry, as the original does it (pixels are whole (row, col); an orientation's row is sin):
- Paddle: a PIL line `round(thickness * aa)` sub-pixels wide from a start pixel to
  ceil(start + length * aa * direction), drawn at aa (= 2) times the resolution, byte-scaled
  and shrunk with PIL's Lanczos filter (a grey fringe around each dash). Its mask is the line
  grown by a disk of radius margin * aa before shrinking. Both are cut to the image.
- Snake: a seed paddle starts at a free pixel in a uniformly drawn whole-degree direction; its
  pivot sits `margin` behind its start. Each next pivot is `length + 2 margin` past the last
  one along the last step; the next paddle's far end is drawn among the distinct pixels of the
  circle of radius `length + margin` around it (one sample per pixel of arc), weighted by
  max(cos(min(|turn| * continuity, pi/2)), 0)^2 times one minus the occupancy grown by a disk
  of radius margin, and the paddle is drawn from that end back towards the pivot, so dashes
  are `length` long with gaps of about 2 margin. A paddle whose mask plus the occupancy
  reaches 1.8 anywhere is drawn again (3 tries), then the snake fails. A paddle's mask joins
  the occupancy only when the next paddle is placed (neighbours may touch).
- Targets: the first seed stays 2 seed_distance from the edges, the second starts
  seed_distance away in a whole-degree direction, unchecked against the first; both grow
  alternately to contour_length paddles. Any failure restarts the pair (hundreds of times
  per hard image). Quirk kept: the first snake's last paddle never joins the occupancy. Also
  kept: a seed direction whose mask, in the original's OpenCV dilation, leaves some edge
  pixel with nothing inside the image finds no seed at all (at 32 pixels this leaves 30 of
  360 directions for the first paddle of a pair).
- Distractors: num_distractors snakes of distractor_length paddles (5 attempts each, left out
  after that, none once under 1% of the image is free), seeds kept 1 pixel from the edges.
  They take snake_contrast; target paddles take snake_contrast * paddle_contrast.
- Markers: disks of marker_radius drawn at aa times the resolution and shrunk with Lanczos,
  one on the first pixel of one target and one on the far end of the same target (label 1)
  or the other (label 0). Image = maximum of everything, byte-scaled to 0..255: the brightest
  pixel becomes 255, so only relative contrasts count (at 32 pixels distractor paddles, 2.0,
  outshine target paddles, 1.5, and markers, 1.0).

Every image's randomness comes from np.random.default_rng([seed, k]) alone (the label is its
first draw), so a release is the same for any number of worker processes.

The parts: params (the LRA settings per level and size), stamps (paddles and markers drawn as
the original draws them, once per direction), canvas (an image's occupancy, geometry caches),
growth (seeds, one paddle more, target pairs), snakes (one image), release (the release
layout, written in parallel), stats, classify and compare (the statistics and classifiers
that tell two generators apart). `python -m lra.data.pathfinder_gen --bench SIZE LEVEL` times
it; `--compare LEVEL_DIR` compares it with a folder of images.
"""

from lra.data.pathfinder_gen.params import LEVELS, SIZES, Params, params_for
from lra.data.pathfinder_gen.release import generate_release
from lra.data.pathfinder_gen.snakes import generate_image, sample

__all__ = ["LEVELS", "SIZES", "Params", "generate_image", "generate_release", "params_for",
           "sample"]
