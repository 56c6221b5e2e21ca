"""AdamW with the LRA learning-rate schedules, and the state-space models' parameter group."""
from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import optax

from lra.errors import UserError
from lra.training.options import SCHEDULES  # declared without JAX, for configs
from lra.models import registry

SSM, OTHER, FROZEN = "ssm", "other", "frozen"  # parameter groups (FROZEN: not trained)


def learning_rate_schedule(config, peak: float | None = None) -> optax.Schedule:
  """rsqrt: lr * min(1, t/w) / sqrt(max(t, w)), as the original's
  constant * linear_warmup * rsqrt_decay; cosine: linear warmup then cosine decay to 0;
  linear: linear warmup then linear decay to 0 at the last step (Mega's runs).

  `peak` replaces config.learning_rate (the SSM group's schedule has the same shape).
  """
  lr = config.learning_rate if peak is None else peak
  warmup, total = config.warmup_steps, config.num_train_steps
  if config.schedule == "rsqrt":
    def rsqrt(step):
      t = jnp.asarray(step, jnp.float32)
      return lr * jnp.minimum(1.0, t / max(warmup, 1)) / jnp.sqrt(jnp.maximum(t, warmup))
    return rsqrt
  if config.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(0.0, lr, max(warmup, 1), max(total, warmup + 1))
  if config.schedule == "linear":
    warm = max(warmup, 1)
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warm), optax.linear_schedule(
        lr, 0.0, max(total - warm, 1))], [warm])
  if config.schedule == "constant":
    return optax.constant_schedule(lr)
  raise UserError(f"config.schedule={config.schedule!r} is not one of {', '.join(SCHEDULES)}")


def ssm_group(config) -> tuple[str, ...]:
  """The leaf parameter names the model's mixer trains apart (its OPTIMIZER_GROUP), or ()."""
  return tuple(getattr(registry.get(config.model.name), "OPTIMIZER_GROUP", ()))


def _leaf_name(path) -> str:
  last = path[-1]
  for attr in ("key", "name", "idx"):
    if hasattr(last, attr):
      return str(getattr(last, attr))
  return str(last)


def param_labels(params, group: tuple[str, ...]):
  """The tree of params with each leaf labelled SSM (its name is in `group`) or OTHER.

  Given the whole variables dict ({"params": ..., "batch_stats": ...}), leaves of the
  collections other than "params" (running averages, not trained) are labelled FROZEN.
  """
  names = set(group)
  variables = isinstance(params, Mapping) and "params" in params

  def label(path, _):
    if variables and _leaf_name(path[:1]) != "params":
      return FROZEN
    return SSM if _leaf_name(path) in names else OTHER

  return jax.tree_util.tree_map_with_path(label, params)


def optimizer(config) -> optax.GradientTransformation:
  """AdamW (decoupled weight decay, scaled by the learning rate) with optional clipping.

  For a mixer with an OPTIMIZER_GROUP (the state-space models), the leaves of that group
  (step size, A, B) use Adam with the schedule's shape at peak config.ssm_learning_rate
  (0 = config.learning_rate) and no weight decay, as S4 trains them; every other parameter
  keeps AdamW; collections other than "params" get no update. Clipping is by the global norm
  of all gradients together.
  """
  adamw = lambda lr, weight_decay: optax.adamw(lr, b1=config.adam_b1, b2=config.adam_b2,
                                               eps=config.adam_eps, weight_decay=weight_decay)
  steps = []
  if config.grad_clip_norm:
    steps.append(optax.clip_by_global_norm(config.grad_clip_norm))
  main = adamw(learning_rate_schedule(config), config.weight_decay)
  group = ssm_group(config)
  if group:
    ssm_lr = getattr(config, "ssm_learning_rate", 0.0) or config.learning_rate
    ssm = adamw(learning_rate_schedule(config, peak=ssm_lr), 0.0)
    steps.append(optax.multi_transform({SSM: ssm, OTHER: main, FROZEN: optax.set_to_zero()},
                                       lambda params: param_labels(params, group)))
  else:
    steps.append(main)
  return optax.chain(*steps)
