"""What every task config shares: trainer settings, model defaults and the arg parser."""
from __future__ import annotations

import ml_collections

from lra import config_sources as sources
from lra import rules
from lra.configs import table
from lra.errors import UserError
from lra.training import options
from lra.models import registry, settings

OPTIONS = ("cpu", "paper")


def parse_arg(arg: str | None, default_model: str = "transformer") -> tuple[str, set[str]]:
  """'MODEL[,cpu][,paper]' -> (model name, options).

  cpu:   shrink the data, model and run so it finishes in minutes on a laptop CPU.
  paper: the paper's appendix hyperparameters instead of the original repository's base ones.
  """
  parts = [p.strip() for p in (arg or default_model).split(",") if p.strip()]
  model, options = parts[0], set(parts[1:])
  unknown = options - set(OPTIONS)
  if unknown:
    raise UserError(f"unknown config option(s) {sorted(unknown)} in {arg!r}; "
                     f"the arg is MODEL[,cpu][,paper]")
  return model, options


class MixerSettings(ml_collections.ConfigDict):
  """config.model.attention: the mixer's own settings. Asking for one the mixer does not take
  (a --config.model.attention.NAME=... override asks first) raises the registry's one-line
  error listing the settings it takes, where the mistake is met."""

  def __init__(self, initial=None, mixer: str | None = None, **kwargs):
    super().__init__(initial, **kwargs)
    object.__setattr__(self, "_mixer", mixer)  # not a field (copies made by ml_collections: None)

  def __getattr__(self, key: str):
    mixer = self.__dict__.get("_mixer")
    if mixer and not key.startswith("_") and key not in self:
      registry.check_settings(mixer, [key])
    return super().__getattr__(key)


def base_config(model: str) -> ml_collections.ConfigDict:
  """Every shared field; values that cannot be right are refused before a run loads data
  (the trainer's allowed ranges are in lra/training/options.py)."""
  c = ml_collections.ConfigDict()
  c.task = ""                    # task name (lra.data.tasks)
  options.fill(c, ["seed"])      # the seed first: lra/training/options.py
  c.data = ml_collections.ConfigDict()  # task-specific, filled by the task config
  # (a relative data.data_dir is a folder of the data home, lra/data/home.py: $LRA_DATA_DIR,
  # else the checkout's root, else ~/lra_data; the data commands print the folder they write)

  c.model = ml_collections.ConfigDict()
  c.model.name = model           # the token mixer (models.registry), e.g. "transformer"
  # The mixer's own settings, passed straight to it; starts from its defaults (below), so
  # every one of them can be overridden (--config.model.attention.NAME=...) and no other key
  # exists.
  c.model.attention = MixerSettings(mixer=model)
  # The encoder's settings, each documented once with its default and check in
  # models/settings.py (EncoderConfig). The sizes (num_layers, emb_dim, qkv_dim, mlp_dim,
  # num_heads) come per task from configs/table.py.
  c.model.update(settings.encoder_defaults())

  # The trainer's settings after the model's, in their declared order (defaults, value rules
  # and what each is for: lra/training/options.py TrainerConfig).
  options.fill(c, [name for name in rules.declared(options.TrainerConfig) if name != "seed"])
  sources.note(c, sources.BASE)
  c.model.attention.update(registry.default_settings(model))
  if not registry.takes_attention_dropout(model):  # no attention weights (ATTENTION_DROPOUT)
    c.model.attention_dropout_rate = 0.0
  sources.note(c, sources.MIXER)
  return c


def shrink(c: ml_collections.ConfigDict, *, steps: int, batch: int,
           shares: dict[str, int] | None = None) -> None:
  """The CPU switch's trainer part (the small model is in configs/table.py): a short run with
  frequent evaluation, each step-counting setting its share of the run
  (options.SHORT_RUN_SHARES; `shares` changes some of them)."""
  c.num_train_steps, c.batch_size, c.eval_batch_size = steps, batch, batch
  for key, share in {**options.SHORT_RUN_SHARES, **(shares or {})}.items():
    c[key] = max(steps // share, 1)


def finish(c: ml_collections.ConfigDict, options: set[str]) -> ml_collections.ConfigDict:
  """The per-task, per-model settings of configs/table.py (called last by the task configs)."""
  return table.apply(c, options)
