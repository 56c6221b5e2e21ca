"""ml_collections configs: one file per task (named as in lra.data.tasks.NAMES), each with
`get_config(arg)`, the model named by arg."""
import importlib
from types import ModuleType


def task_config(task: str) -> ModuleType:
  """The config module of `task` (configs/<task>.py)."""
  return importlib.import_module(f"{__name__}.{task}")
