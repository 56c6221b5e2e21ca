"""Tasks by name: each gives its splits, vocabulary, class count and input kind; FACTS holds
each task's fixed numbers (classes, vocabulary, full split sizes) for every layer.

A task never knows about models; the trainer puts the two together. Each task's loader lives
with its reader (lra.data.listops.load, lra.data.text.load, ...); large tasks are read from
prepared memory-mapped files (lra.data.store) made by `python -m lra.data TASK ...`.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib

from lra.data import home, notes, store
from lra.data.formal import specs as formal
from lra.errors import UserError

SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class Facts:
  """What a task is whatever its config: the one place of each of these numbers."""
  module: str       # the lra.data module whose load(config) makes it, imported when asked for
  num_classes: int
  vocab_size: int   # token ids 0..vocab_size-1
  pair: bool        # two inputs per example (dual encoder)
  test_size: int    # the test split of the task's full data (LRA release, standard downloads)
  train_size: int   # the train split its default config makes of the full data
  lra: bool = True  # one of LRA's six (in its tables and averages); False: a task beyond it
  # A label per input position (labels NxL, NO_TARGET where a position has none; the model's
  # per-token head), not one per example: MQAR (lra/data/mqar.py says why).
  per_position: bool = False


# The paper's order. Text and Image hold out part of train for validation: 22,500 of IMDb's
# 25,000, CIFAR-10's train[:90%]; Pathfinder splits 200,000 images 80/10/10. Token ids: Text and
# Retrieval byte + 1 (0 pads), Image and Pathfinder the pixel values, ListOps
# lra.data.listops.VOCAB + padding + out-of-vocabulary.
FACTS: dict[str, Facts] = {
    "listops": Facts("listops", 10, 17, False, test_size=2000, train_size=96000),
    "text": Facts("text", 2, 257, False, test_size=25000, train_size=22500),
    "retrieval": Facts("retrieval", 2, 257, True, test_size=17437, train_size=147086),
    "image": Facts("image", 10, 256, False, test_size=10000, train_size=45000),
    "pathfinder": Facts("pathfinder", 2, 256, False, test_size=20000, train_size=160000),
    "pathx": Facts("pathfinder", 2, 256, False, test_size=20000, train_size=160000),
    # Beyond LRA: multi-query associative recall (Arora et al. 2023, Zoology), generated; its
    # vocabulary is a generator setting (here the paper's 8,192; the loader takes the data's),
    # and the classes are the whole vocabulary, as Zoology's LM head predicts.
    "mqar": Facts("mqar", 8192, 8192, False, test_size=3000, train_size=100000, lra=False,
                  per_position=True),
    # Beyond LRA: Path-256, Pathfinder at 256x256 (65,536 pixel tokens) as S4 and SPT
    # (Amos et al.) train it, on the release's pathfinder256 hard level: 200,000 images, 80/10/10.
    "path256": Facts("pathfinder", 2, 256, False, test_size=20000, train_size=160000,
                     lra=False),
    # Beyond LRA: the formal-language tasks of Deletang et al. 2023 and the group word problems
    # of Merrill et al. 2024 (lra/data/formal/), generated; per position, trained on short
    # strings and tested on longer ones. Sizes: the default data settings'.
    **{name: Facts("formal.loader", spec.classes, spec.vocab_size, False,
                   test_size=formal.defaults(name)["num_test"],
                   train_size=formal.defaults(name)["num_train"], lra=False, per_position=True)
       for name, spec in formal.SPECS.items()},
}
NAMES: tuple[str, ...] = tuple(n for n, f in FACTS.items() if f.lra)  # LRA's six, its order
# Beyond LRA: MQAR, Path-256, the formal-language tasks.
EXTRA: tuple[str, ...] = tuple(n for n, f in FACTS.items() if not f.lra)
NO_TARGET = -1  # a per-position task's label where a position has no target


@dataclasses.dataclass
class Task:
  name: str
  num_classes: int
  vocab_size: int
  max_len: int
  pair: bool  # two inputs per example (dual encoder)
  # split -> {"inputs": NxL ints (+ "inputs2" for pair tasks), "labels": N ints (NxL for a
  # per-position task)}; the token arrays may be lazy row readers (lra.data.store.Rows). The
  # formal tasks' splits have widths of their own (max_len: the widest) and "lengths" (N ints,
  # each example's task length: lra/data/formal/rows.py).
  splits: dict[str, dict]
  padding: bool = True  # token id 0 is padding; if False every position is real (pixels)
  per_position: bool = False  # labels NxL, NO_TARGET where none (Facts.per_position)
  # What made the data (its lra.data.record, or None for files given by hand) and any cut of
  # the rows to max_len, measured on the examples read: {"record": ..., "cut": {"from": the
  # longest length, "to": max_len, examples cut, their share, per split} or None
  # (lra.data.notes); ListOps adds "unknown_tokens" where a file has some. The trainer writes
  # it into results.json, so a result says which data it was measured on.
  data: dict = dataclasses.field(default_factory=lambda: {"record": None, "cut": None})
  # The per-position accuracy of a guess, 1 / the output's classes (the formal tasks; None
  # elsewhere): their scaled accuracy (acc - chance) / (1 - chance) (Grazzi et al.'s, the
  # xLSTM paper's) is 0 at chance and 1 when perfect.
  chance: float | None = None

  @classmethod
  def of(cls, name: str, max_len: int, splits: dict[str, dict], **options) -> Task:
    """Task `name` with its class count, vocabulary and pairing from FACTS."""
    facts = FACTS[name]
    return cls(name, facts.num_classes, facts.vocab_size, max_len, facts.pair, splits,
               per_position=facts.per_position, **options)


def require_prepared(data_dir: str, splits, what: str, command: str) -> None:
  """A prepared task's data must exist; the error gives the command that prepares it."""
  if not store.exists(data_dir, splits):
    raise UserError(f"{what} data not found in {data_dir}; prepare it with: {command}")


def _check_labels(task: Task) -> None:
  for split in SPLITS:
    labels = task.splits[split]["labels"]
    if len(labels) == 0:
      raise UserError(f"the {split} split of task {task.name!r} is empty")
    if task.per_position:  # only the labelled positions
      labels = labels[labels != NO_TARGET]
      if labels.size == 0:
        raise UserError(f"the {split} split of task {task.name!r} has no labelled position")
    if labels.min() < 0 or labels.max() >= task.num_classes:
      raise UserError(f"the {split} split of task {task.name!r} has labels outside "
                      f"0..{task.num_classes - 1}")


def load(config) -> Task:
  """config.task's data as a Task; missing or malformed data raises UserError.

  A relative config.data.data_dir is read from the data home (lra.data.home); the loader gets
  a copy of the config with the resolved folder, and the config itself (config.json, a
  resume's comparison) keeps the path as it was given."""
  if config.task not in FACTS:
    raise UserError(f"unknown task {config.task!r}; valid tasks: {', '.join(FACTS)}")
  data_dir = str(config.data.data_dir)
  if "://" in data_dir:  # memory-mapped arrays and the generators need a local folder
    raise UserError(f"config.data.data_dir={data_dir} is remote storage; copy the data to local "
                    f"disk (memory-mapped files need a local path) and point data_dir there")
  module = importlib.import_module(f"lra.data.{FACTS[config.task].module}")
  config = copy.deepcopy(config)
  config.data.data_dir = home.resolve(data_dir)
  task = module.load(config)
  _check_labels(task)
  notes.say(config.task, task.data)  # a cut, unknown tokens: said as the task loads
  return task
