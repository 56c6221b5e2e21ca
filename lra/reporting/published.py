"""Run records as results/ commits them: a run's results.json copied out of its workdir under
any name (`gla/learning_rate=0.001.json`, or `MODEL/results.json` as scripts/mixer_table.py
keeps it), holding no absolute path of the machine that made it.

`eval.py accuracy` and `eval.py recall` read a folder of such records as they read a folder of
runs (lra.reporting.results), so the committed tables and charts can be drawn again from what
is committed. Every path a record holds is relative (lra.paths.relative): the checkpoint tested
and the run it started from (init.workdir, config.init_from, an --import's file) to the run's
own folder, as the trainer records the first two; a data_dir to the data home, which is what a
relative data_dir means (lra.data.home). The trainer keeps config values as they were given
(a grid compares them to skip a finished run), so `portable` rewrites those on the way out.
"""
from __future__ import annotations

import os
from typing import Any

from lra import paths
from lra.data import home

# What a run's record holds and a table's or chart's JSON beside it (table.json,
# accuracy.json, recall.json) does not; a run's own config.json has no "config" inside.
RECORD_KEYS = ("task", "model", "config")


def is_record(obj: Any) -> bool:
  """Whether a JSON file's content is a run's record (a results.json's fields)."""
  return isinstance(obj, dict) and all(key in obj for key in RECORD_KEYS)


def place(result: dict) -> str:
  """Where a run read by lra.reporting.results lies on this machine, for messages: its folder,
  or a published record's file."""
  path = result["path"]
  return os.path.dirname(path) if os.path.basename(path) == "results.json" else path


def _absolute(value: Any) -> bool:
  return isinstance(value, str) and os.path.isabs(os.path.expanduser(value))


def _relative(holder: Any, key: str, base) -> Any:
  """`holder` with its absolute path at `key` made relative to `base` (the same object where
  there is none), the keys in their order."""
  if not isinstance(holder, dict) or not _absolute(holder.get(key)):
    return holder
  return {**holder, key: paths.relative(holder[key], base)}


def portable(record: dict, workdir) -> dict:
  """`record`, the results.json of the run in `workdir`, as results/ commits it: each absolute
  path it holds made relative (see the module's docstring); the rest as it was."""
  out = _relative(record, "tested_checkpoint", workdir)
  for key, inner in (("init", "workdir"), ("mixer_module", "file"), ("config", "init_from")):
    if key in out:
      out = {**out, key: _relative(out[key], inner, workdir)}
  config = out.get("config")
  if isinstance(config, dict) and "data" in config:
    data = _relative(config["data"], "data_dir", home.data_home())
    out = {**out, "config": {**config, "data": data}}
  return out
