"""The one generic trainer: every task, every model, any number of devices and hosts."""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lra import models
from lra.models import registry
from lra.data import batches, tasks
from lra.training import (evaluation, memory_check, optim, per_length, pretrain, run_dir,
                          steps)
from lra.training.periodic import NonFiniteLossError  # noqa: F401  (callers catch it here)


def make_mesh(devices=None) -> Mesh:
  """A 1-D mesh over all devices of all processes: the batch is split over 'data'."""
  devices = jax.devices() if devices is None else devices
  return Mesh(np.asarray(devices), ("data",))


class TrainState(train_state.TrainState):
  """Flax's TrainState plus the model's batch statistics: BatchNorm's running averages
  (config.model.norm="batch"), updated by every train step, used by evaluation; {} if none."""
  batch_stats: Any = None


def _denoise(config) -> bool:
  return config.get("objective") == "denoise"


def build_model(config, task: tasks.Task, mask_token: bool | None = None):
  """The model for this task: the classifier, or for config.objective "denoise" the
  Denoiser, which predicts each token of the vocabulary. `mask_token`: the embedding table
  has the mask token's row (lra.training.pretrain; None: if the run denoises). A per-position
  task (MQAR) gets the Denoiser's per-token head too, with the task's classes. An invalid
  setting raises lra.rules.SettingError."""
  extra = int(_denoise(config) if mask_token is None else mask_token)
  return models.build(config.model.to_dict(), vocab_size=task.vocab_size + extra,
                      num_classes=task.vocab_size if _denoise(config) else task.num_classes,
                      max_len=task.max_len, pair=task.pair,
                      denoise=_denoise(config) or task.per_position, mask_token=bool(extra))


def inputs_only(batch: dict[str, np.ndarray], config) -> dict[str, np.ndarray]:
  """A denoise step is given the inputs (and masks, weights), never the labels (nor the task
  lengths, which only the classifier's evaluation reads)."""
  if _denoise(config):
    batch.pop("labels", None)
    batch.pop("lengths", None)
  return batch


def train_width(config, task: tasks.Task) -> int:
  """The width of the train batches: the train split's own (a length-generalisation task
  trains on rows shorter than it tests on, each split evaluated at its own width), or the
  model's, Task.max_len, for a mixer built for the one length it was initialised at (its
  FIXED_LENGTH: Sinkhorn's sorting network has an output per block of that length)."""
  if registry.get(config.model.name).FIXED_LENGTH:
    return task.max_len
  return task.splits["train"]["inputs"].shape[1]


# What a row is padded with, per key: padding tokens, no target, masked out.
_WIDEN = {"inputs": 0, "inputs2": 0, "labels": tasks.NO_TARGET, "mask": False, "mask2": False}


def widen(batch: dict[str, np.ndarray], width: int) -> dict[str, np.ndarray]:
  """The batch's rows padded on the right to `width` (per-position labels with NO_TARGET)."""
  extra = width - batch["inputs"].shape[1]
  for key, value in _WIDEN.items():
    if extra > 0 and key in batch and batch[key].ndim == 2:
      batch[key] = np.pad(batch[key], ((0, 0), (0, extra)), constant_values=value)
  return batch


def train_batch(task: tasks.Task, config, step: int) -> dict[str, np.ndarray]:
  """This process's rows of train batch `step` at train_width, without the examples' task
  lengths, which no train step reads."""
  batch = batches.train_batch(task.splits["train"], config.batch_size, step, config.seed)
  batch.pop("lengths", None)
  batch = widen(add_masks(batch, task.padding), train_width(config, task))
  return inputs_only(batch, config)


