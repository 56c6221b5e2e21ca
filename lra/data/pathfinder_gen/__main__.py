"""`python -m lra.data.pathfinder_gen --bench SIZE LEVEL`: seconds per image on one core.

`python -m lra.data.pathfinder_gen --compare LEVEL_DIR [--n N] [--cnn] [--write_reference FILE]`:
our images beside a reference sample in the release layout (lra.data.pathfinder_gen.compare):
the statistics side by side, and how well classifiers tell the two apart.
"""

from __future__ import annotations

import argparse
import time

from PIL import Image

from lra.data.pathfinder_gen.params import LEVELS, SIZE_TABLE, params_for
from lra.data.pathfinder_gen.snakes import sample
from lra.errors import run_command


def benchmark(size: int, level: str, n: int = 200, seed: int = 0) -> dict[str, float]:
  """Seconds per image on this core. One image outside the timed ones (index n) is made
  first and timed apart: it fills the cached stamps."""
  params = params_for(size, level)
  start = time.perf_counter()
  sample(params, seed, n)
  setup = time.perf_counter() - start
  start = time.perf_counter()
  restarts = 0
  for k in range(n):
    restarts += sample(params, seed, k)[2]["pair_restarts"]
  per_image = (time.perf_counter() - start) / n
  return {"setup_s": setup, "s_per_image": per_image, "pair_restarts_per_image": restarts / n}


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      description="Pathfinder generator: benchmark (one core), or compare with a reference.")
  job = parser.add_mutually_exclusive_group(required=True)
  job.add_argument("--bench", nargs=2, metavar=("SIZE", "LEVEL"),
                   help=f"image size ({', '.join(map(str, SIZE_TABLE))}) and level "
                        f"({', '.join(LEVELS)})")
  job.add_argument("--compare", metavar="LEVEL_DIR",
                   help="a reference level folder in the release layout (metadata/, imgs/, "
                        "optional markers.json): compare our images with it")
  parser.add_argument("--n", type=int, default=None,
                      help="images to time (default 200), or of ours to compare (default: as "
                           "many as the reference)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--save", help="--bench: also write image 0 as a PNG here, to look at")
  parser.add_argument("--size", type=int, help="--compare: image size (default: the images')")
  parser.add_argument("--level", choices=list(LEVELS),
                      help="--compare: level (default: from the folder name)")
  parser.add_argument("--ref_n", type=int, default=None,
                      help="--compare: read at most this many reference images")
  parser.add_argument("--cnn", action="store_true",
                      help="--compare: also train a small CNN on raw pixels to tell them apart")
  parser.add_argument("--write_reference", metavar="FILE",
                      help="--compare: write the reference statistics into this JSON file, "
                           "under '<size>_<level>' (other keys kept)")
  parser.add_argument("--generator", help="--compare: a note on what made the reference, "
                                          "stored with --write_reference")
  return parser


def _bench(args: argparse.Namespace) -> None:
  size, level = int(args.bench[0]), args.bench[1]
  n = 200 if args.n is None else args.n
  result = benchmark(size, level, n, args.seed)
  print(f"pathfinder{size} {level}: {result['s_per_image'] * 1e3:.2f} ms/image "
        f"({1 / result['s_per_image']:.0f} images/s on one core), first image (filling the "
        f"stamp caches) {result['setup_s']:.2f} s, {result['pair_restarts_per_image']:.2f} "
        f"pair restarts/image")
  if args.save:
    Image.fromarray(sample(params_for(size, level), args.seed, 0)[0], mode="L").save(args.save)


def _compare(args: argparse.Namespace) -> None:
  from lra.data.pathfinder_gen.compare import compare
  compare(args.compare, size=args.size, level=args.level, n=args.n, seed=args.seed,
          ref_limit=args.ref_n, cnn=args.cnn, write=args.write_reference,
          generator=args.generator)


def main(argv: list[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  if args.bench:
    _bench(args)
  else:
    run_command(_compare, args)


if __name__ == "__main__":
  main()
