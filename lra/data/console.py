"""What data generation and preparation show while they work.

A progress bar redraws itself with `\\r`: it is drawn only when stderr is a terminal, so a
command whose output goes to a file (nohup, SLURM, `2> log`) writes no bars into its log; the
commands' own lines (what they are about to write, then what they wrote) say the rest.
"""
from __future__ import annotations

import sys

import tqdm


def bar(iterable=None, *, progress: bool = True, **kwargs) -> tqdm.tqdm:
  """tqdm's bar, shown when `progress` is asked for and stderr is a terminal."""
  return tqdm.tqdm(iterable, disable=not (progress and sys.stderr.isatty()), **kwargs)
