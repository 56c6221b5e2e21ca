"""The data command (`python -m lra.data`): generates or prepares a task's data in its data
directory.

  python -m lra.data listops    --data_dir=data/listops [generator flags]
  python -m lra.data text       --data_dir=data/text (--imdb_tar=PATH | --tfds_dir=DIR)
  python -m lra.data retrieval  --data_dir=data/retrieval --release_dir=PATH/lra_release
  python -m lra.data image      --data_dir=data/image (--cifar=PATH | --tfds_dir=DIR)
  python -m lra.data pathfinder --data_dir=data/pathfinder32 [--size=32] [--level=hard]
                                [--num_images=200000 | --release_dir=PATH/lra_release]
  python -m lra.data pathx      (pathfinder with --size=128, data/pathfinder128)
  python -m lra.data path256    (pathfinder with --size=256, data/pathfinder256; beyond LRA)
  python -m lra.data mqar       --data_dir=data/mqar [--vocab_size=8192 --max_len=256
                                --num_kv_pairs=16 ...] (beyond LRA: Zoology's MQAR)
  python -m lra.data parity     --data_dir=data/parity [--train_min_length=3 ...] (beyond LRA:
                                the formal-language tasks, lra/data/formal/; also even_pairs,
                                cycle_navigation, modular_arithmetic, ..., word_s5)

--release_dir names the original release: its lra_release folder (the tarball's outer or inner
one) or any folder of it (tsv_data, pathfinder<size>, a level folder); each task finds its own.
A relative --data_dir is a folder of the data home (lra.data.home: $LRA_DATA_DIR, else the
checkout's root, else ~/lra_data), as training reads it; each command first prints the folder
it writes and what it is about to write there.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from lra.data import console, home, listops, mqar, pathfinder, record, release_dirs, store
from lra.data.formal import loader as formal, specs as formal_specs
from lra.data.pathfinder_gen.params import LEVEL_FOLDERS, SIZES
from lra.errors import UserError, run_command

TEXT_MAX_LEN = 4000  # the longest Text length any config uses; configs cut it shorter
SIZE_OF = {"pathx": 128, "path256": 256}  # image side of a Pathfinder task (pathfinder: 32)

# The least value of each numeric flag (of whichever task has it): every split needs an example,
# Pathfinder's 80/10/10 split needs 10 images, seeds feed numpy (no negatives), workers=0 is
# all cores.
MINIMUM = {"num_train": 1, "num_val": 1, "num_test": 1, "min_length": 0, "max_length": 2,
           "max_depth": 1, "max_args": 2, "max_len": 1, "num_images": 10, "seed": 0,
           "workers": 0}


def check_numbers(args) -> None:
  """Refuses out-of-range numeric flags with one line, before anything is read or written."""
  for name, least in MINIMUM.items():
    value = getattr(args, name, None)
    if value is not None and value < least:
      raise UserError(f"--{name}={value} is out of range: python -m lra.data {args.task} "
                      f"needs --{name} >= {least}")
  if args.task == "listops" and args.min_length + 2 > args.max_length:
    raise UserError(f"--min_length={args.min_length} and --max_length={args.max_length} leave "
                    "no length strictly between them; make --max_length larger")


def _checked_run(args) -> None:
  check_numbers(args)
  if args.data_dir is not None:  # pathfinder's default depends on --size
    args.data_dir = home.resolve(args.data_dir)
  args.run(args)


def _say(line: str) -> None:
  print(line, flush=True)  # before the work starts, also into a log file


def _listops(args) -> None:
  plan = listops.plan({k: getattr(args, k) for k in listops.RELEASE_SETTINGS})
  _say(f"generating ListOps: {plan} into {args.data_dir}")
  paths = listops.make_folder(  # only into an empty folder or one generated before
      args.data_dir, **{k: getattr(args, k) for k in listops.RELEASE_SETTINGS}, seed=args.seed,
      workers=args.workers or None)
  for split, path in paths.items():
    print(f"wrote {split}: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


def _one_source(args, first: str) -> None:
  if (getattr(args, first) is None) == (args.tfds_dir is None):
    raise UserError(f"give exactly one of --{first} and --tfds_dir")


def _source(args, first: str) -> dict:
  """Where prepared data came from, for its record: the path given and its size in bytes."""
  path = getattr(args, first) or args.tfds_dir
  source = {first if getattr(args, first) else "tfds_dir": os.path.abspath(path)}
  if os.path.isfile(path):
    source["bytes"] = os.path.getsize(path)
  return source


def _text(args) -> None:
  from lra.data import text
  _one_source(args, "imdb_tar")
  _say(f"preparing Text from {args.imdb_tar or args.tfds_dir} into {args.data_dir}")
  # Both splits are read (and a damaged source refused) before anything is written.
  sources = {split: text.load_raw_imdb(args.imdb_tar, split) if args.imdb_tar else
             text.load_tfds_imdb(split, args.tfds_dir) for split in ("train", "test")}
  made = {"task": "text", "settings": {"max_len": args.max_len},
          "source": _source(args, "imdb_tar")}
  # One writer at a time in a shared folder (its lock); each split is published only when
  # complete, and the record of what made the folder last.
  with record.writing(args.data_dir, made, record.npy_files(sources, ("inputs", "labels"))):
    for split, (texts, labels) in sources.items():
      with store.SplitWriter(args.data_dir, split, len(labels), {
          "inputs": ((args.max_len,), np.uint16), "labels": ((), np.int32)}) as writer:
        for row, data in enumerate(console.bar(texts, desc=f"text {split}", unit="review")):
          writer[row] = {"inputs": text.encode_bytes(data, args.max_len), "labels": labels[row]}
      print(f"wrote {split}: {len(labels)} reviews to {args.data_dir}")


def _image(args) -> None:
  from lra.data import image
  _one_source(args, "cifar")
  _say(f"preparing Image from {args.cifar or args.tfds_dir} into {args.data_dir}")
  if args.cifar:
    train = image.load_raw_cifar10(args.cifar, "train")
    cut = int(round(len(train[1]) * 0.9))  # as TFDS's train[:90%] / train[90%:]
    splits = {"train": (train[0][:cut], train[1][:cut]),
              "val": (train[0][cut:], train[1][cut:]),
              "test": image.load_raw_cifar10(args.cifar, "test")}
  else:
    splits = {s: image.load_tfds_cifar10(name, args.tfds_dir) for s, name in
              (("train", "train[:90%]"), ("val", "train[90%:]"), ("test", "test"))}
  made = {"task": "image", "settings": {}, "source": _source(args, "cifar")}
  # One writer at a time in a shared folder (its lock); the record of what made it last.
  with record.writing(args.data_dir, made, record.npy_files(splits, ("inputs", "labels"))):
    for split, (pixels, labels) in splits.items():
      store.write_split(args.data_dir, split, {"inputs": pixels, "labels": labels})
      print(f"wrote {split}: {len(labels)} images to {args.data_dir}")


def _retrieval(args) -> None:
  from lra.data import retrieval
  tsv_dir = release_dirs.aan_dir(args.release_dir, list(retrieval.SPLIT_FILES.values()))
  _say(f"preparing Retrieval from {tsv_dir} into {args.data_dir}")
  counts = retrieval.prepare(tsv_dir, args.data_dir, args.max_len)
  for split, num in counts.items():
    print(f"wrote {split}: {num} pairs to {args.data_dir}")


def _pathfinder(args) -> None:
  fixed = SIZE_OF.get(args.task)
  if fixed and args.size not in (None, fixed):  # its config would refuse the data
    raise UserError(f"python -m lra.data {args.task} makes the {fixed}x{fixed} images its "
                    f"config reads, not --size={args.size}: drop --size, or run python -m "
                    f"lra.data pathfinder --size={args.size}")
  size = args.size or fixed or 32
  data_dir = args.data_dir or home.resolve(f"data/pathfinder{size}")
  out = pathfinder.prepared_dir(data_dir, args.level)
  level_dir = (release_dirs.level_dir(args.release_dir, size, args.level) if args.release_dir
               else None)
  _say(f"preparing Pathfinder {size}x{size} ({args.level}) from {level_dir} into {out}"
       if level_dir else f"generating {args.num_images:,} Pathfinder images ({size}x"
       f"{size}, {args.level}) into {data_dir}, prepared into {out}")
  if level_dir:
    counts = pathfinder.prepare(level_dir, out, size)
  else:
    counts = pathfinder.generate_and_prepare(data_dir, size=size, level=args.level,
                                             num_images=args.num_images, seed=args.seed,
                                             workers=args.workers or None)
  for split, num in counts.items():
    print(f"wrote {split}: {num} images to {out}")


def _truth(text: str) -> bool:
  """A flag's True or False (as the printed commands write them)."""
  if text.lower() not in ("true", "false"):
    raise argparse.ArgumentTypeError(f"give True or False, not {text!r}")
  return text.lower() == "true"


