"""Settings that cannot be right, refused in one line before a run loads data or compiles
anything. The encoder's and the mixer's value rules run where the model is built
(models.build); here only the mixer's name and setting names, which need no data."""
from __future__ import annotations

import jax

from lra.data import settings as data_settings
from lra.errors import UserError
from lra.training import options, profiling, writers
from lra.models import registry
from lra import rules as s


def check_config(config, devices: int) -> None:
  """Refuses a config that cannot be right, naming the setting and the values allowed;
  `devices`: how many devices split each batch."""
  check_settings(config)
  for key in ("batch_size", "eval_batch_size"):
    size = config[key]
    if size % devices or size % jax.process_count():
      raise UserError(f"config.{key}={size} must be a positive multiple of the device count "
                      f"({devices}) and of the process count ({jax.process_count()})")
  accum = config.grad_accum_steps
  if config.batch_size % (accum * devices):
    raise UserError(f"config.batch_size={config.batch_size} must be a multiple of "
                    f"config.grad_accum_steps={accum} x the device count ({devices}): every "
                    f"device takes an equal share of every micro-batch")


def check_settings(config) -> None:
  """check_config's rules that need no device (nor JAX's backend): every setting's own rule,
  (the trainer's, lra/training/options.py; the task's data settings, lra/data/settings.py),
  the mixer's setting names, the profile range, the writers. The grid checks every run's
  config with them before its first run starts (lra.commands.grid_plan.check_runs)."""
  for prefix, declared, values in _run_settings(config):
    for key, setting in declared.items():
      if setting.rule is not None and key in values:
        s.check(f"config.{prefix}{key}", values[key], setting.rule)
  registry.check_settings(config.model.name, config.model.attention.keys())
  profiling.profile_range(config)  # "START,STOP" or ""
  writers.check(config)  # known names; wandb installed where named


def check_train_split(config, train_examples: int) -> None:
  """The train split must fill one batch (known once the data is loaded)."""
  if train_examples < config.batch_size:
    raise UserError(f"the train split has {train_examples} examples, fewer than "
                    f"config.batch_size={config.batch_size}")



# Settings that count steps: what a run as short as (or shorter than) one of them misses (the
# value the warning suggests: the share options.SHORT_RUN_SHARES gives it).
_SHORT_RUN = {"warmup_steps": "the learning rate never reaches its peak",
              "eval_every": "validated only at the last step",
              "checkpoint_every": "no checkpoint to resume from before the end",
              "log_every": "one log line, at the end"}


def short_run_warning(config) -> str | None:
  """One line when config.num_train_steps is at or below a setting that counts steps (a run
  shortened with --config.num_train_steps=N, the others left at the config's values); None
  when none is. A warning, not an error: a smoke test may mean it."""
  steps = config.num_train_steps
  share = lambda key: max(steps // options.SHORT_RUN_SHARES[key], 1)
  # A cadence equal to the run's length is a choice (validated once, at the end); and a value
  # that is already what the warning would suggest is left alone.
  over = [key for key in _SHORT_RUN if key in config and share(key) < config[key]
          and (config[key] > steps or key == "warmup_steps" and config[key] == steps)]
  if not over:
    return None
  found = ", ".join(f"config.{k}={config[k]} ({_SHORT_RUN[k]})" for k in over)
  wanted = " ".join(f"--config.{k}={share(k)}" for k in over)
  return (f"config.num_train_steps={steps} is at or below {found}; for a run this short give "
          f"e.g. {wanted}")


def _run_settings(config):
  """(key prefix, {name: Setting}, the values) of the run's settings: the trainer's
  (lra/training/options.py) and the task's data settings (lra/data/settings.py)."""
  return [("", s.declared(options.TrainerConfig), config),
          ("data.", data_settings.of(config.task), config.data)]


def idle_overrides(config, overrides) -> list[str]:
  """One line for each trainer or data setting given on the command line (`overrides`: its
  dotted keys) that does nothing in this run (its declared only_with unmet: lra.rules.unmet),
  e.g. config.mask_rate in a classify run. Warnings, not errors (a model's settings are
  refused instead, models/settings.py): a task's table sets mask_rate for every run, and a
  grid passes one --config to all its stages."""
  lines = []
  for prefix, declared, values in _run_settings(config):
    for key, (other, wanted, why) in s.unmet(declared, values).items():
      if prefix + key in overrides:
        lines.append(f"config.{prefix}{key}={values[key]!r} does nothing here: only a run "
                     f"with config.{prefix}{other}={wanted!r}{why} uses it (this one has "
                     f"{values.get(other)!r})")
  return lines


def unruled_warning(config) -> str | None:
  """One line when the model's mixer declares settings with no rule (an outside mixer's):
  their values, e.g. a negative epsilon, train unchecked."""
  unruled = registry.unruled_settings(config.model.name)
  if not unruled:
    return None
  given = ", ".join(f"{k}={config.model.attention.get(k)!r}" for k in unruled)
  return (f"model {config.model.name!r} declares no rule for {given}: any value trains "
          f"unchecked (declare each with lra.rules.setting(default, rule, doc); "
          f"lra.testing.check_mixer asks for them)")
