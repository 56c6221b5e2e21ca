"""The grid's sweep axis: `--sweep KEY=V1,V2,...` (repeatable; several flags make their product)
gives every cell (and seed) one run per point, each in its own workdir
ROOT/TASK/MODEL-PRESET[_seedN]_sweep/KEY=VALUE,KEY=VALUE (lra.sweep_names), skipped when
finished and resumed when not, like every run of the grid. The tables then choose each cell's
point on validation (lra.reporting.sweeps).

Linked keys, `--sweep KEY1,KEY2=(V1a,V2a),(V1b,V2b)`, move together rather than as a product
(Zoology's width d_model is model.emb_dim, qkv_dim and mlp_dim at once; its MQAR data points
pair a sequence length with a number of key-value pairs): each parenthesised group is one point
of the flag, one value per key, and the flag counts as one axis of the product. With one key a
parenthesised value is a tuple value, as ever.

Values are read as the type of the key's field in each cell's config, by the override parser
train.py uses (lra.cli.set_value), so `learning_rate=1e-3,0.003` are numbers and a value the
field cannot take is refused before anything runs. Refused in one line too: a key no config of
the grid has, an empty list, item or group, a value (or group) given twice, a key given twice
(in one flag or two), a linked value without its parentheses or with another count of values
than keys, a key that a --config override (or a grid alias such as transformer_chunked)
already sets for a cell, and `seed` (--seeds), `objective`, `init_from` (the --protocol's)."""
from __future__ import annotations

import copy
import dataclasses
import itertools
import json

from lra import cli, sweep_names
from lra.errors import UserError

FLAG = "--sweep"
EXAMPLE = "--sweep learning_rate=1e-3,3e-3"
# Keys that other flags own: a sweep over them would not be a sweep of settings.
OWNED = {"seed": "--seeds gives each run its seed",
         "objective": "--protocol sets each stage's objective",
         "init_from": "--protocol sets where a fine-tune starts"}


@dataclasses.dataclass(frozen=True)
class Point:
  name: str                                # its folder (lra.sweep_names); "" without --sweep
  items: tuple[tuple[str, str], ...] = ()  # its --config.KEY=VALUE overrides
  expect: tuple[tuple[str, object], ...] = ()  # the values its results.json must record


NO_SWEEP = (Point(""),)


def _split(text: str) -> list[str]:
  """'a,(1, 2),"x,y"' -> ['a', '(1, 2)', '"x,y"']: commas inside brackets or quotes stay."""
  items, depth, quote, start = [], 0, "", 0
  for i, c in enumerate(text):
    if quote:
      quote = "" if c == quote else quote
    elif c in "'\"":
      quote = c
    elif c in "([{":
      depth += 1
    elif c in ")]}":
      depth -= 1
    elif c == "," and depth == 0:
      items.append(text[start:i])
      start = i + 1
  return [t.strip() for t in items + [text[start:]]]


@dataclasses.dataclass(frozen=True)
class Axis:
  """One --sweep flag: its keys (one, or several linked) and its points' value texts, one per
  key each."""
  flag: str                             # as given, for the one-line refusals
  keys: tuple[str, ...]
  groups: tuple[tuple[str, ...], ...]

  def said(self) -> str:
    return f"{FLAG} {self.flag}"


def _group_text(texts: tuple[str, ...]) -> str:
  return texts[0] if len(texts) == 1 else "(" + ",".join(texts) + ")"


def _linked_groups(keys: list[str], values: list[str], said: str) -> list[tuple[str, ...]]:
  """'(16,16)' items -> ('16', '16'): exactly one value per key, each in parentheses."""
  example = f"{','.join(keys)}=" + ",".join(
      "(" + ",".join(f"V{i + 1}{p}" for i in range(len(keys))) + ")" for p in "ab")
  groups = []
  for value in values:
    if not (value.startswith("(") and value.endswith(")")):
      raise UserError(f"{said}: {value} is not in parentheses; linked keys take one "
                      f"parenthesised group per point, one value per key ({example})")
    inner = _split(value[1:-1])
    if not all(inner):
      raise UserError(f"{said}: {value} is an empty group or holds an empty value; give "
                      f"one value per key ({example})")
    if len(inner) != len(keys):
      raise UserError(f"{said}: {value} holds {len(inner)} values for {len(keys)} keys; "
                      f"give one value per key ({example})")
    groups.append(tuple(inner))
  return groups


