"""The run in a workdir, around lra.training.trainer's spine: the checks, the lock, the resume,
the restore, the metric writers and the results, in the order the rules require.

`open(config, workdir, mesh)` checks the settings (before any data or compiling), makes and
locks the workdir and checks a resume against its checkpoints' manifests (reading only), and
gives a Run whose steps come in this order, each refused (OutOfOrder) before the one it
follows:

  note_model  the model built: its idle settings said, an --import's mixer file recorded
  compile     the memory check: the train step compiled once on the batch's shapes (the first
              step finds it compiled) and refused if it does not fit, before any data
  load_task   the data, checked against the shapes the model was built for
  restore     room on the disk, then the first Orbax use: the checkpoint (or config.init_from's
              encoder), config.json, the metric writers
  steps       the train steps, with the periodic actions after each (lra.training.periodic)
  best        the best-on-validation checkpoint restored for the test
  finish      the results: the last metrics row and results.json
"""
from __future__ import annotations

import contextlib
import json
from typing import Any

import jax

from lra import config_record, models, paths, provenance
from lra.data import tasks
from lra.errors import UserError
from lra.training import (checkpoint, config_checks, evaluation, faults, initialise,
                          memory_check, per_length, periodic, run_record,
                          workdir as workdir_lib)
from lra.training.checkpoint import Checkpoints, MismatchError
from lra.training.periodic import OutOfOrder
from lra.training.writers import MetricWriter

ORDER = ("open", "note_model", "compile", "load_task", "restore", "steps", "best", "finish")


def _warn(notes: list[str]) -> None:
  """One line each (damaged checkpoints moved aside); the list is emptied."""
  for note in notes if jax.process_index() == 0 else ():
    print(f"warning: {note}", flush=True)
  notes.clear()


def _say_once(line: str) -> None:
  if jax.process_index() == 0:
    print(line, flush=True)


def _write_json(path, obj) -> None:
  if jax.process_index() == 0:
    paths.write_text(path, json.dumps(obj, indent=1))


@contextlib.contextmanager
def open(config, workdir: str, mesh, allow_config_change: bool = False):  # noqa: A001
  """The Run of `config` in `workdir` (local, made absolute as Orbax needs, or gs://...);
  closed (writers, checkpoints, lock) however the run ends. allow_config_change: resume
  although the settings that change the result differ from the checkpoints' or the run
  diverged (workdir_lib.check_resume); recorded in results.json."""
  workdir = paths.resolve(workdir)
  config_checks.check_config(config, mesh.devices.size)  # before any data or compiling
  # A run cut short; an outside mixer's settings that no rule checks.
  _warn([w for w in (config_checks.short_run_warning(config),
                     config_checks.unruled_warning(config)) if w])
  made = not workdir.exists()  # a refused run removes a workdir it made and left empty
  faults.prepare_workdir(workdir)  # a folder this process can write
  lock = workdir_lib.Lock(workdir, made)  # a second trainer on this workdir stops here
  run = None
  try:
    run = Run(config, workdir, mesh, allow_config_change)
    yield run
  finally:
    if run is not None:
      run.close()
    lock.release()


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


