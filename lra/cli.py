"""The one way every command takes a value: `--config.KEY=VALUE` (or `--config.KEY VALUE`), KEY
the config's path from its root. train.py, the grid (python -m lra.commands.leaderboard),
eval.py speed (and its measuring child) and scripts/program_cost.py take the items out of
their command lines with `take_overrides`; the grid also `--config.KEY@SCOPE=VALUE` for the
runs of one task or model. `set_value`, which all of them use, sets one on a config, read as
the field's type (a key the config lacks, with the nearest one, or a value the field cannot
take: one line), and
`load_config` makes train.py's config: `--config=FILE:ARG`'s get_config(ARG), then the
items, each value's source noted (lra.config_sources). `--set KEY=VALUE`, the old spelling of
the other commands, still works there and says how to write it. One key given two values in
one scope is refused (`agree`). The root train.py and eval.py first ask `require_packages`:
run without the venv, they name the command that installs it."""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from typing import Any

from lra import config_sources
from lra.errors import UserError, fail
from lra.rules import did_you_mean, is_int, is_real

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


def take_overrides(argv: list[str], *, scoped: bool = False, set_root: str = "",
                   old_spelling: bool = True, last_wins: bool = False
                   ) -> tuple[list[str], list[tuple[str | None, str, str]]]:
  """Takes `--config.KEY=VALUE` (or `--config.KEY VALUE`) out of a command line, before
  argparse reads the rest; where `scoped`, also `--config.KEY@SCOPE=VALUE`. The old `--set
  ITEM` (ITEM's key relative to config.`set_root`; `SCOPE:KEY=VALUE` where scoped) is taken as
  well (unless not `old_spelling`), with one deprecation line each. One key given two values
  is refused (`agree`), unless `last_wins` (train.py: the later value replaces the earlier, as
  absl's flags do, so a command line can be extended). Returns (the rest,
  [(scope or None, key, value)])."""
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
    if old_spelling and (arg == "--set" or arg.startswith("--set=")):
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
  if not last_wins:
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
  """Sets config KEY (dotted) to the command line's VALUE, read as the type the field has (a
  str field keeps the text; a field that is None takes any Python literal). A key the config
  lacks (with the nearest one) or a value the field cannot take is a UserError."""
  *parents, last = key.split(".")
  node, path = config, "config"
  for name in [*parents, last]:
    if not hasattr(node, "keys"):
      raise UserError(f"bad --config override {spelled(None, key, value)}: {path} is a value, "
                      f"not a section with keys")
    if name not in node:
      getattr(node, name, None)  # config.model.attention raises its mixer's own error here
      raise UserError(f"bad --config override {spelled(None, key, value)}: {path} has no key "
                      f"{name!r}{did_you_mean(name, list(node.keys()))}; a key must already "
                      f"exist in the config (see the config file for the valid keys)")
    if name != last:
      node, path = node[name], f"{path}.{name}"
  node[last] = _typed(node[last], value, spelled(None, key, value), f"{path}.{last}")


_TRUE, _FALSE = ("true", "t", "1"), ("false", "f", "0")


def _typed(current: Any, text: str, given: str, path: str) -> Any:
  """`text` read as the type of the field's `current` value; a UserError if it is not one."""
  if hasattr(current, "keys"):
    raise UserError(f"{given}: {path} is a section; set its keys ({PREFIX}"
                    f"{path.removeprefix('config.')}.NAME=VALUE)")
  value = literal(text)
  if isinstance(current, bool):
    ok, value = text.lower() in _TRUE + _FALSE, text.lower() in _TRUE
  elif is_int(current):
    ok = is_int(value)
  elif isinstance(current, float):
    ok = is_real(value) or text.strip().lower() in ("inf", "-inf", "nan")
    value = float(text) if ok else value
  elif isinstance(current, str):
    ok, value = True, text
  elif isinstance(current, (tuple, list)):  # one value alone is a tuple of one
    ok, value = True, tuple(value) if isinstance(value, (tuple, list)) else (value,)
  else:  # None (any value), or a type no config of the project has
    ok = current is None or isinstance(value, type(current))
  if not ok:
    raise UserError(f"{given}: {path} takes {_kind(current)} (it is {current!r}), not "
                    f"{text!r}")
  return value


def _kind(current: Any) -> str:
  if isinstance(current, bool):
    return "True or False"
  if is_int(current):
    return "an integer"
  if isinstance(current, float):
    return "a number"
  return f"a {type(current).__name__}"


def as_dict(items: list[tuple[str | None, str, str]]) -> dict[str, Any]:
  """[(None, 'model.reversible', 'True')] -> {'model.reversible': True}: values as `literal`
  reads them."""
  return {key: literal(value) for _, key, value in items}


def load_config(spec: str, items: list[tuple[str | None, str, str]]):
  """train.py's config: `spec` is FILE[:ARG], FILE a config file whose get_config(ARG) (or
  get_config() without ARG) makes it; then the command line's `items` (take_overrides), each
  value's source noted (lra.config_sources, for --explain_config). A missing file or one
  without get_config is a UserError; a config's own UserError passes as it is."""
  file, _, arg = spec.partition(":")
  if not os.path.isfile(file):
    raise UserError(f"cannot load --config: no config file {file!r} (give --config="
                    f"configs/TASK.py:MODEL, e.g. --config=configs/listops.py:transformer)")
  name = "lra_config_" + os.path.splitext(os.path.basename(file))[0]
  module_spec = importlib.util.spec_from_file_location(name, file)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not callable(getattr(module, "get_config", None)):
    raise UserError(f"cannot load --config: {file} defines no get_config(arg)")
  config = module.get_config(arg) if arg else module.get_config()
  config_sources.note(config, config_sources.UNNOTED)  # a file of its own may note nothing
  config_sources.credit_argument(config, arg)
  for _, key, value in items:
    set_value(config, key, value)
  config_sources.note(config, config_sources.COMMAND_LINE)
  return config
