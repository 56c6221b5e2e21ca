"""AdamW with the LRA learning-rate schedules."""
from __future__ import annotations

import jax.numpy as jnp
import optax

from lra.errors import UserError

SCHEDULES = ("rsqrt", "cosine", "constant")


def learning_rate_schedule(config) -> optax.Schedule:
  """rsqrt: lr * min(1, t/w) / sqrt(max(t, w)), as the original's
  constant * linear_warmup * rsqrt_decay; cosine: linear warmup then cosine decay to 0."""
  lr, warmup, total = config.learning_rate, config.warmup_steps, config.num_train_steps
  if config.schedule == "rsqrt":
    def rsqrt(step):
      t = jnp.asarray(step, jnp.float32)
      return lr * jnp.minimum(1.0, t / max(warmup, 1)) / jnp.sqrt(jnp.maximum(t, warmup))
    return rsqrt
  if config.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(0.0, lr, max(warmup, 1), max(total, warmup + 1))
  if config.schedule == "constant":
    return optax.constant_schedule(lr)
  raise UserError(f"config.schedule={config.schedule!r} is not one of {', '.join(SCHEDULES)}")


def optimizer(config) -> optax.GradientTransformation:
  """AdamW (decoupled weight decay, scaled by the learning rate) with optional clipping."""
  steps = []
  if config.grad_clip_norm:
    steps.append(optax.clip_by_global_norm(config.grad_clip_norm))
  steps.append(optax.adamw(learning_rate_schedule(config), b1=config.adam_b1,
                           b2=config.adam_b2, eps=config.adam_eps,
                           weight_decay=config.weight_decay))
  return optax.chain(*steps)
