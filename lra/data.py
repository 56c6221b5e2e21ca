"""Make a task's data: `python -m lra.data listops --data_dir=data/listops [generator flags]`.

With no generator flags it writes the full LRA release sizes (96K/2K/2K, 500 < length < 2000).
"""
import os
import sys

from absl import app, flags

from lra import listops

_DATA_DIR = flags.DEFINE_string("data_dir", "data/listops", "Where basic_*.tsv are written.")
_NUM_TRAIN = flags.DEFINE_integer("num_train", 96000, "Train examples.")
_NUM_VAL = flags.DEFINE_integer("num_val", 2000, "Validation examples.")
_NUM_TEST = flags.DEFINE_integer("num_test", 2000, "Test examples.")
_MIN_LENGTH = flags.DEFINE_integer("min_length", 500, "Keep trees longer than this.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 2000, "Keep trees shorter than this.")
_MAX_DEPTH = flags.DEFINE_integer("max_depth", 10, "Deepest operator nesting.")
_MAX_ARGS = flags.DEFINE_integer("max_args", 10, "Most arguments per operator.")
_SEED = flags.DEFINE_integer("seed", 0, "Generator seed.")
_WORKERS = flags.DEFINE_integer("workers", 0, "Processes; 0 = all cores.")

TASKS = ("listops",)


def main(argv):
  if len(argv) != 2 or argv[1] not in TASKS:
    print(f"usage: python -m lra.data TASK [flags]; TASK is one of: {', '.join(TASKS)}",
          file=sys.stderr)
    sys.exit(2)
  if _MIN_LENGTH.value >= _MAX_LENGTH.value - 1:
    print("error: --min_length must be below --max_length - 1", file=sys.stderr)
    sys.exit(2)
  paths = listops.generate_split_files(
      _DATA_DIR.value, num_train=_NUM_TRAIN.value, num_val=_NUM_VAL.value,
      num_test=_NUM_TEST.value, min_length=_MIN_LENGTH.value, max_length=_MAX_LENGTH.value,
      max_depth=_MAX_DEPTH.value, max_args=_MAX_ARGS.value, seed=_SEED.value,
      workers=_WORKERS.value or None)
  for split, path in paths.items():
    print(f"wrote {split}: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
  app.run(main)
