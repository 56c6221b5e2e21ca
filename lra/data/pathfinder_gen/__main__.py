"""`python -m lra.data.pathfinder_gen --bench SIZE LEVEL`: seconds per image on one core."""

from __future__ import annotations

import argparse
import time

from PIL import Image

from lra.data.pathfinder_gen.params import LEVELS, SIZE_TABLE, params_for
from lra.data.pathfinder_gen.snakes import sample
from lra.data.pathfinder_gen.stamps import make_stamps


def benchmark(size: int, level: str, n: int = 200, seed: int = 0) -> dict[str, float]:
  """Seconds per image on this core (stamps precomputed first and timed apart)."""
  params = params_for(size, level)
  start = time.perf_counter()
  make_stamps(params)
  setup = time.perf_counter() - start
  start = time.perf_counter()
  restarts = 0
  for k in range(n):
    restarts += sample(params, seed, k)[2]["pair_restarts"]
  per_image = (time.perf_counter() - start) / n
  return {"setup_s": setup, "s_per_image": per_image, "pair_restarts_per_image": restarts / n}


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description="Pathfinder generator benchmark (one core).")
  parser.add_argument("--bench", nargs=2, metavar=("SIZE", "LEVEL"), required=True,
                      help=f"image size ({', '.join(map(str, SIZE_TABLE))}) and level "
                           f"({', '.join(LEVELS)})")
  parser.add_argument("--n", type=int, default=200, help="images to time")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--save", help="also write image 0 as a PNG here, to look at")
  args = parser.parse_args(argv)
  size, level = int(args.bench[0]), args.bench[1]
  result = benchmark(size, level, args.n, args.seed)
  print(f"pathfinder{size} {level}: {result['s_per_image'] * 1e3:.2f} ms/image "
        f"({1 / result['s_per_image']:.0f} images/s on one core), stamps "
        f"{result['setup_s']:.2f} s once, {result['pair_restarts_per_image']:.2f} pair "
        f"restarts/image")
  if args.save:
    Image.fromarray(sample(params_for(size, level), args.seed, 0)[0], mode="L").save(args.save)


if __name__ == "__main__":
  main()