def _mqar(args) -> None:
  settings = {k: getattr(args, k) for k in mqar.SETTINGS}
  mqar.check_settings(settings)
  _say(f"generating MQAR: {mqar.plan(settings)} into {args.data_dir}")
  for split, num in mqar.make_folder(args.data_dir, settings, args.seed).items():
    print(f"wrote {split}: {num} examples to {args.data_dir}")


def _formal(args) -> None:
  settings = {k: getattr(args, k) for k in formal.setting_names(args.task)}
  formal.check_settings(args.task, settings)
  _say(f"generating {args.task}: {formal.plan(args.task, settings)} into {args.data_dir}")
  for split, num in formal.make_folder(args.task, args.data_dir, settings, args.seed).items():
    print(f"wrote {split}: {num} examples to {args.data_dir}")


def _formal_parsers(sub) -> None:
  for task, spec in formal_specs.SPECS.items():
    s = sub.add_parser(task, help=f"generate {task} (beyond LRA; {spec.source})")
    s.add_argument("--data_dir", default=f"data/{task}")
    for name, default in {**formal_specs.defaults(task), "seed": 0}.items():
      s.add_argument(f"--{name}", default=default, type=type(default),
                     **({"choices": spec.layouts} if name == "layout" else {}))
    s.set_defaults(run=_formal)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m lra.data", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="task", required=True, metavar="TASK")

  s = sub.add_parser("listops", help="generate ListOps (release TSV format)")
  s.add_argument("--data_dir", default="data/listops")
  for name, default in {**listops.RELEASE_SETTINGS, "seed": 0, "workers": 0}.items():
    s.add_argument(f"--{name}", type=int, default=default)
  s.set_defaults(run=_listops)

  s = sub.add_parser("text", help="prepare IMDb from the raw tarball or prepared TFDS data")
  s.add_argument("--data_dir", default="data/text")
  s.add_argument("--imdb_tar", help="path of aclImdb_v1.tar.gz")
  s.add_argument("--tfds_dir", help="TFDS data_dir holding a prepared imdb_reviews")
  s.add_argument("--max_len", type=int, default=TEXT_MAX_LEN)
  s.set_defaults(run=_text)

  s = sub.add_parser("image", help="prepare grayscale CIFAR-10 (raw binary or TFDS)")
  s.add_argument("--data_dir", default="data/image")
  s.add_argument("--cifar", help="cifar-10-binary.tar.gz or the cifar-10-batches-bin folder")
  s.add_argument("--tfds_dir", help="TFDS data_dir holding a prepared cifar10")
  s.set_defaults(run=_image)

  s = sub.add_parser("retrieval", help="prepare AAN pairs from the release's tsv_data")
  s.add_argument("--data_dir", default="data/retrieval")
  s.add_argument("--release_dir", required=True,
                 help="the release's tsv_data folder (new_aan_pairs.{train,eval,test}.tsv) "
                      "or the lra_release folder that holds it")
  s.add_argument("--max_len", type=int, default=4000)
  s.set_defaults(run=_retrieval)

  for name in ("pathfinder", *SIZE_OF):
    s = sub.add_parser(name, help="generate (or read from the release) Pathfinder images")
    s.add_argument("--data_dir", default=None, help="default data/pathfinder<size>")
    s.add_argument("--size", type=int, default=None, choices=SIZES,
                   help="default 32 (pathfinder), 128 (pathx), 256 (path256)")
    s.add_argument("--level", default="hard", choices=tuple(LEVEL_FOLDERS))
    s.add_argument("--num_images", type=int, default=200000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=0, help="0 = all cores")
    s.add_argument("--release_dir", help="read the original release instead of generating: "
                   "its lra_release folder (or pathfinder<size>, or the level's folder)")
    s.set_defaults(run=_pathfinder)

  s = sub.add_parser("mqar", help="generate MQAR (Zoology's multi-query associative recall)")
  s.add_argument("--data_dir", default="data/mqar")
  for name, default in {**mqar.SETTINGS, "seed": 0}.items():
    s.add_argument(f"--{name}", default=default,
                   type=_truth if isinstance(default, bool) else type(default))
  s.set_defaults(run=_mqar)
  _formal_parsers(sub)
  return p


def main(argv=None) -> None:
  args = parser().parse_args(argv)
  run_command(_checked_run, args)  # missing or malformed input, bad settings: one line