def _eval_lengths(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The task lengths an evaluation bins by (steps.length_sums) as JAX's default integer."""
  if "lengths" in batch:
    batch["lengths"] = np.asarray(batch["lengths"], np.int32)
  return batch


def add_masks(batch: dict[str, np.ndarray], padding: bool) -> dict[str, np.ndarray]:
  """Tasks whose token 0 is a real value (pixels) get explicit all-true masks."""
  if not padding:
    batch["mask"] = np.ones(batch["inputs"].shape, bool)
    if "inputs2" in batch:
      batch["mask2"] = np.ones(batch["inputs2"].shape, bool)
  return batch


def to_global(batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """This process's rows -> one global array per key, sharded over the mesh."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def create_state(model, task: tasks.Task, config, mesh: Mesh):
  """Parameters initialised under jit, directly replicated over the mesh."""
  dummy = jnp.zeros((1, task.max_len), jnp.int32)
  inputs = (dummy, dummy) if task.pair and not _denoise(config) else (dummy,)
  tx = optim.optimizer(config)

  def init(rng):
    variables = model.init(rng, *inputs)
    return TrainState.create(apply_fn=model.apply, params={"params": variables["params"]},
                             tx=tx, batch_stats=variables.get("batch_stats", {}))

  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 0)
  # No catch here: settings are checked when the model is built, so an error while tracing
  # init is a bug and keeps its traceback.
  return jax.jit(init, out_shardings=NamedSharding(mesh, P()))(rng)


def evaluate(eval_step, state, split, batch_size: int, sharding, padding: bool = True,
             config=None, **options) -> dict[str, Any]:
  """evaluation.evaluate of this trainer's batches, capped at config.eval_max_examples."""
  def prepare(batch):
    batch = _eval_lengths(add_masks(batch, padding))
    return to_global(batch if config is None else inputs_only(batch, config), sharding)
  cap = 0 if config is None else config.eval_max_examples
  return evaluation.evaluate(eval_step, state, split, batch_size, prepare, cap, **options)


def _test(config, task: tasks.Task, evaluate_split, best, state, meta: dict) -> dict[str, Any]:
  """The test's figures of the `best` state (and of the final `state`, for reference); a
  denoise run gives its masked-token figures on validation instead and never reads the test
  split. Each pass is counted in meta's "evaluation"."""
  if _denoise(config):
    val, = evaluation.final(evaluate_split, [best], task.splits["val"], "val", meta, config)
    return pretrain.results(val, config.mask_rate, pretrain.mask_token(task.vocab_size))
  test, last_test = evaluation.final(evaluate_split, [best, state], task.splits["test"],
                                     "test", meta, config)
  labels = evaluation.labels(task.splits["test"], config.eval_max_examples)
  targets = labels[labels != tasks.NO_TARGET]  # all labels, but a per-position task's
  # A per-position task counts examples (test_count) and the positions scored apart.
  counts = ({"test_count": len(labels), "test_positions": test["count"]} if task.per_position
            else {"test_count": test["count"]})
  # A task with its examples' lengths: the accuracy per test length (per_length's record).
  lengths = {per_length.KEY: per_length.record(
      test["per_length"], task.chance, task.splits["train"].get("lengths"))
  } if "per_length" in test else {}
  return {"test_accuracy": test["accuracy"], "test_loss": test["loss"], **counts,
          "last_step_test_accuracy": last_test["accuracy"],
          "test_majority_rate": float(np.bincount(targets).max() / len(targets)), **lengths}


def _objective(config, model, task: tasks.Task):
  """The steps' (loss, evaluation) of config.objective; None: classification's (of each
  labelled position for a per-position task)."""
  if not _denoise(config):
    return steps.position_loss(model, tasks.NO_TARGET) if task.per_position else None
  return pretrain.denoise_loss(model, task.pair, config.mask_rate,
                               pretrain.mask_token(task.vocab_size))


def train_and_evaluate(config, workdir: str, devices=None,
                       allow_config_change: bool = False) -> dict[str, Any]:
  """Trains (resuming from `workdir` if it holds checkpoints), then tests the best checkpoint.

  Read top to bottom, from the data to the test. The run (lra.training.run_dir) holds what
  guards and records it, and refuses its steps out of their order (checks before the data,
  the memory check before the data and before Orbax writes, the disk's room before Orbax
  writes); after each step it runs the periodic actions (lra.training.periodic: log,
  validate, save, time limit, preemption, non-finite loss, profiler trace).
  allow_config_change: resume although the settings that change the result differ from the
  checkpoints' or the run diverged (workdir_lib.check_resume); recorded in results.json."""
  mesh = make_mesh(devices)
  # Checks the settings, locks the workdir, checks a resume (reading only): before anything.
  with run_dir.open(config, workdir, mesh, allow_config_change) as run:
    shapes = memory_check.task_shapes(config)  # the task's sizes; no data is made or read yet
    model = build_model(config, shapes, run.mask_token)
    run.note_model(model)
    train_step, eval_step, sharding = steps.make_steps(
        model, shapes.pair, mesh, config.grad_accum_steps, _objective(config, model, shapes))
    state = create_state(model, shapes, config, mesh)
    run.compile(train_step, state, shapes, sharding)  # refuses a step too big for memory
    task = run.load_task(shapes)
    state = run.restore(state)  # the checkpoint, or the fresh state (init_from's encoder)
    evaluate_split = functools.partial(evaluate, eval_step, batch_size=config.eval_batch_size,
                                       sharding=sharding, padding=task.padding, config=config)
    validate = functools.partial(evaluate_split, split=task.splits["val"], name="validation")
    dropout_rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)  # + the step's number
    for step in run.steps(state, validate):
      state, metrics = train_step(state, to_global(train_batch(task, config, step), sharding),
                                  dropout_rng)
      run.after_step(state, metrics)
    best = run.best(state)  # the best-on-validation checkpoint
    return run.finish(state, best, _test(config, task, evaluate_split, best, state, run.meta))
