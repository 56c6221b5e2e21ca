"""Where data lives: one documented place, whatever folder a command runs in.

A relative data_dir (the configs' `data/listops`, `--data_dir=data/text`) is resolved against
the data home:

- `$LRA_DATA_DIR` if it is set;
- else, in a checkout, the checkout's root (lra.locations.PACKAGE_ROOT), so the README's `data/...`
  paths mean ROOT/data/... from any folder;
- else (an installed wheel, whose package folder is no place for data) `~/lra_data`.

An absolute data_dir is used as given; a URL (gs://...) is left for lra.data.tasks to refuse.
The data commands and the generation on first use print the resolved folder.
"""
from __future__ import annotations

import os

ENV = "LRA_DATA_DIR"
WHEEL_HOME = os.path.join("~", "lra_data")


def data_home() -> str:
  """The folder a relative data_dir is resolved against (absolute)."""
  from lra.locations import INSTALLED, PACKAGE_ROOT
  given = os.environ.get(ENV)
  if given:
    return os.path.abspath(os.path.expanduser(given))
  return os.path.expanduser(WHEEL_HOME) if INSTALLED else PACKAGE_ROOT


def resolve(data_dir) -> str:
  """data_dir as the folder it names: `~` expanded, a relative path under data_home()."""
  path = os.path.expanduser(os.fspath(data_dir))
  if "://" in path or os.path.isabs(path):
    return path
  return os.path.normpath(os.path.join(data_home(), path))
