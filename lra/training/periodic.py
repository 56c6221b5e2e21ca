"""The periodic actions of a training run: what happens after each train step, each at its own
cadence, in one fixed order (as Flax lm1b's periodic_actions and big_vision's itstime).

After each step, `run` asks every action of `standard`, in turn, whether it is due (asked just
before it would run: the time limit can make a step the last, and the actions after it then
act as at the run's last step), and runs it if so. The order is the rule:

  trace       stops the jax.profiler trace after its last step (config.profile_steps)
  time limit  config.max_train_time_s used up: this step becomes the last one
  non-finite  at every write: a NaN or inf stops the run before anything of it is saved
  log         the train metrics summed since the last write (train rows: every log,
              validation and checkpoint step, so a checkpoint never carries sums but a stop's)
  validate    the validation pass, every eval_every steps and at the last
  report      the progress line: train figures, steps/s, ETA, and the validation if any
  best        the validation row, and the best checkpoint when it is the best so far
  save        the resumable checkpoint (training time up to it saved with it)
  time stop   the line saying that the time limit ended the run
  preemption  SIGTERM / Ctrl-C asked for a stop: saves this step (with the train sums not yet
              logged, so a resumed run logs what one uninterrupted run would) and stops
"""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from lra.errors import UserError
from lra.training import (evaluation, optim, preemption, profiling, progress, time_limit,
                          workdir as workdir_lib)


class NonFiniteLossError(UserError):
  """The loss became NaN or infinite; the last good checkpoint is kept."""


class OutOfOrder(RuntimeError):
  """A run's steps used out of their order (lra.training.run_dir): a bug, not a user error."""


@dataclasses.dataclass
class Tick:
  """What the actions see after a train step; `train` and `val` are filled by the actions that
  log and validate, for those after them."""
  done: int  # steps trained (the step just taken is done - 1)
  state: Any
  last: bool  # config.num_train_steps reached, or the time limit ended the run here
  train: dict | None = None
  val: dict | None = None


@dataclasses.dataclass(frozen=True)
class Every:
  """Due every `periods` steps (any of them) and at the run's last step."""
  periods: tuple[int, ...]

  def __call__(self, tick: Tick) -> bool:
    return tick.last or any(tick.done % n == 0 for n in self.periods)


def before_last(tick: Tick) -> bool:
  return not tick.last


@dataclasses.dataclass(frozen=True)
class Action:
  name: str
  due: Callable[[Tick], bool]
  act: Callable[[Tick], None]


def run(actions: list[Action], tick: Tick) -> list[str]:
  """Runs the due actions in their order; returns the names of those that ran."""
  ran = []
  for action in actions:
    if action.due(tick):  # asked in turn: an earlier action may have made this step the last
      action.act(tick)
      ran.append(action.name)
  return ran


def standard(t: Training) -> list[Action]:
  """The actions of every run, in their order (this module's docstring says why)."""
  c = t.config
  writes = Every((c.log_every, c.eval_every, c.checkpoint_every))
  return [
      Action("trace", lambda tick: t.trace.due(tick.done, t.total), t.stop_trace),
      Action("time limit", before_last, t.check_time),
      Action("non-finite", writes, t.check_finite),
      Action("log", writes, t.log),
      Action("validate", Every((c.eval_every,)), t.validate),
      Action("report", Every((c.log_every, c.eval_every)), t.report),
      Action("best", Every((c.eval_every,)), t.note_best),
      Action("save", Every((c.eval_every, c.checkpoint_every)), t.save),
      Action("time stop", lambda tick: t.stopped is not None, t.say_time_stop),
      Action("preemption", before_last, t.stop_if_asked),
  ]


def _bar(config, start: int, total: int):
  """The progress bar. It redraws with \\r: only on a terminal; a log file gets the lines
  of progress.say instead."""
  return tqdm.tqdm(total=total, initial=start, desc=f"{config.task}/{config.model.name}",
                   disable=(not config.progress or jax.process_index() != 0
                            or not sys.stderr.isatty()),
                   mininterval=1.0, dynamic_ncols=True)


