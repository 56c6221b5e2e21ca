"""Self-pretraining (Amos, Berant & Gupta, "Never Train from Scratch", ICLR 2024): the denoise
objective (config.objective="denoise").

A fraction config.mask_rate of the real tokens of each input (never padding), each chosen
independently, is replaced by the mask token, and the model (models.classifiers.Denoiser) predicts
the original token at those positions only. The mask token is one id past the task's
vocabulary (id V for a vocabulary 0..V-1): the embedding table of a denoise run has V + 1 rows,
and so has the classifier of a run initialised from one (lra.training.initialise), so that
the table loads as it is. Targets are the V real ids (the 256 pixel values for the image
tasks). A pair task's two inputs are denoised as separate examples by the one encoder.

Only the train split's inputs are trained on (the trainer gives no labels to these steps); the
validation split's inputs are masked the same way for monitoring, never trained on.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

# Randomness of the masking: its own stream beside dropout's, from the step's key in training;
# from a fixed key and the batch's tokens in evaluation (the same masks at every evaluation).
_MASK_STREAM = 0x6D41534B
_EVAL_KEY = 0xE7A1


def mask_token(vocab_size: int) -> int:
  """The mask token's id: one past the task's vocabulary."""
  return vocab_size


def corrupt(rng, tokens_BxL, real_BxL, rate: float, mask_id: int):
  """(corrupted tokens, chosen BxL bool): each real token is chosen with probability `rate`
  and replaced by `mask_id`; padding (real False) is never chosen."""
  chosen_BxL = jax.random.bernoulli(rng, rate, tokens_BxL.shape) & real_BxL
  return jnp.where(chosen_BxL, mask_id, tokens_BxL), chosen_BxL


def _towers(batch, pair: bool):
  """(tokens, real-token mask, example weights or None): a pair task's second inputs become
  more rows (the same encoder sees each document alone, as the dual classifier's does)."""
  def real(tokens, key):
    return batch[key] if key in batch else tokens != 0  # token 0 is padding unless masked
  tokens, mask = batch["inputs"], real(batch["inputs"], "mask")
  weights = batch.get("weights")
  if pair:
    tokens = jnp.concatenate([tokens, batch["inputs2"]])
    mask = jnp.concatenate([mask, real(batch["inputs2"], "mask2")])
    weights = None if weights is None else jnp.concatenate([weights, weights])
  return tokens, mask, weights


def token_sums(logits_BxLxV, targets_BxL, weights_BxL):
  """Masked-token sums: cross-entropy, correct and count over the weighted positions."""
  loss_BxL = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxLxV.astype(jnp.float32), targets_BxL)
  correct_BxL = (jnp.argmax(logits_BxLxV, -1) == targets_BxL).astype(jnp.float32)
  return {"loss_sum": jnp.sum(loss_BxL * weights_BxL),
          "correct": jnp.sum(correct_BxL * weights_BxL), "count": jnp.sum(weights_BxL)}


def denoise_loss(model, pair: bool, rate: float, mask_id: int):
  """The denoise objective in lra.training.steps.classify_loss's form: (training loss,
  evaluation sums); the loss is the mean cross-entropy over the masked tokens of the batch."""

  def loss(params, batch_stats, batch, rng):
    tokens, real, _ = _towers(batch, pair)
    corrupted, chosen = corrupt(jax.random.fold_in(rng, _MASK_STREAM), tokens, real, rate,
                                mask_id)
    logits, updated = model.apply({**params, "batch_stats": batch_stats}, corrupted, real,
                                  deterministic=False, rngs={"dropout": rng},
                                  mutable=["batch_stats"])
    metrics = token_sums(logits, tokens, chosen.astype(jnp.float32))
    mean = metrics["loss_sum"] / jnp.maximum(metrics["count"], 1.0)
    return mean, (metrics, updated.get("batch_stats", batch_stats))

  def evaluate(state, batch):
    tokens, real, weights = _towers(batch, pair)
    key = jax.random.fold_in(jax.random.PRNGKey(_EVAL_KEY), jnp.sum(tokens))
    corrupted, chosen = corrupt(key, tokens, real, rate, mask_id)
    logits = model.apply({**state.params, "batch_stats": state.batch_stats}, corrupted, real,
                         deterministic=True)
    return token_sums(logits, tokens, chosen.astype(jnp.float32) * weights[:, None])

  return loss, evaluate


def results(val: dict, rate: float, mask_id: int) -> dict:
  """What a denoise run adds to results.json: its masked-token figures on validation (of the
  best checkpoint), instead of a test accuracy (a denoise run never reads the test split)."""
  return {"objective": "denoise", "val_masked_accuracy": val["accuracy"],
          "val_masked_loss": val["loss"], "val_masked_count": val["count"],
          "mask_rate": rate, "mask_token": mask_id}
