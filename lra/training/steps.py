"""The jitted steps: the training loss, the train step (with gradient accumulation over
micro-batches) and the evaluation step, the batch sharded over the mesh's 'data' axis."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lra.training import per_length


def _logits(model, pair: bool, params, batch_stats, batch, **kwargs):
  variables = {**params, "batch_stats": batch_stats}
  if pair:
    return model.apply(variables, batch["inputs"], batch["inputs2"], batch.get("mask"),
                       batch.get("mask2"), **kwargs)
  return model.apply(variables, batch["inputs"], batch.get("mask"), **kwargs)


def sums(logits_BxC, labels_B, weights_B):
  """Sums, not means: they add up exactly over batches, micro-batches, devices and hosts."""
  loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BxC.astype(jnp.float32),
                                                           labels_B)
  correct_B = (jnp.argmax(logits_BxC, -1) == labels_B).astype(jnp.float32)
  return {"loss_sum": jnp.sum(loss_B * weights_B),
          "correct": jnp.sum(correct_B * weights_B),
          "count": jnp.sum(weights_B)}


def length_sums(correct_B, count_B, lengths_B, bins: int):
  """Per-length sums of a batch (the length-generalisation protocol, lra.training.per_length):
  for each task length in 0..bins-1 the sum of its examples' accuracies (an example's share of
  its scored positions right: `correct_B` of `count_B`) and how many were scored. An example
  with no scored position (a padded row: count 0) adds nothing. Sums add up over batches,
  devices and hosts as the others do."""
  scored_B = (count_B > 0).astype(jnp.float32)
  share_B = correct_B / jnp.maximum(count_B, 1.0)
  return {"length_accuracy_sum": jax.ops.segment_sum(share_B * scored_B, lengths_B, bins),
          "length_examples": jax.ops.segment_sum(scored_B, lengths_B, bins)}


def _with_lengths(metrics, batch, scored):
  """`metrics` and, where the batch holds the examples' task lengths ("lengths": never given to
  the model), their per-length sums, a bin per length up to one past the batch's width
  (per_length.longest); `scored()`: (correct_B, count_B) of each example, the padded rows'
  count 0."""
  if "lengths" in batch:
    bins = per_length.longest(batch["inputs"].shape[1]) + 1
    metrics.update(length_sums(*scored(), batch["lengths"], bins))
  return metrics


def classify_loss(model, pair: bool):
  """The classification objective: (training loss, evaluation sums).

  The loss (params, batch_stats, batch, rng) -> (mean cross-entropy, (metric sums, updated
  batch_stats)), dropout on, is differentiated for the parameters only; the evaluation
  (state, batch) -> metric sums weighs each example by batch["weights"]."""

  def loss(params, batch_stats, batch, rng):
    logits, updated = _logits(model, pair, params, batch_stats, batch, deterministic=False,
                              rngs={"dropout": rng}, mutable=["batch_stats"])
    loss_B = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                             batch["labels"])
    metrics = sums(logits, batch["labels"], jnp.ones_like(batch["labels"], jnp.float32))
    return jnp.mean(loss_B), (metrics, updated.get("batch_stats", batch_stats))

  def evaluate(state, batch):
    logits = _logits(model, pair, state.params, state.batch_stats, batch, deterministic=True)
    weights_B = batch["weights"]
    correct = lambda: ((jnp.argmax(logits, -1) == batch["labels"]) * weights_B, weights_B)
    return _with_lengths(sums(logits, batch["labels"], weights_B), batch, correct)

  return loss, evaluate


def position_loss(model, no_target: int = -1):
  """classify_loss for a per-position task (MQAR): labels BxL, `no_target` where a position
  has none, the model's logits BxLxC (the per-token head); the loss is the mean cross-entropy
  over the labelled positions of the batch, and the sums count positions, not examples."""

  def weighed(labels_BxL, weights_BxL):
    return jnp.maximum(labels_BxL, 0).astype(jnp.int32), weights_BxL * (labels_BxL != no_target)

  def loss(params, batch_stats, batch, rng):
    logits, updated = _logits(model, False, params, batch_stats, batch, deterministic=False,
                              rngs={"dropout": rng}, mutable=["batch_stats"])
    labels = batch["labels"]
    metrics = sums(logits, *weighed(labels, jnp.ones(labels.shape, jnp.float32)))
    mean = metrics["loss_sum"] / jnp.maximum(metrics["count"], 1.0)
    return mean, (metrics, updated.get("batch_stats", batch_stats))

  def evaluate(state, batch):
    logits = _logits(model, False, state.params, state.batch_stats, batch, deterministic=True)
    labels, weights_BxL = weighed(batch["labels"], jnp.broadcast_to(batch["weights"][:, None],
                                                                    batch["labels"].shape))
    correct = lambda: (((jnp.argmax(logits, -1) == labels) * weights_BxL).sum(-1),
                       weights_BxL.sum(-1))
    return _with_lengths(sums(logits, labels, weights_BxL), batch, correct)

  return loss, evaluate


def micro_batches(batch, accum_steps: int, mesh: Mesh):
  """B rows -> K x B/K: micro-batch k takes rows k, K + k, 2K + k, ..., so each device keeps
  its own rows (B/(K x devices) of every micro-batch) and nothing moves between devices."""
  split = NamedSharding(mesh, P(None, "data"))

  def one(x):
    x = x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:]).swapaxes(0, 1)
    return jax.lax.with_sharding_constraint(x, split)

  return jax.tree_util.tree_map(one, batch)


def gradients(model, pair: bool, params, batch_stats, batch, rng, loss_fn=None):
  """(mean-loss gradients, updated batch statistics, metric sums, loss) of one batch, under
  `loss_fn` (classify_loss's form; None = classification)."""
  loss_fn = loss_fn or classify_loss(model, pair)[0]
  (loss, (metrics, batch_stats)), grads = jax.value_and_grad(
      lambda p: loss_fn(p, batch_stats, batch, rng), has_aux=True)(params)
  return grads, batch_stats, metrics, loss


def accumulated_gradients(model, pair: bool, params, batch_stats, batch, rng,
                          accum_steps: int, mesh, loss_fn=None):
  """`gradients` over K micro-batches, one after another (the activations of one at a time):
  the mean of their gradients (each the mean over B/K examples: the mean over B), the batch
  statistics updated by each in turn, the metric sums of all, the mean loss."""
  zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
  totals = {k: jnp.zeros((), jnp.float32) for k in ("loss_sum", "correct", "count")}

  def one(carry, k_and_batch):
    grads_sum, stats, sums_sum = carry
    k, micro = k_and_batch
    grads, stats, micro_sums, loss = gradients(model, pair, params, stats, micro,
                                               jax.random.fold_in(rng, k), loss_fn)
    add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)
    return (add(grads_sum, grads), stats, add(sums_sum, micro_sums)), loss

  (grads, batch_stats, metrics), losses = jax.lax.scan(
      one, (zeros, batch_stats, totals),
      (jnp.arange(accum_steps), micro_batches(batch, accum_steps, mesh)))
  grads = jax.tree_util.tree_map(lambda g: g / accum_steps, grads)
  return grads, batch_stats, metrics, jnp.mean(losses)