class Training:
  """A run's train steps (`steps`, with `after_step` once after each) and what its actions
  share: the run's records (meta, checkpoints, metric writer), the train sums not yet logged,
  the clock of training time and the progress bar. `validate(state, say=...)`: the validation
  pass. `compile_s`: the train step's compile before the data (memory_check), training time
  as when the first step compiled, but not toward the time limit spent by earlier runs."""

  def __init__(self, config, workdir, ckpts, meta: dict, writer, start: int,
               compile_s: float, validate: Callable[..., dict]):
    self.config, self.workdir, self.ckpts, self.meta, self.writer = (config, workdir, ckpts,
                                                                     meta, writer)
    self.validate_split, self.start, self.total = validate, start, config.num_train_steps
    self.bar = _bar(config, start, self.total)
    # Train sums of a log interval cut short by a stop: the resumed run logs what one
    # uninterrupted run would (float32 -> JSON float -> float32 is exact).
    pending = meta.pop("train_sums", None)
    self.sums = None if pending is None else {k: np.float32(v) for k, v in pending.items()}
    self.clock = progress.TrainClock(time.time(), start, config.eval_every)
    self.schedule = optim.learning_rate_schedule(config)  # for logging; built once
    self.run_start = time.time() - meta["train_time_s"] - compile_s  # over resumes
    self.service = preemption.uses_preemption_service()
    self.trace = profiling.Trace(config, workdir, start)
    self.stopped = time_limit.spent(config, start, self.total, meta, self.bar)
    self.actions = standard(self)
    self.step, self.tick = None, None

  def say(self, line: str) -> None:
    progress.say(line, self.bar, self.config)

  def steps(self):
    """The steps to train, from the state's to config.num_train_steps or the step an action
    made the last (the time limit); none if the time limit was spent by the runs resumed."""
    for step in range(self.start, self.total) if self.stopped is None else ():
      self.trace.before_step(step)
      self.step, self.tick = step, None
      yield step
      if self.tick is None:
        raise OutOfOrder(f"step {step} was trained without run.after_step(state, metrics)")
      if self.tick.last:
        break
    self.step = None
    self.bar.close()

  def after_step(self, state, metrics) -> list[str]:
    """Adds the step's metric sums, then runs the actions due (returns their names)."""
    if self.step is None or self.tick is not None:
      raise OutOfOrder("run.after_step is called once after each step that run.steps gives")
    self.sums = metrics if self.sums is None else jax.tree_util.tree_map(jnp.add, self.sums,
                                                                         metrics)
    self.bar.update(1)
    done = self.step + 1
    self.tick = Tick(done, state, last=done == self.total)
    return run(self.actions, self.tick)

  def stop_trace(self, tick: Tick) -> None:
    self.say(self.trace.after_step(tick.done, self.total, tick.state))

  def check_time(self, tick: Tick) -> None:
    # Out of time: this step ends the run as the last step would (logged, validated, saved),
    # and the best checkpoint is tested. At least one step is trained per start.
    self.stopped = time_limit.stop(self.config, self.run_start, tick.done, self.total)
    tick.last = self.stopped is not None

  def check_finite(self, tick: Tick) -> None:
    if self.sums is not None and float(self.sums["finite"]) < float(self.sums["steps"]):
      raise NonFiniteLossError(workdir_lib.diverged(self.workdir, tick.done,
                                                    self.ckpts.latest.latest_step()))

  def log(self, tick: Tick) -> None:
    tick.train = progress.log_train(self.writer, self.bar, self.sums, tick.done, self.clock,
                                    self.schedule)
    self.sums = None

  def validate(self, tick: Tick) -> None:
    tick.val = self.validate_split(tick.state, say=self.say)
    self.clock.validated(tick.val["seconds"])
    evaluation.note(self.meta, "validation", tick.val, "val")

  def report(self, tick: Tick) -> None:
    self.say(progress.record(tick.done, self.total, tick.train, tick.val, self.clock))

  def note_best(self, tick: Tick) -> None:
    """Writes the validation and saves the best checkpoint when it is the best so far."""
    self.writer.write(tick.done, {"val_loss": tick.val["loss"],
                                  "val_accuracy": tick.val["accuracy"]})
    if tick.val["accuracy"] > self.meta["best_val_accuracy"]:
      self.meta.update(best_val_accuracy=tick.val["accuracy"], best_step=tick.done)
      if self.ckpts.best.latest_step() != tick.done:  # a resumed run may reach it again
        self.ckpts.save_best(tick.done, tick.state, self.meta)

  def save(self, tick: Tick) -> None:
    self.meta["train_time_s"] = time.time() - self.run_start
    self.ckpts.save_latest(tick.done, tick.state, self.meta)
    self.clock.resume(time.time(), self.bar)  # steps/s counts training alone

  def say_time_stop(self, tick: Tick) -> None:
    self.say(progress.time_stop_line(tick.done, self.total, self.config))

  def stop_if_asked(self, tick: Tick) -> None:
    """On a stop request: saves the resumable checkpoint of this step (unless `save` just did)
    and raises preemption.Preempted."""
    if not preemption.stop_requested(tick.done, self.service):
      return
    self.check_finite(tick)  # never a checkpoint of a broken state
    if self.ckpts.latest.latest_step() != tick.done:
      host = None if self.sums is None else {k: float(v) for k, v in
                                             jax.device_get(self.sums).items()}
      self.ckpts.save_latest(tick.done, tick.state, {
          **self.meta, "train_time_s": time.time() - self.run_start, "train_sums": host})
    signum = preemption.stop_signal()
    raise preemption.Preempted(
        f"stopped by {signal.Signals(signum).name} after step {tick.done}/{self.total}; "
        f"checkpoint saved in {self.workdir}/checkpoints", signum)
