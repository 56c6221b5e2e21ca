"""Settings that cannot be right, refused in one line before a run loads data or compiles
anything. The encoder's and the mixer's value rules run where the model is built
(models.build); here only the mixer's name and setting names, which need no data."""
from __future__ import annotations

import jax

from lra.errors import UserError
from lra.training import optim, profiling
from models import registry
from models import settings as s

# Trainer settings of configs/base.py -> the values that can be right.
RULES = {
    "batch_size": s.Int(1), "eval_batch_size": s.Int(1), "num_train_steps": s.Int(1),
    "max_train_time_s": s.Float(0.0),  # 0 = no limit
    "warmup_steps": s.Int(0), "schedule": s.Choice(optim.SCHEDULES),
    "learning_rate": s.Float(0.0, open="low"),
    "ssm_learning_rate": s.Float(0.0),  # 0 = the same as learning_rate
    "weight_decay": s.Float(0.0), "adam_b1": s.Float(0.0, 1.0, open="high"),
    "adam_b2": s.Float(0.0, 1.0, open="high"), "adam_eps": s.Float(0.0, open="low"),
    "grad_clip_norm": s.Float(0.0),  # 0 = off
    "log_every": s.Int(1), "eval_every": s.Int(1), "checkpoint_every": s.Int(1),
    # At least one resumable checkpoint: Orbax's 0 would keep none, and -1 is its error.
    "keep_checkpoints": s.Int(1),
}
DATA_RULES = {"max_len": s.Int(1), "size": s.Int(1)}  # tokens per example, image side


def _check(key: str, value, rule) -> None:
  if not rule.ok(value):
    raise UserError(f"{key}={value!r} is not valid: {rule.allowed()}")


def check_config(config, devices: int) -> None:
  """Refuses a config that cannot be right, naming the setting and the values allowed;
  `devices`: how many devices split each batch."""
  for key, rule in RULES.items():
    if key in config:
      _check(f"config.{key}", config[key], rule)
  for key, rule in DATA_RULES.items():
    if key in config.data:
      _check(f"config.data.{key}", config.data[key], rule)
  for key in ("batch_size", "eval_batch_size"):
    size = config[key]
    if size % devices or size % jax.process_count():
      raise UserError(f"config.{key}={size} must be a positive multiple of the device count "
                      f"({devices}) and of the process count ({jax.process_count()})")
  registry.check_settings(config.model.name, config.model.attention.keys())
  profiling.profile_range(config)  # "START,STOP" or ""


def check_train_split(config, train_examples: int) -> None:
  """The train split must fill one batch (known once the data is loaded)."""
  if train_examples < config.batch_size:
    raise UserError(f"the train split has {train_examples} examples, fewer than "
                    f"config.batch_size={config.batch_size}")
