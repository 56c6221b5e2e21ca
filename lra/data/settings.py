"""The data settings of each task (config.data), declared as every setting is (lra.rules.Setting):
default, value rule, what each is for, whether it may change on a resume, whether the paper
comparison ignores it. The task configs fill config.data from here (`fill`), then change what
their `cpu` preset changes; lra/training/config_checks.py checks the rules. The generators'
values (ListOps' release sizes, MQAR's Figure 2 point) are the generators' own, read here.
Plain Python, no JAX: configs/ imports it while a config loads.
"""
from __future__ import annotations

from typing import Any

from lra import rules as s
from lra.data import listops, mqar
from lra.rules import Setting


def _where(default: str) -> Setting:
  return Setting(default, None, "the task's folder; a relative one is a folder of the data home "
                 "(lra/data/home.py: $LRA_DATA_DIR, else the checkout, else ~/lra_data)",
                 ignored=True)


# Only say how the data is made or read: they may change on a resume, and the comparison
# ignores them. The generators' seeds draw another sample of the same data: ignored.
_GENERATE = Setting(True, s.Bool(), "generate the data on first use where it is missing "
                    "(a synthetic task)", resume=True, ignored=True)
_WORKERS = Setting(0, s.Int(0), "generator processes; 0 = all cores", resume=True, ignored=True)
_SEED = Setting(0, None, "generator seed (the trainer's seed is config.seed)", ignored=True)
_BLACK = Setting(False, s.Bool(), "True = the original's accidental mask: black pixels (value "
                 "0) as padding; False = every pixel a real token")


def _max_len(default: int, doc: str = "tokens per example (padded / cut)") -> Setting:
  return Setting(default, s.Int(1), doc)


def _generated(sizes: dict[str, Any], docs: dict[str, str]) -> dict[str, Setting]:
  """A generator's settings, its values its defaults (`docs` in the same order)."""
  assert list(sizes) == list(docs), (list(sizes), list(docs))
  return {key: Setting(value, None, docs[key]) for key, value in sizes.items()}


_LISTOPS = {
    "data_dir": _where("data/listops"), "generate_if_missing": _GENERATE,
    "max_len": _max_len(2000),
    # The LRA release's values.
    **_generated(listops.RELEASE_SETTINGS, dict(
        num_train="train examples generated", num_val="validation examples generated",
        num_test="test examples generated", min_length="trees longer than this (tokens)",
        max_length="trees shorter than this (tokens)", max_depth="nesting depth at most",
        max_args="arguments of an operator at most")),
    "seed": _SEED, "workers": _WORKERS}

_TEXT = {
    "data_dir": _where("data/text"),
    "max_len": _max_len(4000, "byte tokens per review (prepared at 4,000; cut here)"),
    "validation": Setting("heldout", s.Choice(("heldout", "test")), 'IMDb has no validation '
                          'split: "heldout" = a fixed random share of train (our fix), "test" '
                          '= validate on the test split, as the original did'),
    "val_fraction": Setting(0.1, s.Float(0.0, 1.0, open="low high"), "share of train held "
                            "out for validation"),
    "split_seed": Setting(0, None, "which share of train is held out", ignored=True)}


def _pathfinder(size: int) -> dict[str, Setting]:
  return {
      "data_dir": _where(f"data/pathfinder{size}"),
      "size": Setting(size, s.Int(1), "image side in pixels (32, 64, 128 or 256)"),
      "level": Setting("hard", s.Choice(("easy", "intermediate", "hard")), "contour length "
                       "6, 9 or 14"),
      "num_images": Setting(200000, s.Int(1), "images to generate when the data is missing"),
      "seed": _SEED, "workers": _WORKERS, "generate_if_missing": _GENERATE,
      "black_is_padding": _BLACK}


_MQAR = {
    "data_dir": _where("data/mqar"), "generate_if_missing": _GENERATE,
    # lra/data/mqar.py SETTINGS, checked there (check_settings).
    **_generated(mqar.SETTINGS, dict(
        vocab_size="keys 1..V/2-1, values V/2..V-1",
        max_len="tokens per example (never cut)",
        num_kv_pairs="key-value pairs, and queries, per example",
        power_a="the queries' gap law", random_non_queries="random fillers instead of 0",
        num_train="train examples generated", num_val="validation examples generated",
        num_test="test examples generated")),
    "seed": _SEED}

# task -> {name: Setting}, in the order config.data lists them.
DECLARED: dict[str, dict[str, Setting]] = {
    "listops": _LISTOPS, "text": _TEXT,
    "retrieval": {"data_dir": _where("data/retrieval"),
                  "max_len": _max_len(4000, "byte tokens per document")},
    "image": {"data_dir": _where("data/image"), "black_is_padding": _BLACK},
    "pathfinder": _pathfinder(32), "pathx": _pathfinder(128), "path256": _pathfinder(256),
    "mqar": _MQAR}
# Dotted config keys (data.NAME) of any task: those a resume may change, those the comparison
# ignores (read by lra/training/workdir.py and lra/reporting/comparable.py).
OBSERVING = frozenset(f"data.{n}" for task in DECLARED.values() for n, o in task.items()
                      if o.resume)
IGNORED = frozenset(f"data.{n}" for task in DECLARED.values() for n, o in task.items()
                    if o.ignored)


def fill(data, task: str) -> None:
  """Sets config.data (`data`) of `task` to its declared defaults, in their order."""
  for name, declared in DECLARED[task].items():
    data[name] = declared.default
