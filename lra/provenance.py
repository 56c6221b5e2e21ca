"""Which code made a result: the lra version, the git commit of the checkout it ran from, and
the versions of Python and of the libraries that decide the numbers. results.json (the trainer)
and speed.json (eval.py speed) record it, so a figure in a paper can name what produced it;
results.json also names the file (and its SHA-256) of a mixer of the user's own (--import).

Plain Python, no JAX (versions come from the installed packages' metadata), and never fatal:
what cannot be found is None.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import pathlib
import platform
import subprocess
import sys

from lra.locations import PACKAGE_ROOT

# The libraries whose versions change what a run computes or how fast.
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
# Recorded only where installed: the accelerator plugin (or libtpu) that ran the numbers.
PLUGINS = ("jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt",
           "libtpu")
GIT_TIMEOUT_S = 5.0  # a slow or hung git (a network filesystem) never holds up a run
# A checkout's root (setup.py, .git), or the installed package's folder (neither).
ROOT = pathlib.Path(PACKAGE_ROOT)


def installed_version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def lra_version(root: pathlib.Path = ROOT) -> str | None:
  """The version in the checkout's setup.py where the code runs from a checkout (the installed
  metadata may belong to another copy), else the installed package's."""
  setup = root / "setup.py"
  if (root / "lra").is_dir() and setup.is_file():
    try:
      tree = ast.parse(setup.read_text())
    except (OSError, SyntaxError, ValueError):
      tree = None
    for node in ast.walk(tree) if tree else ():
      if isinstance(node, ast.keyword) and node.arg == "version":
        try:
          return str(ast.literal_eval(node.value))
        except ValueError:
          break
  return installed_version("lra")


def _git(root: pathlib.Path, *args: str) -> str | None:
  """git's stdout, or None where git is missing, fails or takes longer than GIT_TIMEOUT_S."""
  try:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
  except (OSError, subprocess.SubprocessError):
    return None
  return proc.stdout if proc.returncode == 0 else None


def git_commit(root: pathlib.Path = ROOT) -> tuple[str | None, bool | None]:
  """(HEAD's commit, whether tracked files differ from it) of the checkout that `root` is the
  top of; (None, None) when it is not one (an installed wheel, even inside another repository),
  or git is missing or slow."""
  found = _git(root, "rev-parse", "--show-toplevel", "HEAD")
  lines = found.split() if found else []
  if len(lines) != 2 or pathlib.Path(lines[0]).resolve() != root.resolve():
    return None, None
  status = _git(root, "status", "--porcelain", "--untracked-files=no")
  return lines[1], None if status is None else bool(status.strip())


def software(root: pathlib.Path = ROOT) -> dict:
  """{"lra_version", "git_commit", "git_dirty", "python", "libraries": {name: version}}: the
  LIBRARIES always (None where missing), the PLUGINS where installed."""
  commit, dirty = git_commit(root)
  libraries = {name: installed_version(name) for name in LIBRARIES}
  libraries.update({name: v for name in PLUGINS if (v := installed_version(name))})
  return {"lra_version": lra_version(root), "git_commit": commit, "git_dirty": dirty,
          "python": platform.python_version(), "libraries": libraries}


def mixer_module(name: str) -> dict | None:
  """{"name", "file", "sha256"} of the module that registered mixer `name` at run time (outside
  code, which --import or LRA_IMPORT loads): its import name, the absolute path of its file and
  the SHA-256 of that file's bytes now, so that a figure can name the exact code (the git commit
  names only the repository's). "file" and "sha256" are None where the module has no file or
  it cannot be read. None for a mixer of models/ (the commit names it)."""
  from lra.models import registry  # plain Python, no JAX
  if registry.in_repository(name):
    return None
  module = registry.get(name).__module__
  file = getattr(sys.modules.get(module), "__file__", None)
  path = pathlib.Path(file).resolve() if file else None
  try:
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path else None
  except OSError:
    digest = None
  return {"name": module, "file": str(path) if path else None, "sha256": digest}
