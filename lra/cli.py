"""What the commands share on their command lines: `--set KEY=VALUE` items, read one way by
eval.py speed (and its measuring child), python -m lra.commands.leaderboard and scripts/program_cost.py.
Each command names its own form and example in the one-line error."""
from __future__ import annotations

import ast
from typing import Any

from lra.errors import UserError


def literal(text: str) -> Any:
  """A --set value: the Python literal it spells (True, 12, 0.5, "x", None), else the text."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def split_set(item: str, form: str = "KEY=VALUE", example: str = "reversible=True",
              scoped: bool = False) -> tuple[str | None, str, str]:
  """'KEY=VALUE' (or, where `scoped`, 'SCOPE:KEY=VALUE') -> (scope or None, key, value text);
  anything else is a UserError: `--set ITEM is not FORM (e.g. --set EXAMPLE)`."""
  left, sep, value = item.partition("=")
  scope, colon, key = left.rpartition(":") if scoped else ("", "", left)
  if not sep or not key.strip() or (colon and not scope.strip()):
    raise UserError(f"--set {item!r} is not {form} (e.g. --set {example})")
  return (scope.strip() or None) if colon else None, key.strip(), value


def parse_sets(items: list[str]) -> dict[str, Any]:
  """['reversible=True', 'norm=batch'] -> {'reversible': True, 'norm': 'batch'}: values as
  `literal` reads them (surrounding spaces dropped)."""
  sets = {}
  for item in items:
    _, key, text = split_set(item)
    sets[key] = literal(text.strip())
  return sets
