"""The one generic trainer: every task, every model, any number of devices and hosts."""
from __future__ import annotations

import functools
import json
import signal
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lra import models
from lra import config_record, paths, provenance
from lra.data import batches, tasks
from lra.errors import UserError
from lra.training import (checkpoint, config_checks, evaluation, faults, initialise, optim,
                          preemption, pretrain, profiling, progress, run_record, steps,
                          time_limit, workdir as workdir_lib)
from lra.training import memory_check
from lra.training.checkpoint import Checkpoints, MismatchError
from lra.training.writers import MetricWriter


class NonFiniteLossError(UserError):
  """The loss became NaN or infinite; the last good checkpoint is kept."""


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
  """A denoise step is given the inputs (and masks, weights), never the labels."""
  if _denoise(config):
    batch.pop("labels", None)
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
    batch = add_masks(batch, padding)
    return to_global(batch if config is None else inputs_only(batch, config), sharding)
  cap = 0 if config is None else config.eval_max_examples
  return evaluation.evaluate(eval_step, state, split, batch_size, prepare, cap, **options)


def _write_json(path, obj) -> None:
  if jax.process_index() != 0:
    return
  paths.write_text(path, json.dumps(obj, indent=1))


def _check_run(config, workdir, allow_change: bool) -> tuple[int | None, dict | None,
                                                              dict | None]:
  """(step of the newest intact checkpoint or None, record of what changed or None, the run
  its encoder started from or None), once the run in workdir is known to be this one
  (workdir_lib.check_resume). Reads only the checkpoints' manifests, so a refusal comes
  before anything is compiled."""
  notes = []
  found = checkpoint.newest_intact(workdir, "checkpoints", notes)  # damaged: moved aside
  if notes and found is None:
    notes.append(f"no intact checkpoint is left in {workdir}/checkpoints: training starts "
                 f"again from step 0")
  _warn(notes)
  step, meta = found if found is not None else (None, None)
  # The settings the checkpoints were made with; config.json for a run that saved none yet.
  reference = (meta or {}).get("config") or workdir_lib.read_json(workdir / "config.json")
  change = workdir_lib.check_resume(config, workdir, reference, step or 0, allow_change)
  started = (meta or {}).get("init")
  moved = initialise.changed_since(config, workdir, started) if step is not None else None
  if moved and not allow_change:
    raise UserError(f"{workdir} was started from the encoder of config.init_from="
                    f"{config.init_from}, which has changed since ({moved}): it would go on "
                    f"from the old encoder. Use a new --workdir (a leaderboard grid: a new "
                    f"--root) to fine-tune from the new one, or add {workdir_lib.ALLOW_FLAG} "
                    f"to go on from the old one (recorded in its results.json)")
  if moved:
    change = {**(change or {"step": step, "changes": {}, "after_divergence": []}),
              "init_from_changed": moved, workdir_lib.ALLOW_FLAG: True}
  return step, change, started


def _restore(ckpts: Checkpoints, step: int | None, change: dict | None, state, config,
             workdir):
  """(state, meta) of checkpoint `step`, or the fresh state and meta."""
  meta = {"best_val_accuracy": -1.0, "best_step": None, "train_time_s": 0.0}
  if step is not None:
    try:
      state, meta = ckpts.restore(ckpts.latest, step, state)
    except MismatchError as e:
      raise UserError(f"the checkpoints do not fit this config: {e}; run with the config "
                      f"they were made with (see {workdir}/config.json), or use a new "
                      f"--workdir") from None
  if change is not None:
    meta["config_changes"] = [*meta.get("config_changes", []), change]
  meta["config"] = config_record.as_json(config)  # saved with every checkpoint from now on
  return state, meta


def _note_validation(done: int, val: dict, state, ckpts: Checkpoints, meta: dict,
                     writer: MetricWriter) -> None:
  """Writes a validation and saves the best checkpoint when it is the best so far."""
  writer.write(done, {"val_loss": val["loss"], "val_accuracy": val["accuracy"]})
  if val["accuracy"] > meta["best_val_accuracy"]:
    meta.update(best_val_accuracy=val["accuracy"], best_step=done)
    if ckpts.best.latest_step() != done:  # a resumed run may reach it a second time
      ckpts.save_best(done, state, meta)


