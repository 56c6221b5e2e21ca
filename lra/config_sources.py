"""Where each value of a config came from: the layer of configs/ that last changed it (base, a
preset, the task's config or table, the published recipe, the mixer's own settings, the command
line), for `python train.py --explain_config`.

Each layer, after it sets its values, calls `note(config, layer)`: every leaf that is new or
changed since the previous note is that layer's, and so is every key the layer names as
`written` (a table's keys: set, if to the value they had). A value a layer sets without naming
it, equal to the one it had, stays with the earlier layer (it changed nothing). The record
rides on the config object (copies do not carry it). Plain Python, no JAX: configs/ calls it
while a config loads.
"""
from __future__ import annotations

from typing import Any, Iterable

from lra import config_record

# The layers, as the explanation names them (configs/ passes these).
BASE = "base (configs/base.py)"
MIXER = "the mixer's own settings"  # its defaults, ENCODER_SETTINGS, SETTINGS_WHEN
TASK_TABLE = "the task's table (configs/table.py)"
TASK_MODEL_TABLE = "the task-model table (configs/table.py)"
COMMAND_LINE = "command line"
NAME = "model.name"  # set in configs/base.py from --config=FILE:MODEL's argument
UNNOTED = "not recorded"  # a value no layer noted (a config file that notes none)

_RECORD = "_sources"  # the hidden attribute (not a config field) that holds the record


def task_config(file: str) -> str:
  """The layer of a task's own config file (its data and trainer choices)."""
  return f"the task's config ({file})"


def preset(name: str, file: str) -> str:
  """The layer of the `cpu` or `paper` option in `file`."""
  return f"{name} preset ({file})"


def published(model: str) -> str:
  return f"published recipe (configs/published/{model}.py)"


class _Record:
  """{dotted key: layer}, and the leaves' values at the last note."""

  def __init__(self):
    self.layers: dict[str, str] = {}
    self.values: dict[str, Any] = {}


def _leaves(config) -> dict[str, Any]:
  return config_record.flat(config.to_dict())


def note(config, layer: str, written: Iterable[str] = ()) -> None:
  """Names `layer` as the source of every leaf of `config` new or changed since the last note,
  and of the dotted keys `written`."""
  record = config.__dict__.get(_RECORD)
  if record is None:
    record = _Record()
    object.__setattr__(config, _RECORD, record)  # not a field: to_dict and JSON never see it
  leaves = _leaves(config)
  for key, value in leaves.items():
    if key not in record.values or record.values[key] != value:
      record.layers[key] = layer
  record.layers.update((key, layer) for key in written if key in leaves)
  record.values = leaves


def credit_argument(config, arg: str) -> None:
  """Names --config's `arg` (FILE:ARG) as the source of model.name where the argument spells
  it (`gla` of `gla,cpu`) and no layer after base changed it: configs/base.py only copies it
  from there."""
  record = config.__dict__.get(_RECORD)
  if record is None or record.layers.get(NAME) != BASE:
    return
  if arg.split(",")[0].strip() == record.values.get(NAME):
    record.layers[NAME] = f"the --config argument (:{arg})"


def sources(config) -> dict[str, tuple[Any, str]]:
  """{dotted key: (value, the layer that set it)} for every leaf, in sorted key order."""
  record = config.__dict__.get(_RECORD) or _Record()
  return {key: (value, record.layers.get(key, UNNOTED))
          for key, value in sorted(_leaves(config).items())}


def explain(config) -> list[str]:
  """One line per leaf: `KEY = VALUE    <- LAYER`, the values aligned."""
  found = sources(config)
  cells = [(f"config.{key} = {value!r}", layer) for key, (value, layer) in found.items()]
  width = max((len(text) for text, _ in cells), default=0)
  return [f"{text.ljust(width)}  <- {layer}" for text, layer in cells]