def make_steps(model, pair: bool, mesh: Mesh, accum_steps: int = 1, objective=None):
  """The jitted train and eval steps: batch sharded over 'data', state replicated, donated.
  `accum_steps` K > 1: the train step's gradient is accumulated over K micro-batches of B/K
  (config.grad_accum_steps), one update with their mean. `objective`: (loss, evaluation) as
  classify_loss makes them (lra.training.pretrain.denoise_loss for config.objective
  "denoise"); None = classification."""
  loss_fn, eval_step = objective or classify_loss(model, pair)
  replicated = NamedSharding(mesh, P())
  sharded = NamedSharding(mesh, P("data"))

  def train_step(state, batch, rng):
    step_rng = jax.random.fold_in(rng, state.step)  # resumed runs continue the same stream
    if accum_steps == 1:
      grads, batch_stats, metrics, loss = gradients(model, pair, state.params,
                                                    state.batch_stats, batch, step_rng, loss_fn)
    else:
      grads, batch_stats, metrics, loss = accumulated_gradients(
          model, pair, state.params, state.batch_stats, batch, step_rng, accum_steps, mesh,
          loss_fn)
    new_state = state.apply_gradients(grads=grads).replace(batch_stats=batch_stats)
    # The new parameters too: a checkpoint is saved only if everything so far was finite.
    finite = jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(new_state.params))
    metrics["finite"] = finite.astype(jnp.float32)
    metrics["steps"] = jnp.ones((), jnp.float32)  # counted on device: no host work per step
    return new_state, metrics

  train = jax.jit(train_step, in_shardings=(replicated, sharded, replicated),
                  out_shardings=(replicated, replicated), donate_argnums=(0,))
  evaluate = jax.jit(eval_step, in_shardings=(replicated, sharded), out_shardings=replicated)
  return train, evaluate, sharded
