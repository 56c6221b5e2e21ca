"""The periodic actions after each train step (lra.training.periodic): their order, their
cadence, the time limit on a fake clock, a stop request, and a loop that skips after_step.
No model: the run's records are fakes that note what was written and saved."""
import signal
import types

import numpy as np
import pytest

from lra import paths
from lra.training import periodic, preemption, time_limit
from tests.tiny import tiny_config


class _Manager:
  def __init__(self):
    self.steps = []

  def latest_step(self):
    return self.steps[-1] if self.steps else None


class _Checkpoints:
  """Checkpoints' interface, noting (kind, step, meta) of each save."""

  def __init__(self):
    self.latest, self.best, self.saved = _Manager(), _Manager(), []

  def save_latest(self, step, state, meta):
    self.latest.steps.append(step)
    self.saved.append(("latest", step, dict(meta)))

  def save_best(self, step, state, meta):
    self.best.steps.append(step)
    self.saved.append(("best", step, dict(meta)))


class _Writer:
  def __init__(self):
    self.rows = []

  def write(self, step, metrics):
    self.rows.append((step, "val" if "val_loss" in metrics else "train"))


def _metrics(finite=1.0):
  """One step's sums, as the train step returns them."""
  return {"loss_sum": np.float32(2.0), "correct": np.float32(1.0), "count": np.float32(2.0),
          "finite": np.float32(finite), "steps": np.float32(1.0)}


def _training(tmp_path, accuracies=(0.5, 0.7, 0.6), **settings):
  """A Training of 7 steps: log every 2, validate every 3, checkpoint every 4; validations
  give `accuracies` in turn."""
  config = tiny_config(str(tmp_path), num_train_steps=7, log_every=2, eval_every=3,
                       checkpoint_every=4, **settings)
  meta = {"best_val_accuracy": -1.0, "best_step": None, "train_time_s": 0.0}
  found = iter(accuracies)

  def validate(state, say):
    return {"loss": 1.0, "accuracy": next(found), "seconds": 0.0, "compile_s": 0.0,
            "examples": 4, "available": 4}

  return periodic.Training(config, paths.resolve(str(tmp_path)), _Checkpoints(), meta,
                           _Writer(), 0, 0.0, validate)


def _train(training, metrics=_metrics):
  """The trainer's loop without a model: the state is the step count."""
  ran = {}
  for step in training.steps():
    ran[step + 1] = training.after_step(step + 1, metrics())
  return ran


def test_every_is_due_at_each_period_and_at_the_last_step():
  due = periodic.Every((2, 3))
  tick = lambda done, last=False: periodic.Tick(done, None, last)
  assert [done for done in range(1, 8) if due(tick(done))] == [2, 3, 4, 6]
  assert due(tick(7, last=True)) and not periodic.before_last(tick(7, last=True))


def test_actions_run_in_their_order_at_their_cadence(tmp_path):
  training = _training(tmp_path)
  ran = _train(training)
  write = ["non-finite", "log"]
  assert ran == {
      1: ["time limit", "preemption"],
      2: ["time limit", *write, "report", "preemption"],
      3: ["time limit", *write, "validate", "report", "best", "save", "preemption"],
      4: ["time limit", *write, "report", "save", "preemption"],
      5: ["time limit", "preemption"],
      6: ["time limit", *write, "validate", "report", "best", "save", "preemption"],
      # The last step: written, validated and saved whatever the periods; no stop to ask for.
      7: [*write, "validate", "report", "best", "save"],
  }
  # Train rows before the validation's; the best checkpoint only when validation improved.
  assert training.writer.rows == [(2, "train"), (3, "train"), (3, "val"), (4, "train"),
                                  (6, "train"), (6, "val"), (7, "train"), (7, "val")]
  assert [(kind, step) for kind, step, _ in training.ckpts.saved] == [
      ("best", 3), ("latest", 3), ("latest", 4), ("best", 6), ("latest", 6), ("latest", 7)]
  assert training.meta["best_step"] == 6 and training.stopped is None


def test_the_time_limit_on_a_fake_clock_makes_that_step_the_last(tmp_path, monkeypatch):
  now = [1000.0]
  clock = types.SimpleNamespace(time=lambda: now[0])
  monkeypatch.setattr(periodic, "time", clock)  # the run's start, its saves
  monkeypatch.setattr(time_limit, "time", clock)  # the limit's reading
  training = _training(tmp_path, max_train_time_s=4.5)

  def one_second_a_step():
    now[0] += 1.0
    return _metrics()

  ran = _train(training, one_second_a_step)
  assert list(ran) == [1, 2, 3, 4, 5]  # 5 s > 4.5 s: no sixth step
  assert ran[5] == ["time limit", "non-finite", "log", "validate", "report", "best", "save",
                    "time stop"]  # as at the last step, then the line that says why
  assert training.stopped == {"by": "max_train_time_s", "max_train_time_s": 4.5, "step": 5,
                              "planned_num_train_steps": 7}
  assert training.ckpts.saved[-1][:2] == ("latest", 5)
  assert training.ckpts.saved[-1][2]["train_time_s"] == 5.0


def test_a_stop_request_saves_the_unlogged_sums_and_stops(tmp_path, monkeypatch):
  training = _training(tmp_path)
  steps = training.steps()
  for step in (0, 1, 2):  # logged at 2 and 3; the stop comes after step 5
    next(steps)
    training.after_step(step + 1, _metrics())
  next(steps)
  training.after_step(4, _metrics())
  next(steps)
  monkeypatch.setattr(preemption, "_stop_signal", [signal.SIGTERM])
  with pytest.raises(preemption.Preempted, match="stopped by SIGTERM after step 5/7"):
    training.after_step(5, _metrics())
  kind, step, meta = training.ckpts.saved[-1]
  assert (kind, step) == ("latest", 5)
  assert meta["train_sums"] == {"loss_sum": 2.0, "correct": 1.0, "count": 2.0, "finite": 1.0,
                                "steps": 1.0}  # step 5's alone: step 4 was logged


def test_a_non_finite_step_stops_the_run_before_its_save(tmp_path):
  training = _training(tmp_path)
  with pytest.raises(periodic.NonFiniteLossError, match="by step 4"):
    _train(training, lambda: _metrics(finite=0.0 if training.step == 3 else 1.0))
  assert [(kind, step) for kind, step, _ in training.ckpts.saved] == [("best", 3),
                                                                       ("latest", 3)]


def test_a_loop_that_skips_after_step_is_refused(tmp_path):
  training = _training(tmp_path)
  steps = training.steps()
  next(steps)
  with pytest.raises(periodic.OutOfOrder, match="without run.after_step"):
    next(steps)
  training = _training(tmp_path)
  with pytest.raises(periodic.OutOfOrder, match="once after each step"):
    training.after_step(1, _metrics())  # before any step
