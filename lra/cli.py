"""The one way every command takes a value: `--config.KEY=VALUE`, KEY the config's path from
its root, as train.py reads it (ml_collections). The grid (python -m lra.commands.leaderboard),
eval.py speed (and its measuring child) and scripts/program_cost.py take the same items through
`take_overrides`; the grid also `--config.KEY@SCOPE=VALUE` for the runs of one task or model.
`--set KEY=VALUE`, the old spelling of those commands, still works and says how to write it.
One key given two values in one scope is refused (`agree`). The root train.py and eval.py first
ask `require_packages`: run without the venv, they name the command that installs it."""
from __future__ import annotations

import ast
import importlib.util
import sys
from typing import Any

from lra.errors import UserError, fail

PREFIX = "--config."
EXAMPLE = "--config.num_train_steps=100"
# The README's set-up command (tests/test_run_guards.py keeps the two the same).
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . -c constraints.txt"
# What the commands import first; lra itself reads from a checkout without being installed.
PACKAGES = ("jax", "flax", "optax", "absl", "ml_collections")


def require_packages() -> None:
  """Exits with one line naming the install command where this Python lacks the packages
  (run outside the venv: `import jax` would fail with a ModuleNotFoundError's traceback)."""
  missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
  if missing:
    fail(f"{', '.join(missing)} not installed for {sys.executable}: activate the venv "
         f"(. .venv/bin/activate) or set it up: {INSTALL}")


def literal(text: str) -> Any:
  """A value: the Python literal it spells (True, 12, 0.5, "x", None), else the text."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def spelled(scope: str | None, key: str, value: str) -> str:
  """An override as the command line writes it."""
  return f"{PREFIX}{key}{'@' + scope if scope else ''}={value}"


def _item(body: str, value: str | None, scoped: bool) -> tuple[str | None, str, str]:
  """'KEY[@SCOPE]=VALUE' (or 'KEY[@SCOPE]' and the next argument) -> (scope, key, value)."""
  left, sep, text = body.partition("=") if value is None else (body, "=", value)
  key, at, scope = left.partition("@")
  parts = key.split(".")
  if not sep or not all(p.strip() and p.strip().isidentifier() for p in parts) or (
      at and not (scoped and scope.strip())):
    form = f"{PREFIX}KEY=VALUE" + (f" or {PREFIX}KEY@TASK_OR_MODEL=VALUE" if scoped else "")
    raise UserError(f"{PREFIX}{body} is not {form}, KEY the config's path (e.g. {EXAMPLE})")
  return (scope.strip() or None), key.strip(), text.strip()


def take_overrides(argv: list[str], *, scoped: bool = False, set_root: str = ""
                   ) -> tuple[list[str], list[tuple[str | None, str, str]]]:
  """Takes `--config.KEY=VALUE` (or `--config.KEY VALUE`) out of a command line, before
  argparse reads the rest; where `scoped`, also `--config.KEY@SCOPE=VALUE`. The old `--set
  ITEM` (ITEM's key relative to config.`set_root`; `SCOPE:KEY=VALUE` where scoped) is taken as
  well, with one deprecation line each. Returns (the rest, [(scope or None, key, value)])."""
  rest, found = [], []
  i = 0
  while i < len(argv):
    arg = argv[i]
    if arg.startswith(PREFIX):
      body = arg[len(PREFIX):]
      separate = "=" not in body and i + 1 < len(argv) and not argv[i + 1].startswith("--")
      found.append(_item(body, argv[i + 1] if separate else None, scoped))
      i += 2 if separate else 1
      continue
    if arg == "--set" or arg.startswith("--set="):
      old = arg[len("--set="):] if arg != "--set" else (argv[i + 1] if i + 1 < len(argv) else "")
      i += 1 if arg != "--set" else 2
      scope, colon, body = old.rpartition(":") if scoped and ":" in old.partition("=")[0] \
          else ("", "", old)
      key, sep, value = body.partition("=")
      item = _item(f"{set_root}{key.strip()}{'@' + scope if colon else ''}{sep}{value}", None,
                   scoped)
      print(f"warning: --set {old} is the old spelling; write {spelled(*item)}", file=sys.stderr)
      found.append(item)
      continue
    rest.append(arg)
    i += 1
  agree(found)
  return rest, found


def agree(items: list[tuple[str | None, str, str]], where: str = "") -> None:
  """Refuses one key given two values that differ (as `literal` reads them) among `items`;
  the same value twice is taken. `where`: the run they reach, for the message (else one scope:
  items of different scopes are then not compared)."""
  seen: dict[tuple, tuple[str | None, str, str]] = {}
  for item in items:
    scope, key, value = item
    first = seen.setdefault((None if where else scope, key), item)
    if literal(first[2]) != literal(value):
      fix = (f"give each run one value ({PREFIX}KEY@TASK=VALUE or {PREFIX}KEY@MODEL=VALUE "
             f"for the runs of one task or model)" if where else "give it once")
      raise UserError(f"{where + ': ' if where else ''}{spelled(*first)} and "
                      f"{spelled(*item)} disagree: {fix}")


def set_value(config, key: str, value: str) -> None:
  """Sets config KEY (dotted) to the command line's VALUE as train.py's parser does
  (ml_collections'): read as the field's type, a str field keeping the text; a value the field
  cannot take is a UserError."""
  from absl import flags
  from ml_collections.config_flags import config_path
  parsers = {bool: flags.BooleanParser(), int: flags.IntegerParser(),
             float: flags.FloatParser(), str: flags.ArgumentParser()}
  kind = config_path.get_type(key, config)
  try:
    parsed = parsers[kind].parse(value) if kind in parsers else literal(
        value.capitalize() if value in ("true", "false") else value)
    config_path.set_value(key, config, parsed)
  except (TypeError, ValueError) as e:  # ml_collections keeps each field's type
    raise UserError(f"{spelled(None, key, value)}: {e}") from None


def as_dict(items: list[tuple[str | None, str, str]]) -> dict[str, Any]:
  """[(None, 'model.reversible', 'True')] -> {'model.reversible': True}: values as `literal`
  reads them."""
  return {key: literal(value) for _, key, value in items}
