"""AdamW with the LRA learning-rate schedules, and the parameter groups of the state-space
models' recipes."""
from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import optax

from lra.errors import UserError
from lra.training.options import SCHEDULES  # declared without JAX, for configs
from lra.models import registry

# Parameter groups (FROZEN: not trained): see `optimizer`.
SSM, SSM_DECAY, NO_DECAY, OTHER, FROZEN = "ssm", "ssm_decay", "no_decay", "other", "frozen"


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
      # max(warmup, 1): warmup_steps 0 would give 0 / 0 at step 0 (a NaN first update).
      return lr * jnp.minimum(1.0, t / max(warmup, 1)) / jnp.sqrt(jnp.maximum(t, max(warmup, 1)))
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
  return tuple(registry.get(config.model.name).OPTIMIZER_GROUP)


def _names(config, key: str) -> tuple[str, ...]:
  value = str(config.get(key, "") or "")
  return tuple(n.strip() for n in value.split(",") if n.strip())


def groups(config) -> dict[str, str]:
  """{leaf parameter name: group} of the named parameters (config.ssm_params,
  ssm_decay_params, no_decay_params; ssm_params "" = the mixer's OPTIMIZER_GROUP less the
  names the other two take). A name in two lists is a UserError."""
  explicit = {key: _names(config, key) for key in ("ssm_params", "ssm_decay_params",
                                                  "no_decay_params")}
  if explicit["ssm_params"] == ("none",):
    explicit["ssm_params"] = ()
  elif not explicit["ssm_params"]:
    taken = set(explicit["ssm_decay_params"]) | set(explicit["no_decay_params"])
    explicit["ssm_params"] = tuple(n for n in ssm_group(config) if n not in taken)
  found: dict[str, str] = {}
  for key, label in (("ssm_params", SSM), ("ssm_decay_params", SSM_DECAY),
                     ("no_decay_params", NO_DECAY)):
    for name in explicit[key]:
      if name in found and found[name] != label:
        raise UserError(f"config.{key} names {name!r}, which another parameter group "
                        f"({found[name]}) has already: name each parameter once")
      found[name] = label
  return found


def _leaf_name(path) -> str:
  last = path[-1]
  for attr in ("key", "name", "idx"):
    if hasattr(last, attr):
      return str(getattr(last, attr))
  return str(last)


def explicit_names(config) -> set[str]:
  """The parameter names the config's group settings give by hand (not the mixer's default)."""
  return {name for key in ("ssm_params", "ssm_decay_params", "no_decay_params")
          for name in _names(config, key) if name != "none"}


def param_labels(params, named: Mapping[str, str] | tuple[str, ...], required=()):
  """The tree of params with each leaf labelled by its name's group in `named` (a tuple:
  those names are all SSM), else OTHER. A `required` name that no parameter has is a
  UserError (a mistyped config.ssm_params would otherwise do nothing).

  Given the whole variables dict ({"params": ..., "batch_stats": ...}), leaves of the
  collections other than "params" (running averages, not trained) are labelled FROZEN.
  """
  named = dict.fromkeys(named, SSM) if isinstance(named, tuple) else dict(named)
  variables = isinstance(params, Mapping) and "params" in params
  trained = params["params"] if variables else params
  leaves = {_leaf_name(path) for path, _ in jax.tree_util.tree_flatten_with_path(trained)[0]}
  missing = sorted(set(required) - leaves)
  if missing:
    raise UserError(f"parameter group name(s) {', '.join(missing)} (config.ssm_params, "
                    f"ssm_decay_params or no_decay_params) match no parameter of this model; "
                    f"its parameter names are: {', '.join(sorted(leaves))}")

  def label(path, _):
    if variables and _leaf_name(path[:1]) != "params":
      return FROZEN
    return named.get(_leaf_name(path), OTHER)

  return jax.tree_util.tree_map_with_path(label, params)


def optimizer(config) -> optax.GradientTransformation:
  """AdamW (decoupled weight decay, scaled by the learning rate) with optional clipping.

  Parameter groups (`groups`): SSM trains with the schedule's shape at peak
  config.ssm_learning_rate (0 = config.learning_rate) without weight decay, as S4 and S5
  train the step size, A and B; SSM_DECAY at that rate with weight decay; NO_DECAY at
  learning_rate without it; every other parameter with AdamW at learning_rate.
  Collections other than "params" get no update. Clipping is by the global norm of all
  gradients together.
  """
  adamw = lambda lr, weight_decay: optax.adamw(lr, b1=config.adam_b1, b2=config.adam_b2,
                                               eps=config.adam_eps, weight_decay=weight_decay)
  steps = []
  if config.grad_clip_norm:
    steps.append(optax.clip_by_global_norm(config.grad_clip_norm))
  main = adamw(learning_rate_schedule(config), config.weight_decay)
  named = groups(config)
  if named:
    ssm_lr = learning_rate_schedule(
        config, peak=getattr(config, "ssm_learning_rate", 0.0) or config.learning_rate)
    transforms = {SSM: adamw(ssm_lr, 0.0), SSM_DECAY: adamw(ssm_lr, config.weight_decay),
                  NO_DECAY: adamw(learning_rate_schedule(config), 0.0)}
    # Only the groups in use, so that a run's optimizer state keeps its shape across versions.
    transforms = {label: transforms[label] for label in sorted(set(named.values()))}
    transforms.update({OTHER: main, FROZEN: optax.set_to_zero()})
    required = explicit_names(config)
    steps.append(optax.multi_transform(transforms,
                                       lambda params: param_labels(params, named, required)))
  else:
    steps.append(main)
  return optax.chain(*steps)
