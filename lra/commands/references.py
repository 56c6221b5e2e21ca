"""The paper-comparable configs of each task and model, made from configs/ for the reports:
the commands (eval.py accuracy, python -m lra.commands.leaderboard) give `paper_configs` to
lra.reporting (comparable.References), which never imports configs/."""
from __future__ import annotations

import functools
from typing import Any

from lra.configs import task_config
from lra import config_record
from lra.errors import UserError
from lra.models import registry


@functools.lru_cache(maxsize=None)
def paper_configs(task: str, model: str) -> tuple[tuple[str, dict[str, Any]], ...]:
  """(option, flat config) of the task config's base and `,paper` options for `model`; () for
  a model this repository has no config of: an unknown name, or a mixer outside models/ (one
  that --import registered: the configs make it a config, but nobody chose its settings to
  match the paper's setup, so none of its runs stands beside the paper's figures)."""
  if not registry.in_repository(model):
    return ()
  refs = []
  for option in ("base", "paper"):
    try:
      config = task_config(task).get_config(model if option == "base" else f"{model},paper")
    except UserError:  # a model this repository does not know (a SettingError)
      return ()
    # Through JSON, as results.json stores it (tuples become lists).
    refs.append((option, config_record.flat(config_record.as_json(config))))
  return tuple(refs)