def _bar(config, start: int, total: int):
  """The progress bar. It redraws with \\r: only on a terminal; a log file gets the lines
  of progress.say instead."""
  return tqdm.tqdm(total=total, initial=start, desc=f"{config.task}/{config.model.name}",
                   disable=(not config.progress or jax.process_index() != 0
                            or not sys.stderr.isatty()),
                   mininterval=1.0, dynamic_ncols=True)


def _train(config, workdir: str, task: tasks.Task, train_step, evaluate_split, sharding,
           state, ckpts: Checkpoints, meta: dict, writer: MetricWriter):
  """Steps from the state's step to config.num_train_steps (or until config.max_train_time_s
  of training): logs, validates, checkpoints. Returns (state, the early stop's record or
  None)."""
  start, total = int(state.step), config.num_train_steps
  dropout_rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  schedule = optim.learning_rate_schedule(config)  # for logging; built once
  bar = _bar(config, start, total)
  # Train sums of a log interval cut short by a stop: the resumed run logs what one
  # uninterrupted run would (float32 -> JSON float -> float32 is exact).
  pending = meta.pop("train_sums", None)
  sums = None if pending is None else {k: np.float32(v) for k, v in pending.items()}
  clock = progress.TrainClock(time.time(), start, config.eval_every)
  say = functools.partial(progress.say, bar=bar, config=config)
  run_start = time.time() - meta["train_time_s"] - meta.pop("compile_s", 0.0)
  service = preemption.uses_preemption_service()
  trace = profiling.Trace(config, workdir, start)
  stopped = time_limit.spent(config, start, total, meta, bar)
  if stopped is not None:
    return state, stopped
  with bar:
    for step in range(start, total):
      trace.before_step(step)
      batch = batches.train_batch(task.splits["train"], config.batch_size, step, config.seed)
      batch = inputs_only(add_masks(batch, task.padding), config)
      state, metrics = train_step(state, to_global(batch, sharding), dropout_rng)
      sums = metrics if sums is None else jax.tree_util.tree_map(jnp.add, sums, metrics)
      done = step + 1
      traced = trace.after_step(done, total, state)
      if traced:
        progress.say(traced, bar, config)
      bar.update(1)
      # Out of time: this step ends the run as the last step would (logged, validated,
      # saved), and the best checkpoint is tested. At least one step is trained per start.
      stopped = time_limit.stop(config, run_start, done, total)
      is_log = done % config.log_every == 0 or stopped is not None
      is_eval = done % config.eval_every == 0 or done == total or stopped is not None
      if is_log or is_eval or done % config.checkpoint_every == 0:
        _check_finite(sums, done, ckpts, workdir)
        train = progress.log_train(writer, bar, sums, done, clock, schedule)
        sums = None
      if is_eval:
        val = evaluate_split(state, task.splits["val"], name="validation", say=say)
        clock.validated(val["seconds"])
        evaluation.note(meta, "validation", val, "val")
      if is_log or is_eval:
        say(progress.record(done, total, train, val if is_eval else None, clock))
      if is_eval:
        _note_validation(done, val, state, ckpts, meta, writer)
      if is_eval or done % config.checkpoint_every == 0:
        meta["train_time_s"] = time.time() - run_start
        ckpts.save_latest(done, state, meta)
        clock.resume(time.time(), bar)  # steps/s counts training alone
      if stopped is not None:
        progress.say(progress.time_stop_line(done, total, config), bar, config)
        break
      if done < total and preemption.stop_requested(done, service):
        _save_and_stop(done, total, state, sums, ckpts, meta, workdir, run_start)
  return state, stopped


