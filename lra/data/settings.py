"""The data settings of each task (config.data), one dataclass a task whose fields are declared
as every setting is (`lra.rules.setting`): default, value rule, what each is for, whether it
may change on a resume, whether the paper comparison ignores it, the setting without which it
does nothing (`only_with`). The task configs fill config.data from here (`fill`), then change
what their `cpu` preset changes; lra/training/config_checks.py checks the rules. Readers take
a task's settings as `lra.rules.declared(BY_TASK[task])` (`of(task)`). The generators' values
(ListOps' release sizes, MQAR's Figure 2 point) are the generators' own, read here.
Plain Python, no JAX: configs/ imports it while a config loads.
"""
from __future__ import annotations

import dataclasses

from lra import rules as s
from lra.data import listops, mqar
from lra.data.formal import specs as formal
from lra.rules import Setting, declared, setting


def _where(default: str):
  return setting(default, None, "the task's folder; a relative one is a folder of the data "
                 "home (lra/data/home.py: $LRA_DATA_DIR, else the checkout, else ~/lra_data)",
                 ignored=True)


# Only say how the data is made or read: they may change on a resume, and the comparison
# ignores them. The generators' seeds draw another sample of the same data: ignored.
def _generate():
  return setting(True, s.Bool(), "generate the data on first use where it is missing "
                 "(a synthetic task)", resume=True, ignored=True)


def _workers():
  return setting(0, s.Int(0), "generator processes; 0 = all cores", resume=True, ignored=True)


def _seed():
  return setting(0, None, "generator seed (the trainer's seed is config.seed)", ignored=True)


def _black():
  return setting(False, s.Bool(), "True = the original's accidental mask: black pixels (value "
                 "0) as padding; False = every pixel a real token")


def _max_len(default: int, doc: str = "tokens per example (padded / cut)"):
  return setting(default, s.Int(1), doc)


_RELEASE = listops.RELEASE_SETTINGS  # the LRA release's values


@dataclasses.dataclass(frozen=True)
class ListopsData:
  data_dir: str = _where("data/listops")
  generate_if_missing: bool = _generate()
  max_len: int = _max_len(2000)
  num_train: int = setting(_RELEASE["num_train"], None, "train examples generated")
  num_val: int = setting(_RELEASE["num_val"], None, "validation examples generated")
  num_test: int = setting(_RELEASE["num_test"], None, "test examples generated")
  min_length: int = setting(_RELEASE["min_length"], None, "trees longer than this (tokens)")
  max_length: int = setting(_RELEASE["max_length"], None, "trees shorter than this (tokens)")
  max_depth: int = setting(_RELEASE["max_depth"], None, "nesting depth at most")
  max_args: int = setting(_RELEASE["max_args"], None, "arguments of an operator at most")
  seed: int = _seed()
  workers: int = _workers()


@dataclasses.dataclass(frozen=True)
class TextData:
  data_dir: str = _where("data/text")
  max_len: int = _max_len(4000, "byte tokens per review (prepared at 4,000; cut here)")
  validation: str = setting("heldout", s.Choice(("heldout", "test")), 'IMDb has no validation '
                            'split: "heldout" = a fixed random share of train (our fix), '
                            '"test" = validate on the test split, as the original did')
  val_fraction: float = setting(0.1, s.Float(0.0, 1.0, open="low high"), "share of train held "
                                "out for validation", only_with=("validation", "heldout"))
  split_seed: int = setting(0, None, "which share of train is held out", ignored=True,
                            only_with=("validation", "heldout"))


@dataclasses.dataclass(frozen=True)
class RetrievalData:
  data_dir: str = _where("data/retrieval")
  max_len: int = _max_len(4000, "byte tokens per document")


@dataclasses.dataclass(frozen=True)
class ImageData:
  data_dir: str = _where("data/image")
  black_is_padding: bool = _black()


def _size(default: int):
  return setting(default, s.Int(1), "image side in pixels (32, 64, 128 or 256)")


@dataclasses.dataclass(frozen=True)
class PathfinderData:
  data_dir: str = _where("data/pathfinder32")
  size: int = _size(32)
  level: str = setting("hard", s.Choice(("easy", "intermediate", "hard")), "contour length "
                       "6, 9 or 14")
  num_images: int = setting(200000, s.Int(1), "images to generate when the data is missing")
  seed: int = _seed()
  workers: int = _workers()
  generate_if_missing: bool = _generate()
  black_is_padding: bool = _black()


