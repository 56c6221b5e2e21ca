"""What every task config shares: trainer settings, model defaults and the arg parser."""
from __future__ import annotations

import os

import ml_collections

from configs import table
from lra.errors import UserError
from models import registry, settings

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


def base_config(model: str) -> ml_collections.ConfigDict:
  """Every shared field; values that cannot be right are refused before a run loads data
  (lra/training/config_checks.py holds the allowed ranges)."""
  c = ml_collections.ConfigDict()
  c.task = ""                    # task name (lra.data.tasks)
  c.seed = 0                     # parameters, dropout and data order all follow from it
  c.data = ml_collections.ConfigDict()  # task-specific, filled by the task config

  c.model = ml_collections.ConfigDict()
  c.model.name = model           # the token mixer (models.registry), e.g. "transformer"
  # The mixer's own settings, passed straight to it; starts from its defaults, so every one of
  # them can be overridden (--config.model.attention.NAME=...) and no other key exists.
  c.model.attention = ml_collections.ConfigDict(registry.default_settings(model))
  # The encoder's settings, each documented once with its default and check in
  # models/settings.py (EncoderConfig). The sizes (num_layers, emb_dim, qkv_dim, mlp_dim,
  # num_heads) come per task from configs/table.py.
  c.model.update(settings.encoder_defaults())
  if not registry.takes_attention_dropout(model):  # no attention weights (ATTENTION_DROPOUT)
    c.model.attention_dropout_rate = 0.0

  c.batch_size = 32              # global batch, split over all devices and hosts
  c.eval_batch_size = 32         # global batch for validation and test
  c.num_train_steps = 5000
  c.max_train_time_s = 0.0       # training seconds (over resumes), then end as at the last step
  c.schedule = "rsqrt"           # "rsqrt" (warmup then 1/sqrt(t)), "cosine" or "constant"
  c.learning_rate = 0.05         # peak factor of the schedule (> 0)
  # Peak for a state-space mixer's OPTIMIZER_GROUP (its step size, A, B: no weight decay);
  # 0 = the same as learning_rate. Other models ignore it.
  c.ssm_learning_rate = 0.0
  c.warmup_steps = 1000
  c.weight_decay = 0.1           # AdamW decoupled weight decay (>= 0)
  c.adam_b1 = 0.9
  c.adam_b2 = 0.98
  c.adam_eps = 1e-9
  c.grad_clip_norm = 0.0         # global-norm clipping; 0 = off

  c.log_every = 100              # train metrics to metrics.jsonl / TensorBoard
  c.eval_every = 500             # validation (and a checkpoint) every this many steps
  c.checkpoint_every = 500       # checkpoint for resuming
  c.keep_checkpoints = 2         # resumable checkpoints kept (>= 1; plus the best one)
  c.progress = True              # progress bar with steps/s and ETA (only when stderr is a
                                 # terminal; a log file gets one line per log_every instead)
  c.log_all_processes = False    # multi-host: every process prints its log lines, not only 0
  # JAX's persistent compilation cache, so a resumed or repeated run skips most compiling;
  # shared by all runs of this user ("" = off).
  c.compilation_cache_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache",
                                         "lra", "jax_cache")
  # "START,STOP": a jax.profiler trace of the STOP-START train steps after step START (e.g.
  # "10,15": steps 11 to 15 of the log) into WORKDIR/profile, for XProf (TensorBoard's
  # profile plugin) or Perfetto; "" = off.
  c.profile_steps = ""
  return c


def shrink(c: ml_collections.ConfigDict, *, steps: int, batch: int) -> None:
  """The CPU switch's trainer part (the small model is in configs/table.py): a short run with
  frequent evaluation."""
  c.num_train_steps, c.batch_size, c.eval_batch_size = steps, batch, batch
  c.warmup_steps = max(steps // 10, 1)
  c.log_every = max(steps // 20, 1)
  c.eval_every = c.checkpoint_every = max(steps // 4, 1)


def finish(c: ml_collections.ConfigDict, options: set[str]) -> ml_collections.ConfigDict:
  """The per-task, per-model settings of configs/table.py (called last by the task configs)."""
  return table.apply(c, options)
