"""ListOps: a reimplementation of the LRA ListOps generator, its TSV writer, and the task
loader (generating the files on first use); the files' vocabulary and reader are
lra.data.listops_tsv.

A tree is either an int value 0..9 or an operator node ``(op, children)`` where ``op`` is one
of ``OPERATORS`` and ``children`` is a tuple of trees. Strings use the release format: each
operator node is a left-branching binary nesting, so MAX(2, 9) is ``( ( ( [MAX 2 ) 9 ) ] )``.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
import random
from typing import Iterable, Union

import numpy as np

from lra import paths
from lra.data import console, notes, publish, record
# The TSV format's names, read from here too (lra.data.listops.tokenize, ...).
from lra.data.listops_tsv import (HEADER, OOV_ID, OPERATORS, PAD_ID, VOCAB,  # noqa: F401
                                  read_split, read_tsv, tokenize)
from lra.data.tasks import FACTS, SPLITS, Task
from lra.errors import UserError

END = "]"
OPERATOR_PROB = 0.25  # chance that a node above max_depth is an operator

# The vocabulary (fixed ids, lra.data.listops_tsv) and the task table's numbers
# (lra.data.tasks.FACTS): VOCAB's ids, padding and OOV_ID fill the vocabulary exactly
# (tests/test_task_facts.py checks it).
VOCAB_SIZE = FACTS["listops"].vocab_size
NUM_CLASSES = FACTS["listops"].num_classes

# The generator settings of the LRA release (96K/2K/2K trees, min_length < length <
# max_length): the data command's defaults and configs/listops.py's.
RELEASE_SETTINGS: dict[str, int] = dict(num_train=96_000, num_val=2_000, num_test=2_000,
                                        min_length=500, max_length=2_000, max_depth=10,
                                        max_args=10)

FILES = {split: f"basic_{split}.tsv" for split in ("train", "val", "test")}  # in a data folder

# Each generation chunk stops after this many accepted trees or this many tries, whichever
# comes first, so a chunk's output depends only on its seed.
CHUNK_ACCEPTS = 64
CHUNK_MAX_TRIES = 200_000

Tree = Union[int, tuple]


def _grow(rng: random.Random, depth: int, max_depth: int, max_args: int,
          limit: float) -> tuple[Tree, int] | None:
  """Draws a tree like the original; returns (tree, length), or None once length > limit.

  The draw order (operator coin, argument count, children, then operator choice) follows
  the original. Giving up early on a tree that is already too long cannot change which trees
  are accepted, it only saves the time spent finishing trees that would be rejected.
  """
  if depth < max_depth and rng.random() <= OPERATOR_PROB:
    length = 2
    children = []
    for _ in range(rng.randint(2, max_args)):
      sub = _grow(rng, depth + 1, max_depth, max_args, limit - length)
      if sub is None:
        return None
      children.append(sub[0])
      length += sub[1]
    return (rng.choice(OPERATORS), tuple(children)), length
  if limit < 1:
    return None
  return rng.randrange(10), 1


def tree_to_string(tree: Tree) -> str:
  if isinstance(tree, int):
    return str(tree)
  op, children = tree
  # ((((op c1) c2) ... cn) ]) written out flat: n + 1 opening brackets, then op, children, END.
  return ("( " * (len(children) + 1) + op
          + "".join(f" {tree_to_string(c)} )" for c in children) + f" {END} )")


def tree_length(tree: Tree) -> int:
  """Number of values plus two per operator: the token count after preprocessing."""
  if isinstance(tree, int):
    return 1
  return 2 + sum(tree_length(c) for c in tree[1])


def evaluate_tree(tree: Tree) -> int:
  if isinstance(tree, int):
    return tree
  op, children = tree
  values = [evaluate_tree(c) for c in children]
  if op == "[MIN":
    return min(values)
  if op == "[MAX":
    return max(values)
  if op == "[SM":
    return sum(values) % 10
  if op == "[MED":
    values.sort()
    mid = len(values) // 2
    # int(median): the mean of the two middle values truncated; all values are >= 0.
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) // 2
  raise ValueError(f"unknown operator {op!r}")


def _reachable_lengths(max_depth: int, max_args: int, below: int) -> int:
  """Bitset (bit L set) of the tree lengths L < below that a root at depth 1 can have."""
  mask = (1 << below) - 1
  sizes = 1 << 1  # a node at max_depth is a single value
  for _ in range(max_depth - 1):
    sums = sizes  # lengths of k children, k = 1, 2, ...
    ops = 0
    for k in range(2, max_args + 1):
      new = 0
      bits = sizes
      while bits:
        low = bits & -bits
        new |= sums << (low.bit_length() - 1)
        bits ^= low
      sums = new & mask
      ops |= sums
    sizes = (1 << 1) | ((ops << 2) & mask)
  return sizes


def _seeded_rng(seed: int, chunk: int) -> random.Random:
  # A string seed is hashed with SHA-512 by random.Random: no collisions between (seed, chunk)
  # pairs and independent of PYTHONHASHSEED.
  return random.Random(f"listops/{seed}/{chunk}")


def _generate_chunk(args: tuple[int, int, int, int, int, int]) -> list[tuple[str, int]]:
  seed, chunk, min_length, max_length, max_depth, max_args = args
  rng = _seeded_rng(seed, chunk)
  accepted = []
  for _ in range(CHUNK_MAX_TRIES):
    grown = _grow(rng, 1, max_depth, max_args, max_length - 1)
    if grown is not None and grown[1] > min_length:
      accepted.append((tree_to_string(grown[0]), evaluate_tree(grown[0])))
      if len(accepted) == CHUNK_ACCEPTS:
        break
  return accepted


def _chunks_in_order(args: Iterable[tuple], workers: int):
  """Yields chunk results in chunk order, computing up to 2 * workers chunks ahead."""
  if workers == 1:
    yield from map(_generate_chunk, args)
    return
  # spawn, not fork: the caller may already run JAX's threads, which a fork would copy broken.
  with multiprocessing.get_context("spawn").Pool(workers) as pool:  # exit ends pending work
    pending: collections.deque = collections.deque()
    for a in args:
      pending.append(pool.apply_async(_generate_chunk, (a,)))
      if len(pending) >= 2 * workers:
        yield pending.popleft().get()


def generate(num_examples: int, *, min_length: int, max_length: int,
             max_depth: int = RELEASE_SETTINGS["max_depth"],
             max_args: int = RELEASE_SETTINGS["max_args"], seed: int = 0,
             workers: int | None = None, progress: bool = True) -> list[tuple[str, int]]:
  """Returns num_examples unique (string, label) pairs with min_length < length < max_length.

  Output depends only on the arguments other than workers and progress: chunk i draws from
  its own seeded generator and chunks are consumed in order.
  """
  if num_examples < 0:
    raise UserError(f"num_examples must be >= 0, got {num_examples}")
  if max_depth < 1 or max_args < 2:
    raise UserError(f"need max_depth >= 1 and max_args >= 2, got {max_depth}, {max_args}")
  if max_length < 2:
    raise UserError(f"max_length must be >= 2, got {max_length}")
  reachable = _reachable_lengths(max_depth, max_args, max_length) >> (max(min_length, 0) + 1)
  if num_examples and not reachable:
    raise UserError(f"no tree with max_depth={max_depth}, max_args={max_args} has a length "
                    f"strictly between {min_length} and {max_length}")
  if workers is None:
    workers = os.cpu_count() or 1
  if workers < 1:
    raise UserError(f"workers must be >= 1, got {workers}")

  def chunk_args():
    chunk = 0
    while True:
      yield seed, chunk, min_length, max_length, max_depth, max_args
      chunk += 1

  examples: list[tuple[str, int]] = []
  seen: set[str] = set()
  with console.bar(total=num_examples, progress=progress, unit="ex", desc="listops") as bar:
    if num_examples:
      for accepted in _chunks_in_order(chunk_args(), workers):
        for source, label in accepted:
          if source not in seen:
            seen.add(source)
            examples.append((source, label))
            bar.update(1)
            if len(examples) == num_examples:
              return examples
  return examples


def write_tsv(path: str | os.PathLike, examples: Iterable[tuple[str, int]]) -> None:
  """Writes a release-format TSV atomically (a unique temporary file beside it, then a rename)."""
  with paths.atomic_write(path, "w", encoding="utf-8", newline="\n") as f:
    f.write(HEADER + "\n")
    for source, label in examples:
      f.write(f"{source}\t{label}\n")


def generate_split_files(data_dir: str | os.PathLike, *, num_train: int, num_val: int,
                         num_test: int, min_length: int, max_length: int,
                         max_depth: int = RELEASE_SETTINGS["max_depth"],
                         max_args: int = RELEASE_SETTINGS["max_args"], seed: int = 0,
                         workers: int | None = None, progress: bool = True) -> dict[str, str]:
  """Generates one unique set and writes basic_{train,val,test}.tsv; returns split -> path.

  The LRA release is generate_split_files(data_dir, **RELEASE_SETTINGS)."""
  counts = {"train": num_train, "val": num_val, "test": num_test}
  for split, num in counts.items():  # a negative count would slice rows of another split
    if num < 1:
      raise UserError(f"num_{split}={num}: every ListOps split needs at least one example")
  total = sum(counts.values())
  examples = generate(total, min_length=min_length, max_length=max_length,
                      max_depth=max_depth, max_args=max_args, seed=seed, workers=workers,
                      progress=progress)
  if len(examples) < total:
    raise UserError(f"generated only {len(examples)} of {total} unique examples; ask for fewer "
                    f"or allow longer or deeper trees")
  os.makedirs(data_dir, exist_ok=True)
  paths: dict[str, str] = {}
  start = 0
  for split in SPLITS:
    paths[split] = os.path.join(os.fspath(data_dir), f"basic_{split}.tsv")
    write_tsv(paths[split], examples[start:start + counts[split]])
    start += counts[split]
  return paths


# ----------------------------------------------------------------------------- the task


def _generator_settings(data) -> dict:
  return {**{k: data[k] for k in RELEASE_SETTINGS}, "seed": data.seed}


# Bytes per example of a ListOps TSV with the release's settings: the mean over 2,000 generated
# trees (seeds 0 and 5), about 6.65 KB; only for the line said before generating.
RELEASE_BYTES_PER_EXAMPLE = 6650


def plan(settings: dict) -> str:
  """What generating with `settings` writes: the split sizes and files (and, for the release's
  settings, that it is the full release and about how many MB)."""
  counts = "/".join(f"{settings[f'num_{split}']:,}" for split in FILES)
  what = f"{counts} examples ({'/'.join(FILES.values())}"
  if all(settings[k] == v for k, v in RELEASE_SETTINGS.items()):
    total = sum(settings[f"num_{split}"] for split in FILES)
    return (f"the full LRA release, {what}, about "
            f"{total * RELEASE_BYTES_PER_EXAMPLE / 1e6:,.0f} MB)")
  return what + ")"


def generate_command(data) -> str:
  return ("python -m lra.data listops --data_dir=" + data.data_dir + "".join(
      f" --{k}={v}" for k, v in _generator_settings(data).items()))


def _record(data_dir: str) -> dict | None:
  """The folder's data record; a generator.json (what this code wrote before records) counts."""
  made = record.read(data_dir)
  legacy = os.path.join(data_dir, "generator.json")
  if made is None and os.path.isfile(legacy):
    try:
      with open(legacy, encoding="utf-8") as f:
        settings = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise UserError(f"{legacy} is not readable ({e}); delete {data_dir} and generate the "
                      f"data again") from None
    made = {"task": "listops", "format": record.FORMAT, "settings": settings,
            "source": {"generator": __name__}, "complete": True,
            "files": [*FILES.values(), "generator.json"]}
  return made


