"""Published LRA hyperparameters of the state-space models, Mega and the recurrent family, one
file per model.

Each file, named for its model (a module here is a model's table unless BUILDERS names it),
cites its source in its docstring (mamba.py and the recurrent family's files built by
recurrent.py: our choice at parameter parity with S5, their authors published no LRA setup;
hgrn2.py: its authors' run script) and defines
    HYPERPARAMETERS = {task: dict(model=dict(num_layers=..., emb_dim=..., dropout_rate=...,
        norm=..., prenorm=..., feedforward=..., pooling=..., use_cls=...,
        attention=dict(<mixer settings>)), batch_size=..., epochs=..., learning_rate=...,
        ssm_learning_rate=..., weight_decay=..., schedule=..., warmup_steps=..., ...)}
for task in listops, text, retrieval, image, pathfinder, pathx. Every top-level key other than
`model` and `epochs` is a trainer setting of configs/base.py, set as it is.

configs/base.finish calls `apply` for these models, last, so that command-line overrides
still win. With the `cpu` option only the architectural choices are taken (ARCHITECTURE, the
parameter groups of RECIPE and the mixer settings that are not sizes); the task's small CPU
model and short run stay. Each file ends its docstring with the deviations: every place where
the config does not reproduce its authors' code, and why.
A mixer setting is a size if it is an integer (not a bool), unless the file names its sizes
in SIZE_SETTINGS.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from types import ModuleType

from lra.data.tasks import FACTS  # train_size: examples per epoch (after held-out validation)
from lra.errors import UserError
from lra.models import registry

# Modules here that build tables for others, not a model's table.
BUILDERS = ("recurrent",)
# The models that may have a table here: every other module of this folder.
MODELS = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in BUILDERS))
# A task beyond LRA that takes a table's entry of an LRA task. Path-256 takes Path-X's: no
# author of these tables published a Path-256 run, and the codes that train Path-256 train it
# as Path-X at resolution 256 (SPT's configs/experiment/lra/transformer-lra-pathx256.yaml: the
# pathx pipeline with dataset.resolution 256; S4's loader reads pathfinder256 when given
# dataset.resolution=256, with no Path-256 experiment of its own). Mega keeps Path-X's 16,384
# relative positions (longer distances share the last bias).
ENTRY_OF = {"path256": "pathx"}
# Encoder settings that are architectural choices (the authors' function around the layer),
# taken even with `cpu`.
ARCHITECTURE = ("norm", "prenorm", "feedforward", "pooling", "use_cls", "final_norm",
                "input_encoder", "input_mean", "input_std", "input_dropout", "head",
                "batch_norm_momentum", "embed_init")
# Trainer settings that are the authors' recipe whatever the size (which parameters decay and
# at which rate), taken even with `cpu`.
RECIPE = ("ssm_params", "ssm_decay_params", "no_decay_params")

# How the authors' pixel encoders normalise intensities 0..255, as (input_mean, input_std) of
# the "linear" input encoder: (pixel - mean) / std.
S5_PIXELS = {"image": (122.6, 61.0), "pathfinder": (127.5, 127.5), "pathx": (127.5, 127.5)}
S4_PIXELS = {"image": (122.6, 61.0), "pathfinder": (0.0, 255.0), "pathx": (0.0, 255.0)}
MEGA_PIXELS = {"image": (0.48 * 255, 0.24 * 255), "pathfinder": (127.5, 127.5),
               "pathx": (127.5, 127.5)}


def pixel_encoder(task: str, pixels: dict) -> dict:
  """The encoder settings of a linear pixel encoder on an image task ({} on a token task)."""
  if task not in pixels:
    return {}
  mean, std = pixels[task]
  return dict(input_encoder="linear", input_mean=mean, input_std=std)


def table(name: str) -> ModuleType | None:
  """configs/published/<name>.py, or None if the model has none (or it is not written yet)."""
  if name not in MODELS:
    return None
  module = f"{__name__}.{name}"
  try:
    return importlib.import_module(module)
  except ModuleNotFoundError as e:
    if e.name == module:
      return None
    raise


def has_table(name: str) -> bool:
  return table(name) is not None


def size_settings(module: ModuleType, mixer: dict) -> set[str]:
  if hasattr(module, "SIZE_SETTINGS"):
    return set(module.SIZE_SETTINGS)
  return {k for k, v in mixer.items() if isinstance(v, int) and not isinstance(v, bool)}


def apply(c, options: set[str]):
  """Sets config `c` (task c.task, model c.model.name) from the model's published table."""
  module = table(c.model.name)
  task = ENTRY_OF.get(c.task, c.task)  # the entry it takes
  if module is None or not FACTS[task].lra:  # the tables are LRA's; MQAR's config stands
    return c
  if task not in module.HYPERPARAMETERS:
    raise UserError(f"configs/published/{c.model.name}.py has no hyperparameters for task "
                    f"{task!r}; it has: {', '.join(module.HYPERPARAMETERS)}")
  entry = dict(module.HYPERPARAMETERS[task])
  model = dict(entry.pop("model"))
  mixer = dict(model.pop("attention", {}))
  sizes = size_settings(module, mixer)
  for key in ARCHITECTURE + ("pair_features",):  # the pair head's input is architecture too
    if key in model:
      c.model[key] = model[key]
  for key, value in mixer.items():
    if "cpu" not in options or key not in sizes:
      c.model.attention[key] = value
  for key in RECIPE:
    if key in entry:
      c[key] = entry.pop(key)
  if "cpu" in options:
    return c

  for key, value in model.items():  # sizes: num_layers, emb_dim, dropout_rate
    if key not in ARCHITECTURE + ("pair_features",):
      c.model[key] = value
  # The SSM papers' one dropout acts inside the SSM layer as well as on the residual branch
  # (a table that gives attention_dropout_rate, Mega's, keeps its own; a mixer without inner
  # dropout, ATTENTION_DROPOUT = False, keeps 0 and refuses more).
  if ("attention_dropout_rate" not in model
      and registry.takes_attention_dropout(c.model.name)):
    c.model.attention_dropout_rate = c.model.dropout_rate
  if "mlp_dim" not in model:  # without the MLP sub-block, mlp_dim is only our head's width:
    c.model.mlp_dim = c.model.emb_dim  # no bottleneck (the papers decode linearly)
  epochs = entry.pop("epochs")
  for key, value in entry.items():
    if key not in c:
      raise UserError(f"configs/published/{c.model.name}.py sets {key!r}, which is not a "
                      "trainer setting (lra/training/options.py); correct that file")
    c[key] = value
  c.eval_batch_size = c.batch_size
  c.num_train_steps = math.ceil(epochs * FACTS[c.task].train_size / c.batch_size)
  return c
