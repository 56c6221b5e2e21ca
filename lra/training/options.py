"""The trainer's settings, each declared once in TrainerConfig as every setting is
(`lra.rules.setting`, the encoder's and the mixers' way): default, value rule, what each is
for, whether it may change when a run is resumed, whether the comparison with the paper
ignores it, and the setting without which it does nothing (`only_with`).

configs/base.py fills its trainer section from these fields (`fill`), lra/training/
config_checks.py checks the rules (and warns of a setting given where it does nothing),
lra/training/workdir.py asks `may_change_on_resume`, and lra/reporting/comparable.py reads
IGNORED_BY_COMPARISON; each reads them through `lra.rules.declared(TrainerConfig)`. Adding a
trainer setting is one field here (and its test).
Plain Python, no JAX: configs/base.py imports this module while a config loads.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from lra import rules as s
from lra.rules import declared, setting

SCHEDULES = ("rsqrt", "cosine", "constant", "linear")  # lra.training.optim builds each one
OBJECTIVES = ("classify", "denoise")  # lra.training.steps and lra.training.pretrain
WRITERS = ("jsonl", "tensorboard", "wandb")  # lra.training.writers runs each
# The settings that count steps, and the share of a short run each gets: num_train_steps // N
# (configs/base.py shrink, the CPU presets; config_checks' short-run warning suggests it).
SHORT_RUN_SHARES = {"warmup_steps": 10, "eval_every": 4, "checkpoint_every": 4, "log_every": 20}


def _cache_dir() -> str:
  return os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "lra", "jax_cache")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """The trainer's settings (the top level of a config), in the order configs/base.py lays
  them out. Observing settings may change on a resume (and are recorded); the comparison
  ignores seeds (another draw of the same setup) and the cadence of logs, evaluations and
  saves."""
  seed: int = setting(0, None, "parameters, dropout and data order all follow from it",
                      ignored=True)
  # Self-pretraining (Amos et al. 2024): a denoise run learns to restore masked input tokens
  # of the train split (no labels); a later run starts from its encoder with init_from.
  # The comparison with the paper ignores these three: no accuracy table lists a denoise
  # run (nor so its mask rate), and one initialised from a denoise run has a row of its own
  # (SPT) beside Amos et al.'s figures; where it came from is in its results.json.
  objective: str = setting("classify", s.Choice(OBJECTIVES), '"classify" (the task\'s labels) '
                           'or "denoise" (pretraining: predict masked tokens of the train '
                           'inputs)', ignored=True)
  mask_rate: float = setting(0.15, s.Float(0.0, 1.0, open="low high"), "denoise: the fraction "
                             "of real tokens replaced by the mask token (per task: "
                             "configs/table.py)", ignored=True,
                             only_with=("objective", "denoise"))
  init_from: str = setting("", None, "WORKDIR of another run whose encoder starts this one "
                           "(head and optimiser fresh; a resume keeps its own); \"\" = random",
                           ignored=True)
  batch_size: int = setting(32, s.Int(1), "global batch, split over all devices and hosts")
  # One update from the mean gradient of K micro-batches of batch_size / K, one after
  # another: the activation memory of the smaller batch (the same result within float
  # rounding; BatchNorm normalises each micro-batch by its own statistics).
  grad_accum_steps: int = setting(1, s.Int(1), "micro-batches per train step (K); batch_size "
                                  "must be a multiple of K x devices", ignored=True)
  eval_batch_size: int = setting(32, s.Int(1), "global batch for validation and test",
                                 ignored=True)
  # A short CPU run would spend most of its time evaluating (the `,cpu` presets set it). The
  # comparison reads its effect from the counts results.json records (test_count, its
  # "evaluation"), not from the setting: a cap above the split's size changes nothing. Not
  # on a resume: the best checkpoint is chosen by comparing validations on the same examples.
  eval_max_examples: int = setting(0, s.Int(0), "validation and test each read a fixed random "
                                   "sample of this many examples (lra.training.evaluation, "
                                   "the same for every run); 0 = every example, as the paper",
                                   ignored=True)
  num_train_steps: int = setting(5000, s.Int(1), "training steps (a resume may add more)",
                                 resume=True, fixed_under=("cosine", "linear"))
  # A limit that ended the run shows as `stopped_early` in results.json.
  max_train_time_s: float = setting(0.0, s.Float(0.0), "training seconds (over resumes), then "
                                    "end as at the last step; 0 = no limit", resume=True,
                                    ignored=True)
  schedule: str = setting("rsqrt", s.Choice(SCHEDULES), '"rsqrt" (warmup then 1/sqrt(t)), '
                          '"cosine", "constant" or "linear" (warmup then linear decay to 0)')
  learning_rate: float = setting(0.05, s.Float(0.0, open="low"), "peak factor of the schedule")
  ssm_learning_rate: float = setting(0.0, s.Float(0.0), "peak for the parameters of "
                                     "ssm_params and ssm_decay_params (a state-space mixer's "
                                     "step size, A, B); 0 = the same as learning_rate")
  # The parameter groups (lra.training.optim): parameters by their leaf name (a model's
  # names: e.g. "B", "log_dt", "bias"); every parameter in none of the three trains at
  # learning_rate with weight decay. The published SSM configs set them per task, as their
  # authors' scripts do (configs/published/).
  ssm_params: str = setting("", None, 'comma list of parameter names trained at '
                            'ssm_learning_rate without weight decay; "" = the mixer\'s '
                            'OPTIMIZER_GROUP, "none" = no parameter')
  ssm_decay_params: str = setting("", None, "comma list of parameter names trained at "
                                  "ssm_learning_rate with weight decay (S5's Path-X B)")
  no_decay_params: str = setting("", None, "comma list of parameter names trained at "
                                 "learning_rate without weight decay (S4's dt)")
  warmup_steps: int = setting(1000, s.Int(0), "linear warmup steps of the schedule")
  weight_decay: float = setting(0.1, s.Float(0.0), "AdamW decoupled weight decay")
  adam_b1: float = setting(0.9, s.Float(0.0, 1.0, open="high"), "AdamW's first-moment decay")
  adam_b2: float = setting(0.98, s.Float(0.0, 1.0, open="high"), "AdamW's second-moment decay")
  adam_eps: float = setting(1e-9, s.Float(0.0, open="low"), "AdamW's epsilon")
  grad_clip_norm: float = setting(0.0, s.Float(0.0), "global-norm clipping; 0 = off")
  log_every: int = setting(100, s.Int(1), "train metrics to metrics.jsonl / TensorBoard",
                           resume=True, ignored=True)
  eval_every: int = setting(500, s.Int(1), "validation (and a checkpoint) every this many "
                            "steps", resume=True, ignored=True)
  checkpoint_every: int = setting(500, s.Int(1), "checkpoint for resuming", resume=True,
                                  ignored=True)
  # At least one resumable checkpoint: Orbax's 0 would keep none, and -1 is its error.
  keep_checkpoints: int = setting(2, s.Int(1), "resumable checkpoints kept (plus the best "
                                  "one)", resume=True, ignored=True)
  progress: bool = setting(True, None, "progress bar with steps/s and ETA (only when stderr is "
                           "a terminal; a log file gets one line per log_every instead)",
                           resume=True, ignored=True)
  log_all_processes: bool = setting(False, None, "multi-host: every process prints its log "
                                    "lines, not only 0", resume=True, ignored=True)
  # Its default a function: the folder follows $XDG_CACHE_HOME when a config loads.
  compilation_cache_dir: str = setting(
      _cache_dir, None, "JAX's persistent compilation cache, so a resumed or repeated run "
      "skips most compiling; shared by all runs of this user (\"\" = off)", resume=True,
      ignored=True)
  # Its form is checked by lra.training.profiling.profile_range.
  profile_steps: str = setting("", None, '"START,STOP": a jax.profiler trace of the STOP-START '
                               'train steps after step START (e.g. "10,15": steps 11 to 15 of '
                               'the log) into WORKDIR/tensorboard/plugins/profile, for '
                               'TensorBoard\'s profile tab (XProf) or Perfetto; "" = off',
                               resume=True, ignored=True)
  # Checked by lra.training.writers.check (the names, and that wandb is installed).
  writers: str = setting("jsonl,tensorboard", None, 'metric writers, a comma list of "jsonl", '
                         '"tensorboard", "wandb" (W&B: pip install -e ".[wandb]"); '
                         'metrics.jsonl is always written', resume=True, ignored=True)


IGNORED_BY_COMPARISON = frozenset(name for name, o in declared(TrainerConfig).items()
                                  if o.ignored)


def default(name: str) -> Any:
  """The default of trainer setting `name` (a function's value where it is one)."""
  value = declared(TrainerConfig)[name].default
  return value() if callable(value) else value


def fill(config, names) -> None:
  """Sets the trainer settings `names` of `config` to their defaults, in their declared
  order."""
  for name in declared(TrainerConfig):
    if name in names:
      config[name] = default(name)


def may_change_on_resume(name: str, schedule: str) -> bool:
  """Whether trainer setting `name` may change on a resume under `schedule` (False for a name
  that is not a trainer setting)."""
  option = declared(TrainerConfig).get(name)
  return option is not None and option.resume and schedule not in option.fixed_under
