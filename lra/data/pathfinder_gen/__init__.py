"""Pathfinder / Path-X generator: a fast reimplementation of the "snakes" images of
Linsley et al. (2018) as LRA used them, writing the original release layout.

One image: two target snakes seeded `seed_distance` apart grow alternately, one paddle at a
time, `contour_length` paddles each; distractor snakes of `contour_length // 3` paddles then
fill the image; two disk markers sit on snake tips. Label 1: both markers on the two tips of
one target snake; label 0: the origin tip of one target and the far tip of the other.

Geometry, as read here from the algorithm description:
- A paddle is a straight antialiased bar of length `paddle_length` and full width
  `paddle_thickness` (flat ends). From a pivot it is placed on the circle of radius
  `paddle_length + margin` around that pivot: the bar ends on the circle (the new pivot) and
  starts `margin` pixels out, so a snake is a dashed line with gaps of about `margin`.
- Occupancy: a pixel is inked when any antialias sub-sample falls inside a bar. Every placed
  bar reserves its ink grown by a disk of radius `margin + 0.5` (at least `margin` clear
  pixels in every direction, diagonals included). A new bar's ink must miss everything
  reserved except its own snake's previous bar, and stay inside the `padding` border.
- Direction: candidates are NUM_ANGLES directions, all tested at once; a free one is drawn
  with weight max(cos(min(|dtheta| * continuity, pi/2)), 0)^2 relative to the previous
  direction (uniform for a snake's first bar). Since every candidate is tested, a retry could
  never find anything new: a target placement with no free candidate restarts the pair, and
  a stuck distractor is taken back and re-seeded (a few times, then skipped).
- Tips: the origin tip is the seed point (a marker-sized disk is reserved there from the
  start), the far tip is the last pivot. Far tips whose marker disk would touch the other
  target snake restart the pair, for both tips whatever the label, so label 0 and label 1
  images have the same geometry statistics. Marker disks are reserved before distractors.
- Contrast: a bar's pixel value is min(1, snake_contrast * paddle_contrast * coverage), the
  contrast acting as a gain on the antialiased coverage before clipping (32px: 2 * 0.75).
  Markers are drawn at full intensity. Image = pixelwise max of everything, times 255,
  rounded to uint8.
- Pivots live on a 1/SUBPIXEL pixel grid, so each (sub-pixel offset, direction) bar is a
  precomputed stamp: generation is a few small numpy operations per bar.

Every image's randomness comes from np.random.default_rng([seed, k]) alone (the label is its
first draw), so a release is the same for any number of worker processes.

The parts: params (the LRA settings per level and size), stamps (every bar and disk drawn
once), snakes (one image), release (the release layout, written in parallel). Time it with
`python -m lra.data.pathfinder_gen --bench SIZE LEVEL`.
"""

from lra.data.pathfinder_gen.params import LEVELS, SIZES, Params, params_for
from lra.data.pathfinder_gen.release import generate_release
from lra.data.pathfinder_gen.snakes import generate_image, sample

__all__ = ["LEVELS", "SIZES", "Params", "generate_image", "generate_release", "params_for",
           "sample"]