def _save_and_stop(done: int, total: int, state, sums, ckpts: Checkpoints, meta: dict,
                   workdir: str, run_start: float) -> None:
  """Saves the resumable checkpoint of step `done` (unless a periodic save just did) and
  raises preemption.Preempted."""
  _check_finite(sums, done, ckpts, workdir)  # never a checkpoint of a broken state
  if ckpts.latest.latest_step() != done:
    host = None if sums is None else {k: float(v) for k, v in jax.device_get(sums).items()}
    ckpts.save_latest(done, state, {**meta, "train_time_s": time.time() - run_start,
                                    "train_sums": host})
  signum = preemption.stop_signal()
  raise preemption.Preempted(
      f"stopped by {signal.Signals(signum).name} after step {done}/{total}; "
      f"checkpoint saved in {workdir}/checkpoints", signum)


def _check_finite(sums, step: int, ckpts: Checkpoints, workdir) -> None:
  if sums is not None and float(sums["finite"]) < float(sums["steps"]):
    raise NonFiniteLossError(workdir_lib.diverged(workdir, step, ckpts.latest.latest_step()))


def _warn(notes: list[str]) -> None:
  """One line each (damaged checkpoints moved aside); the list is emptied."""
  for note in notes if jax.process_index() == 0 else ():
    print(f"warning: {note}", flush=True)
  notes.clear()


def _test(config, task: tasks.Task, evaluate_split, state, ckpts: Checkpoints,
          meta: dict, stopped: dict | None) -> dict[str, Any]:
  """Tests the best checkpoint on test (and the last state, for reference); a denoise run
  gives its masked-token figures on validation instead and never reads the test split. If no
  copy of the best checkpoint restores, the final state is used, and the results say so.
  `stopped`: the record of a run ended by config.max_train_time_s before
  config.num_train_steps."""
  best_state, best_meta, tested = ckpts.restore_best(state, meta)
  _warn(ckpts.notes)
  record = {
      "task": config.task, "model": config.model.name,
      "objective": config.get("objective", "classify"), "best_step": best_meta["best_step"],
      "train_count": len(task.splits["train"]["labels"]),
      "val_count": len(task.splits["val"]["labels"]),
      "best_val_accuracy": best_meta["best_val_accuracy"],
      # The steps trained: config.num_train_steps unless max_train_time_s ended it earlier.
      "num_train_steps": int(state.step), "planned_num_train_steps": config.num_train_steps,
      "stopped_early": stopped, "train_time_s": meta["train_time_s"],
      # The machine, the code (version, git commit, libraries) and the parameter count.
      **run_record.describe(best_state), "config": config.to_dict(),
      "data": task.data,  # what made the data (lra.data.record) and any cut of its rows
      "tested_step": int(best_state.step), "tested_checkpoint": tested,
      # Settings changed on resumes, and resumes of a diverged run (workdir_lib.check_resume).
      "config_changes": meta.get("config_changes", []),
      "init": meta.get("init"),  # the run whose encoder this one started from (init_from)
  }
  if _denoise(config):
    val, = evaluation.final(evaluate_split, [best_state], task.splits["val"], "val", meta,
                            config)
    return {**record, **pretrain.results(val, config.mask_rate,
                                         pretrain.mask_token(task.vocab_size)),
            "evaluation": evaluation.finish(meta, config)}
  test, last_test = evaluation.final(evaluate_split, [best_state, state],
                                     task.splits["test"], "test", meta, config)
  labels = evaluation.labels(task.splits["test"], config.eval_max_examples)
  targets = labels[labels != tasks.NO_TARGET]  # all labels, but a per-position task's
  # A per-position task counts examples (test_count) and the positions scored apart.
  counts = ({"test_count": len(labels), "test_positions": test["count"]} if task.per_position
            else {"test_count": test["count"]})
  return {**record, "test_accuracy": test["accuracy"], "test_loss": test["loss"], **counts,
          "last_step_test_accuracy": last_test["accuracy"],
          "test_majority_rate": float(np.bincount(targets).max() / len(targets)),
          "evaluation": evaluation.finish(meta, config)}


def _objective(config, model, task: tasks.Task):
  """The steps' (loss, evaluation) of config.objective; None: classification's (of each
  labelled position for a per-position task)."""
  if not _denoise(config):
    return steps.position_loss(model, tasks.NO_TARGET) if task.per_position else None
  return pretrain.denoise_loss(model, task.pair, config.mask_rate,
                               pretrain.mask_token(task.vocab_size))


