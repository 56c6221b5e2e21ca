"""A sweep point's folder name, `KEY=VALUE,KEY=VALUE` (keys sorted), written by the grid's
--sweep (lra.commands.sweep_axis) and read back by the tables (lra.reporting.sweeps), which
take a run for a sweep point when its folder's name is one and its results.json records those
values.

A value is spelled as it reads back (`value_text`: a string as it is, anything else as the
Python literal of its JSON form, so 1e-3 and 0.001 are one point), and in the folder name
every character but letters, digits and `.+-` is percent-encoded (a `/`, `,`, `=`, space or
`_` of a value never reaches the path). A name's trailing `_STAGE` (the grid's `_pretrain` and
`_spt` of --protocol=spt) is not part of the point: no encoded value holds a `_`.
"""
from __future__ import annotations

import string
import urllib.parse
from typing import Any

_SAFE = set(string.ascii_letters + string.digits + ".+-")
LONGEST = 200  # characters of a point's folder name (file systems allow 255)


def _tuples(value: Any) -> Any:
  """Lists (as JSON records a tuple) as tuples, so a value reads the same from both."""
  if isinstance(value, (list, tuple)):
    return tuple(_tuples(v) for v in value)
  return value


def value_text(value: Any) -> str:
  """A value as --config.KEY=TEXT sets it again: a string as it is, else its Python literal."""
  return value if isinstance(value, str) else repr(_tuples(value))


def _quote(text: str) -> str:
  return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def point_name(values: dict[str, Any]) -> str:
  """{key: value} -> 'key=value,key=value', keys sorted (the flags' order does not matter)."""
  return ",".join(f"{key}={_quote(value_text(values[key]))}" for key in sorted(values))


def _is_key(key: str) -> bool:
  return bool(key) and all(part.isidentifier() for part in key.split("."))


def parse_point(name: str) -> dict[str, str] | None:
  """'key=value,...[_STAGE]' -> {key: value text}; None for a name that is no point."""
  head, _, tail = name.rpartition("_")
  if head and "=" in head and "=" not in tail:  # a stage suffix (values hold no "_")
    name = head
  found = {}
  for item in name.split(","):
    key, sep, text = item.partition("=")
    if not sep or not _is_key(key) or key in found or "=" in text or "_" in text:
      return None
    found[key] = urllib.parse.unquote(text)
  return found


def matches(name: str, recorded: dict[str, Any]) -> dict[str, Any] | None:
  """The point {key: recorded value} of a run in folder `name` whose flat config `recorded`
  holds the values the name spells; None when it is no sweep point."""
  point = parse_point(name)
  if point is None or any(key not in recorded or value_text(recorded[key]) != text
                          for key, text in point.items()):
    return None
  return {key: recorded[key] for key in point}
