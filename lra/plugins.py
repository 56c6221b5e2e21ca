"""Outside code: the modules a user names with `--import=MODULE` (repeatable) or in the
environment variable LRA_IMPORT (comma separated, for schedulers), imported before the registry
is asked, so that a mixer in the user's own package registers itself (`@register("name")`)
exactly as one of models/ does.

A MODULE is a dotted module name, found in the current folder or on sys.path (PYTHONPATH), or
the path of a .py file. One that cannot be found is a user error naming what was tried; an error
raised inside the module while it is imported (its own bug, or a package it lacks) keeps its
traceback. Plain Python: the commands call this before JAX is imported.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Iterable

from lra.errors import UserError

ENV = "LRA_IMPORT"
FLAG = "--import"


def _is_file(spec: str) -> bool:
  return spec.endswith(".py") or "/" in spec or os.sep in spec


def requested(flag_values: Iterable[str] = ()) -> list[tuple[str, str]]:
  """(source, module) of every module asked for: the --import values in order, then those of
  LRA_IMPORT; a module named twice (the same text, or the same file) counts once."""
  found, seen = [], set()
  env = [(ENV, m.strip()) for m in os.environ.get(ENV, "").split(",") if m.strip()]
  for source, spec in [(FLAG, s) for s in flag_values] + env:
    key = os.path.abspath(os.path.expanduser(spec)) if _is_file(spec) else spec
    if key not in seen:
      seen.add(key)
      found.append((source, spec))
  return found


def _import_file(source: str, spec: str) -> ModuleType:
  """Imports the .py file `spec` as a module named after it; its folder joins sys.path (so the
  file may import its neighbours)."""
  path = os.path.abspath(os.path.expanduser(spec))
  if not os.path.isfile(path):
    raise UserError(f"{source}={spec}: no such file ({path}); give the path of the .py file "
                    f"that registers the mixer, or a module name on sys.path")
  name = os.path.splitext(os.path.basename(path))[0]
  loaded = sys.modules.get(name)
  if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
    return loaded  # imported before (by name, or by the same path)
  if not name.isidentifier() or loaded is not None:
    raise UserError(f"{source}={spec}: cannot import {path} as module {name!r} "
                    + ("(another module of that name is imported); rename the file"
                       if loaded is not None else "(not a Python name); rename the file"))
  folder = os.path.dirname(path)
  if folder not in sys.path:
    sys.path.append(folder)
  module_spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(module_spec)
  sys.modules[name] = module
  done = False
  try:
    module_spec.loader.exec_module(module)  # its own error keeps its traceback
    done = True
  finally:
    if not done:  # no half-imported module stays behind
      sys.modules.pop(name, None)
  return module


def _import_name(source: str, spec: str) -> ModuleType:
  """Imports the dotted module `spec`, searching the current folder after sys.path."""
  if not all(part.isidentifier() for part in spec.split(".")):
    raise UserError(f"{source}={spec}: not a module name (e.g. my_package.my_attention) nor "
                    f"the path of a .py file")
  here = os.getcwd()
  if here not in sys.path and "" not in sys.path:
    sys.path.append(here)  # after everything else: never in front of the project's modules
  try:
    return importlib.import_module(spec)
  except ModuleNotFoundError as e:
    # Only the module asked for (or a package on its way) is the user's mistake; a module
    # that the user's code imports and lacks is that code's error: its traceback.
    if e.name is None or not (spec == e.name or spec.startswith(e.name + ".")):
      raise
    raise UserError(
        f"{source}={spec}: no module named {e.name!r} in the current folder ({here}) or on "
        f"sys.path; add the folder that holds it to PYTHONPATH, or give the file, e.g. "
        f"{FLAG}=path/to/{spec.split('.')[-1]}.py") from None


def import_modules(flag_values: Iterable[str] = ()) -> list[str]:
  """Imports every module of `requested(flag_values)` in order; returns their specs (as given)."""
  specs = []
  for source, spec in requested(flag_values):
    (_import_file if _is_file(spec) else _import_name)(source, spec)
    specs.append(spec)
  return specs


def portable(specs: Iterable[str]) -> list[str]:
  """The specs as a process started in another folder reads them: files as absolute paths."""
  return [os.path.abspath(os.path.expanduser(s)) if _is_file(s) else s for s in specs]


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
  """The environment of a child that gets the modules as --import flags (from `portable`): the
  current folder on its PYTHONPATH (where a module name was looked for), no LRA_IMPORT (its
  modules are among the flags)."""
  env = dict(os.environ if env is None else env)
  env.pop(ENV, None)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), os.getcwd()) if p)
  return env


def add_flag(parser, what: str = "") -> None:
  """--import=MODULE on an argparse command line (dest `imports`)."""
  parser.add_argument(FLAG, dest="imports", action="append", default=[], metavar="MODULE",
                      help="a module (dotted name, or a .py file) to import first: one that "
                           f"registers a mixer of your own{what} (repeatable; also the "
                           f"environment variable {ENV}, comma separated)")


def flag_values(argv: list[str]) -> list[str]:
  """The values of --import=MODULE / --import MODULE (or -import) in an absl command line, read
  before absl parses it (the config, parsed with the flags, asks the registry)."""
  values = []
  for i, arg in enumerate(argv):
    for prefix in ("--import", "-import"):
      if arg.startswith(prefix + "="):
        values.append(arg[len(prefix) + 1:])
      elif arg == prefix and i + 1 < len(argv):
        values.append(argv[i + 1])
  return values