def _say_once(line: str) -> None:
  if jax.process_index() == 0:
    print(line, flush=True)


def train_and_evaluate(config, workdir: str, devices=None,
                       allow_config_change: bool = False) -> dict[str, Any]:
  """Trains (resuming from `workdir` if it holds checkpoints), then tests the best checkpoint.

  allow_config_change: resume although the settings that change the result differ from the
  checkpoints' or the run diverged (workdir_lib.check_resume); recorded in results.json.
  Long because its order is the rule (checks before data, memory before Orbax writes): one
  readable spine until architecture step 4 (issue 45) gives it run/step objects."""
  workdir = paths.resolve(workdir)  # local (made absolute, as Orbax needs) or gs://...
  mesh = make_mesh(devices)
  config_checks.check_config(config, mesh.devices.size)  # before any data or compiling
  # A run cut short; an outside mixer's settings that no rule checks.
  _warn([w for w in (config_checks.short_run_warning(config),
                     config_checks.unruled_warning(config)) if w])
  faults.prepare_workdir(workdir)  # a folder this process can write
  lock = workdir_lib.Lock(workdir)  # a second trainer on this workdir stops here
  ckpts = writer = None
  try:
    step, change, started = _check_run(config, workdir, allow_config_change)  # reads only
    # init_from, for a new run: checked before the data loads. A resumed run has its own.
    source = initialise.find(config, workdir) if step is None else None
    shapes = memory_check.task_shapes(config)  # the task's sizes; no data is made or read yet
    model = build_model(config, shapes, initialise.needs_mask_token(config, source, started))
    idle = models.idle_settings(model)  # valid settings that do nothing at this length
    _warn(list(idle))
    mixer_module = provenance.mixer_module(config.model.name)  # an --import's file and hash
    train_step, eval_step, sharding = steps.make_steps(
        model, shapes.pair, mesh, config.grad_accum_steps, _objective(config, model, shapes))
    state = create_state(model, shapes, config, mesh)
    # Compiles the step (for training too); its seconds count as training, as they did.
    compiled_s = memory_check.check(config, train_step, state, shapes, sharding, step is not None)
    task = memory_check.same_shapes(tasks.load(config), shapes)
    config_checks.check_train_split(config, len(task.splits["train"]["labels"]))
    faults.check_room(workdir, state, config.keep_checkpoints)  # before Orbax writes
    ckpts = Checkpoints(workdir, config.keep_checkpoints)
    state, meta = _restore(ckpts, step, change, state, config, workdir)
    meta["compile_s"] = compiled_s  # _train counts it (not spent() of earlier runs)
    if step is None and source is not None:  # a resumed run keeps its own encoder
      state, meta["init"] = initialise.load(source, state, mesh)
      _say_once(f"Starting from the encoder of {source.workdir} ({source.kind}/{source.step})")
    _write_json(workdir / "config.json", config.to_dict())
    if int(state.step):
      _say_once(f"Resuming from the checkpoint at step {int(state.step)} in {workdir}")
    # Drops the rows written after the checkpoint; records the config (TensorBoard, W&B).
    writer = MetricWriter(workdir, int(state.step), config)
    evaluate_split = functools.partial(evaluate, eval_step, batch_size=config.eval_batch_size,
                                       sharding=sharding, padding=task.padding, config=config)
    state, stopped = _train(config, workdir, task, train_step, evaluate_split, sharding,
                            state, ckpts, meta, writer)
    results = _test(config, task, evaluate_split, state, ckpts, meta, stopped)
    results["mixer_module"] = mixer_module  # None for a mixer of models/
    results["idle_settings"] = idle  # the tables note them
    final = ("val_masked_accuracy", "val_masked_loss") if _denoise(config) else (
        "test_accuracy", "test_loss")
    writer.write(int(state.step), {k: results[k] for k in final})
    _write_json(workdir / "results.json", results)
    return results
  finally:
    if writer is not None:
      writer.close()
    if ckpts is not None:
      ckpts.close()
    lock.release()