def _axis(flag: str) -> Axis:
  """One --sweep flag, checked as text: its keys and its points' value texts."""
  head, sep, text = flag.partition("=")
  keys = [key.strip() for key in head.split(",")]
  said = f"{FLAG} {flag}"
  if not sep or not all(k and all(p.isidentifier() for p in k.split(".")) for k in keys):
    raise UserError(f"{said}: give KEY=V1,V2,..., KEY the config's path (e.g. {EXAMPLE}), "
                    f"or linked keys KEY1,KEY2=(V1a,V2a),(V1b,V2b),...")
  values = _split(text)
  if not text.strip() or not all(values):
    raise UserError(f"{said}: an empty list or value; give the values comma separated "
                    f"(e.g. {EXAMPLE})")
  twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
  if twice:
    raise UserError(f"{said}: {twice} is given twice among the linked keys; give each once")
  groups = [(v,) for v in values] if len(keys) == 1 else _linked_groups(keys, values, said)
  if len(set(groups)) < len(groups):
    twice = next(g for g in groups if groups.count(g) > 1)
    raise UserError(f"{said}: {_group_text(twice)} is given twice; give each value once")
  for key in keys:
    if key in OWNED:
      raise UserError(f"{said}: {OWNED[key]}; a sweep takes other keys")
  return Axis(flag, tuple(keys), tuple(groups))


def parse(flags: list[str]) -> list[Axis]:
  """The --sweep flags, checked as text (the types per cell: `points`); a malformed flag, an
  empty list or item, a repeated value or key, a malformed linked group is one line."""
  axis: list[Axis] = []
  for flag in flags:
    found = _axis(flag)
    for key in found.keys:
      if any(key in other.keys for other in axis):
        raise UserError(f"{found.said()}: {key} is swept by another {FLAG} too; give its "
                        f"values in one")
    axis.append(found)
  return axis


def _typed(config, key: str, text: str, where: str) -> object:
  """`text` read as train.py reads --config.KEY=text on the cell's config (a copy), as
  results.json will record it; a key the config lacks or a value it refuses is one line."""
  trial = copy.deepcopy(config)
  try:
    cli.set_value(trial, key, text)
  except UserError as e:  # e: set_value's line, which names the field and what it takes
    raise UserError(f"{FLAG} {key}=...: {text!r} for the {where} config: {e}") from None
  node = trial
  for part in key.split("."):
    node = node[part]
  if hasattr(node, "keys"):
    raise UserError(f"{FLAG} {key}=...: {key} is a section of the {where} config; sweep one "
                    f"of its keys")
  return json.loads(json.dumps(node.to_dict() if hasattr(node, "to_dict") else node))


def _same(a: tuple, b: tuple) -> bool:
  return all(x == y and type(x) is type(y) for x, y in zip(a, b))


def _values(config, axis: Axis, where: str) -> list[tuple]:
  """The axis' groups typed by the cell's config: [(value per key)]; two spellings of one
  point are one line."""
  values = [tuple(_typed(config, key, text, where) for key, text in zip(axis.keys, group))
            for group in axis.groups]
  for i, value in enumerate(values):
    for j in range(i):
      if _same(values[j], value):
        shown = ", ".join(sweep_names.value_text(v) for v in value)
        raise UserError(f"{axis.said()}: {_group_text(axis.groups[j])} and "
                        f"{_group_text(axis.groups[i])} are the same value"
                        f"{'s' if len(value) > 1 else ''} ({shown}) for the {where} config; "
                        f"give each value once")
  return values


def points(axis: list[Axis], config, given: list[str], where: str) -> tuple[Point, ...]:
  """A cell's points, the product of the axes' groups typed by its `config` (linked keys
  move together); `given`: the keys its --config overrides (and grid alias) set, which no
  sweep may set too."""
  if not axis:
    return NO_SWEEP
  for one in axis:
    for key in one.keys:
      if key in given:
        raise UserError(f"{one.said()}: the runs of {where} also get {key} from a "
                        f"{cli.PREFIX}{key} override (or the grid name); sweep it or set "
                        f"it, not both")
  typed = [_values(config, one, where) for one in axis]
  found = []
  for combination in itertools.product(*typed):
    values = {key: value for one, group in zip(axis, combination)
              for key, value in zip(one.keys, group)}
    name = sweep_names.point_name(values)
    if len(name) > sweep_names.LONGEST:
      raise UserError(f"{FLAG}: the point folder {name[:40]}... is {len(name)} characters, over "
                      f"{sweep_names.LONGEST}; sweep fewer keys or shorter values")
    items = tuple((key, sweep_names.value_text(values[key])) for key in sorted(values))
    found.append(Point(name, items, tuple((key, values[key]) for key in sorted(values))))
  return tuple(found)


def workdir(cell: str, point: Point) -> str:
  """The run's workdir: the cell's (ROOT/TASK/MODEL-PRESET[_seedN]) without a sweep, else the
  point's folder in the cell's `_sweep` folder."""
  return f"{cell}_sweep/{point.name}" if point.name else cell