@dataclasses.dataclass(frozen=True)
class PathxData(PathfinderData):  # the fields keep their places; these two their defaults
  data_dir: str = _where("data/pathfinder128")
  size: int = _size(128)


@dataclasses.dataclass(frozen=True)
class Path256Data(PathfinderData):
  data_dir: str = _where("data/pathfinder256")
  size: int = _size(256)


_MQAR = mqar.SETTINGS  # checked there (mqar.check_settings)


@dataclasses.dataclass(frozen=True)
class MqarData:
  data_dir: str = _where("data/mqar")
  generate_if_missing: bool = _generate()
  vocab_size: int = setting(_MQAR["vocab_size"], None, "keys 1..V/2-1, values V/2..V-1")
  max_len: int = setting(_MQAR["max_len"], None, "tokens per example (never cut)")
  num_kv_pairs: int = setting(_MQAR["num_kv_pairs"], None, "key-value pairs, and queries, per "
                              "example")
  power_a: float = setting(_MQAR["power_a"], None, "the queries' gap law")
  random_non_queries: bool = setting(_MQAR["random_non_queries"], None, "random fillers "
                                     "instead of 0")
  num_train: int = setting(_MQAR["num_train"], None, "train examples generated")
  num_val: int = setting(_MQAR["num_val"], None, "validation examples generated")
  num_test: int = setting(_MQAR["num_test"], None, "test examples generated")
  seed: int = _seed()


_FORMAL_DOCS = {
    "layout": "how the string and its answer are laid out, and what a length counts "
              "(lra/data/formal/specs.py): 'grazzi' = Grazzi et al.'s, 'deletang' = Deletang's",
    "train_min_length": "shortest training length (the layout's length axis)",
    "train_max_length": "longest training length",
    "test_min_length": "shortest validation and test length",
    "test_max_length": "longest validation and test length",
    "num_train": "train examples generated", "num_val": "validation examples generated",
    "num_test": "test examples generated"}


def _formal_data(task: str) -> type:
  """The data settings of formal task `task` (lra/data/formal/specs.py defaults; checked by
  lra.data.formal.loader.check_settings): its folder, the generator's settings, the seed."""
  spec = formal.SPECS[task]
  rules = {"layout": s.Choice(spec.layouts)}
  fields = [("data_dir", str, _where(f"data/{task}")),
            ("generate_if_missing", bool, _generate())]
  fields += [(name, type(value), setting(value, rules.get(name, s.Int(1)), _FORMAL_DOCS[name]))
             for name, value in formal.defaults(task).items()]
  fields.append(("seed", int, _seed()))
  name = "".join(part.title() for part in task.split("_")) + "Data"
  return dataclasses.make_dataclass(name, fields, frozen=True)


# task -> its data settings.
BY_TASK: dict[str, type] = {
    "listops": ListopsData, "text": TextData, "retrieval": RetrievalData, "image": ImageData,
    "pathfinder": PathfinderData, "pathx": PathxData, "path256": Path256Data, "mqar": MqarData,
    **{task: _formal_data(task) for task in formal.SPECS}}


def of(task: str) -> dict[str, Setting]:
  """{name: Setting} of `task`'s data settings, in the order config.data lists them ({} for a
  task with none declared)."""
  return declared(BY_TASK[task]) if task in BY_TASK else {}


# Every generator value is a declared setting, in the generator's order.
for _cls, _values in ((ListopsData, _RELEASE), (MqarData, _MQAR)):
  assert [n for n in declared(_cls) if n in _values] == list(_values), _cls

# Dotted config keys (data.NAME) of any task: those a resume may change, those the comparison
# ignores (read by lra/training/workdir.py and lra/reporting/comparable.py).
OBSERVING = frozenset(f"data.{n}" for task in BY_TASK for n, o in of(task).items() if o.resume)
IGNORED = frozenset(f"data.{n}" for task in BY_TASK for n, o in of(task).items() if o.ignored)


def fill(data, task: str) -> None:
  """Sets config.data (`data`) of `task` to its declared defaults, in their order."""
  for name, declaration in of(task).items():
    data[name] = declaration.default