class Run:
  """A training run in its locked workdir (made by `open`). `step`: the checkpoint it resumes
  (None: a new run); `source`: config.init_from's run for a new run; `meta`: what every
  checkpoint saves beside the state (best so far, training time, config, changes)."""

  def __init__(self, config, workdir, mesh, allow_config_change: bool):
    self.config, self.workdir, self.mesh = config, workdir, mesh
    self.done = "open"
    self.ckpts = self.writer = self.training = self.task = self.meta = None
    self.idle = self.mixer_module = self.compile_s = None  # note_model's, compile's
    self.carried = None  # note_model's: the state each layer carries (run_record)
    self.software = None  # note_model's: the code this process runs (provenance)
    self.step, self.change, self.started = _check_run(config, workdir, allow_config_change)
    # init_from, for a new run: checked before the data loads. A resumed run has its own.
    self.source = initialise.find(config, workdir) if self.step is None else None
    # The embedding table has the mask token's row if this run or the one it starts from
    # denoises (lra.training.pretrain).
    self.mask_token = initialise.needs_mask_token(config, self.source, self.started)

  def _check(self, step: str) -> None:
    """Refuses `step` unless the step before it in ORDER was the last one done."""
    before = ORDER[ORDER.index(step) - 1]
    if self.done != before or (step == "steps" and self.training is not None):
      raise OutOfOrder(f"run.{step} after run.{self.done}: a run goes "
                       f"{' -> '.join(ORDER)}, each once (lra/training/run_dir.py says why)")

  def _advance(self, step: str) -> None:
    self._check(step)
    self.done = step

  def note_model(self, model) -> None:
    self._advance("note_model")
    self.idle = models.idle_settings(model)  # valid settings that do nothing at this length
    _warn(list(self.idle))
    self.mixer_module = provenance.mixer_module(self.config.model.name)  # an --import's file
    self.carried = run_record.carried_state(model)
    # Read now, not when the results are written: a checkout that moves on (a commit, a pull)
    # while the run trains must not relabel the code it ran.
    self.software = provenance.software()

  def compile(self, train_step, state, shapes: tasks.Task, sharding) -> None:
    """The memory check: compiles the train step (the one training calls) on the batch's
    shapes; its seconds count as training, as when the first step compiled."""
    self._advance("compile")
    self.compile_s = memory_check.check(self.config, train_step, state, shapes, sharding,
                                        self.step is not None)

  def load_task(self, shapes: tasks.Task) -> tasks.Task:
    """The data, made or read now, once everything before it has been checked."""
    self._advance("load_task")
    self.task = memory_check.same_shapes(tasks.load(self.config), shapes)
    config_checks.check_train_split(self.config, len(self.task.splits["train"]["labels"]))
    per_length.check(self.task)  # the examples' task lengths and chance, where given
    return self.task

  def restore(self, state):
    """The state to train from: the resumed checkpoint's, or the fresh `state` (with
    config.init_from's encoder). The disk's room is checked before Orbax makes its folders."""
    self._advance("restore")
    faults.check_room(self.workdir, state, self.config.keep_checkpoints)
    self.ckpts = Checkpoints(self.workdir, self.config.keep_checkpoints)
    state, self.meta = _restore(self.ckpts, self.step, self.change, state, self.config,
                                self.workdir)
    if self.step is None and self.source is not None:  # a resumed run keeps its own encoder
      state, init = initialise.load(self.source, state, self.mesh)
      # The source run relative to this one ("../run_pretrain"), as results.json keeps paths.
      self.meta["init"] = {**init, "workdir": paths.relative(init["workdir"], self.workdir)}
      _say_once(f"Starting from the encoder of {self.source.workdir} "
                f"({self.source.kind}/{self.source.step})")
    _write_json(self.workdir / "config.json", self.config.to_dict())
    if int(state.step):
      _say_once(f"Resuming from the checkpoint at step {int(state.step)} in {self.workdir}")
    # Drops the rows written after the checkpoint; records the config (TensorBoard, W&B).
    self.writer = MetricWriter(self.workdir, int(state.step), self.config)
    return state

  def steps(self, state, validate):
    """The steps to train from `state`'s (lra.training.periodic.Training.steps); after each,
    the caller gives after_step the new state and the step's metrics."""
    self._check("steps")  # done once the last step is
    self.training = periodic.Training(self.config, self.workdir, self.ckpts, self.meta,
                                      self.writer, int(state.step), self.compile_s, validate)
    yield from self.training.steps()
    self.done = "steps"

  def after_step(self, state, metrics) -> None:
    """The periodic actions after a step: log, validate, save, stop (periodic.standard)."""
    if self.training is None:
      raise OutOfOrder("run.after_step before run.steps")
    self.training.after_step(state, metrics)

  def best(self, state):
    """The best-on-validation state to test (if no copy of it restores: `state`, said)."""
    self._advance("best")
    best, self.best_meta, self.tested = self.ckpts.restore_best(state, self.meta)
    _warn(self.ckpts.notes)
    return best

  def finish(self, state, best, figures: dict[str, Any]) -> dict[str, Any]:
    """results.json: the run's record, the test's `figures` (of `best`; `state` the final
    one), the evaluation's time; written with the last metrics row, and returned."""
    self._advance("finish")
    config, task, meta = self.config, self.task, self.meta
    results = {
        "task": config.task, "model": config.model.name,
        "objective": config.get("objective", "classify"),
        "best_step": self.best_meta["best_step"],
        "train_count": len(task.splits["train"]["labels"]),
        "val_count": len(task.splits["val"]["labels"]),
        "best_val_accuracy": self.best_meta["best_val_accuracy"],
        # The steps trained: config.num_train_steps unless max_train_time_s ended it earlier.
        "num_train_steps": int(state.step), "planned_num_train_steps": config.num_train_steps,
        "stopped_early": self.training.stopped, "train_time_s": meta["train_time_s"],
        # The machine, the code (version, git commit, libraries) and the parameter count.
        **run_record.describe(best, self.software), "config": config.to_dict(),
        # The numbers each layer's mixer carries across positions (Zoology's state size).
        "carried_state": self.carried,
        "data": task.data,  # what made the data (lra.data.record) and any cut of its rows
        "tested_step": int(best.step), "tested_checkpoint": self.tested,
        # Settings changed on resumes, and resumes of a diverged run (check_resume).
        "config_changes": meta.get("config_changes", []),
        "init": meta.get("init"),  # the run whose encoder this one started from (init_from)
        **figures, "evaluation": evaluation.finish(meta, config),
        "mixer_module": self.mixer_module,  # None for a mixer of models/
        "idle_settings": self.idle,  # the tables note them
    }
    final = ("val_masked_accuracy", "val_masked_loss") if config.get(
        "objective") == "denoise" else ("test_accuracy", "test_loss")
    self.writer.write(int(state.step), {k: results[k] for k in final})
    _write_json(self.workdir / "results.json", results)
    return results

  def close(self) -> None:
    if self.training is not None:
      self.training.bar.close()
    if self.writer is not None:
      self.writer.close()
    if self.ckpts is not None:
      self.ckpts.close()