def make_folder(data_dir: str, *, workers: int | None = None, progress: bool = True,
                **settings) -> dict[str, str]:
  """generate_split_files into an empty folder or one generated before, with its record."""
  data_dir = os.fspath(data_dir)
  made = {"task": "listops", "settings": settings, "source": {"generator": __name__}}
  with record.writing(data_dir, made, FILES.values(), previous=_record(data_dir)):
    return generate_split_files(data_dir, **settings, workers=workers, progress=progress)


def load(config) -> Task:
  """The ListOps task from config.data.data_dir, generated there first if missing and allowed.

  Files given by hand (the release's) are read as they are; generated ones must have been
  generated with the config's settings (lra.data.record)."""
  data = config.data
  files = {s: os.path.join(data.data_dir, name) for s, name in FILES.items()}
  # Generated files a user changed or deleted are neither read nor generated over.
  record.verify(data.data_dir, generate_command(data))

  def complete() -> bool:
    return all(map(os.path.exists, files.values())) and record.is_complete(_record(data.data_dir))

  if not complete() and not data.generate_if_missing:
    raise UserError(f"ListOps data not found or incomplete in {data.data_dir}; make it with: "
                    f"{generate_command(data)}")

  def make():
    print(f"ListOps data not found in {data.data_dir}; generating {plan(data)} there (same "
          f"as: {generate_command(data)})", flush=True)
    make_folder(data.data_dir, **_generator_settings(data), workers=data.workers or None)

  # Every process of a multi-host run gets here: one generates, the others wait and read.
  publish.prepare_once(data.data_dir, complete, make)
  made = _record(data.data_dir)
  note = {"record": None, "cut": None}
  if made is not None:
    note = record.compare(made, data.data_dir, "listops", data, generate_command(data))
  splits, lengths, unknown = {}, {}, {}
  for split, path in files.items():
    try:
      read = read_tsv(path, data.max_len)
    except UserError as e:  # ours, from the reader: add how to get good data back
      raise UserError(f"{e}; fix or delete the file (ListOps data can be regenerated with: "
                      f"{generate_command(data)})") from None
    splits[split] = {"inputs": read.inputs.astype(np.uint8), "labels": read.labels}
    lengths[split] = read.lengths
    if read.unknown:
      unknown[split] = read.unknown
  # Measured on the examples read, whoever made them: the release's files have no record.
  note["cut"] = notes.cut(lengths, data.max_len)
  if unknown:  # only then, so the note of data without any stays as it was
    note["unknown_tokens"] = unknown
  return Task.of("listops", data.max_len, splits, data=note)
