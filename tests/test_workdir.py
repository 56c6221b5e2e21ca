"""A workdir belongs to one run: a resume with settings that change the result is refused
(unless opted into, and then recorded), a shorter run keeps the finished one's results, a
second trainer stops at once, and a diverged run says what helps."""
import json
import os
import shutil
import signal

import jax.numpy as jnp
import pytest

from lra.errors import UserError
from lra.training import optim, trainer, workdir as workdir_lib
from tests import commands
from tests.test_cli import TINY
from tests.test_damaged_checkpoint import STEPS, finished_run
from tests.tiny import tiny_config


@pytest.fixture
def finished(listops_dir, tmp_path_factory):
  """The workdir of a finished 8-step tiny run (keep_checkpoints=3), copied by each test."""
  return finished_run(listops_dir, tmp_path_factory)[0]


def _snapshot(workdir):
  """Every file the run made (checkpoint folders by name), with its bytes."""
  out = {}
  for name in ("config.json", "results.json", "metrics.jsonl"):
    out[name] = (workdir / name).read_bytes()
  out["checkpoints"] = sorted(os.listdir(workdir / "checkpoints"))
  return out


@pytest.mark.parametrize("model, overrides, difference", [
    ("transformer", {"batch_size": 32, "eval_batch_size": 32}, "batch_size 16 -> 32"),
    ("transformer", {"learning_rate": 0.01}, "learning_rate 0.05 -> 0.01"),
])
def test_resume_with_settings_that_change_the_result_is_refused(
    listops_dir, finished, tmp_path, model, overrides, difference):
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)
  before = _snapshot(workdir)
  config = tiny_config(listops_dir, model, **{**STEPS, "num_train_steps": 10, **overrides})
  with pytest.raises(UserError) as error:
    trainer.train_and_evaluate(config, str(workdir))
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(f"{workdir} holds a run that does not fit this config "
                            f"({workdir}/config.json holds its settings): "), message
  assert difference in message and "num_train_steps" not in message, message
  assert "new --workdir" in message and "--allow_config_change" in message, message
  assert _snapshot(workdir) == before  # config.json, results, checkpoints: as they were


@pytest.mark.parametrize("allow", [False, True])
def test_another_model_is_never_resumed_not_even_when_opted_in(listops_dir, finished, tmp_path,
                                                               allow):
  """Its parameter shapes are the Transformer's: the checkpoints would restore, so no flag may
  let a Linear Transformer go on from them."""
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)
  before = _snapshot(workdir)
  config = tiny_config(listops_dir, "linear_transformer", **{**STEPS, "num_train_steps": 10})
  with pytest.raises(UserError) as error:
    trainer.train_and_evaluate(config, str(workdir), allow_config_change=allow)
  assert str(error.value) == (
      f"{workdir} holds the run of model.name 'transformer' (see {workdir}/config.json), this "
      f"config asks for model.name 'linear_transformer': its checkpoints cannot start a run of "
      f"another model or task; pick a new --workdir")
  assert _snapshot(workdir) == before


def test_opted_in_and_observing_changes_are_recorded(listops_dir, finished, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)
  # Another cadence only observes the run (allowed); another learning rate needs the opt-in.
  config = tiny_config(listops_dir, **{**STEPS, "eval_every": 2, "learning_rate": 0.01})
  results = trainer.train_and_evaluate(config, str(workdir), allow_config_change=True)
  assert results["config_changes"] == [{
      "step": 8, "after_divergence": [], "--allow_config_change": True,
      "changes": {"eval_every": [4, 2], "learning_rate": [0.05, 0.01]}}]
  saved = json.loads((workdir / "results.json").read_text())
  assert saved["config_changes"] == results["config_changes"]
  assert json.loads((workdir / "config.json").read_text())["learning_rate"] == 0.01


def test_a_shorter_run_keeps_the_finished_runs_results(listops_dir, finished, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)
  before = _snapshot(workdir)
  with pytest.raises(UserError, match=f"{workdir} holds a run trained to step 8, beyond "
                                      f"config.num_train_steps=6; it is kept as it is"):
    trainer.train_and_evaluate(tiny_config(listops_dir, **{**STEPS, "num_train_steps": 6}),
                               str(workdir))
  assert _snapshot(workdir) == before


def test_only_the_cosine_schedule_makes_num_train_steps_change_the_result():
  assert not workdir_lib.changes_result("num_train_steps", "rsqrt")
  assert workdir_lib.changes_result("num_train_steps", "cosine")
  assert not workdir_lib.changes_result("eval_every", "cosine")
  assert workdir_lib.changes_result("model.attention.implementation", "rsqrt")


def test_a_second_trainer_on_a_workdir_stops_at_once(listops_dir, tmp_path):
  """While one trainer holds the workdir, another one stops before it reads or writes
  anything there."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  lock = workdir_lib.Lock(workdir)
  try:
    with pytest.raises(UserError, match=f"another trainer is running in {workdir} "
                                        f"\\(it holds {workdir}/.lock\\)"):
      trainer.train_and_evaluate(tiny_config(listops_dir), str(workdir))
  finally:
    lock.release()
  assert os.listdir(workdir) == [".lock"]  # nothing read or written


@pytest.mark.slow
@pytest.mark.commands
def test_a_second_train_py_on_a_workdir_is_one_line(listops_dir, tmp_path):
  """One subprocess trains; a second one on its workdir exits with one line, and the first
  goes on undisturbed until it is stopped (a run far longer than the test, so it is surely
  still training when the second one starts)."""
  workdir = tmp_path / "run"
  command = ["train.py", "--config=configs/listops.py:transformer,cpu",
             f"--workdir={workdir}", f"--config.data.data_dir={listops_dir}", *TINY,
             "--config.num_train_steps=1000000", "--config.eval_every=1000000",
             "--config.checkpoint_every=1000000", "--config.log_every=1"]
  first = commands.start(*command)
  try:
    line = first.stdout.readline()  # training has started
    if line.startswith("warning: config.num_train_steps="):  # eval_every = num_train_steps
      line = first.stdout.readline()
    assert line.startswith("step 1/"), line + first.stderr.read()[-3000:]
    second = commands.run(*command, expect=1)
    assert first.poll() is None, "the first run ended before the second one started"
  finally:
    first.send_signal(signal.SIGTERM)  # finishes its step, saves, exits 143
    out, err = commands.finish(first, expect=None)  # its exit code is checked below
  assert second.stderr.splitlines() == [
      f"error: another trainer is running in {workdir} (it holds {workdir}/.lock); wait for "
      f"it to end, or use another --workdir"], second.stderr[-3000:]
  assert first.returncode == 128 + signal.SIGTERM, err[-3000:]
  assert err.splitlines()[-1].startswith("error: stopped by SIGTERM after step "), err[-3000:]
  assert os.listdir(workdir / "checkpoints")  # the first run's own save, undisturbed


def _explodes_at(monkeypatch, bad_step):
  """The learning rate becomes infinite from `bad_step` on (the loss follows)."""
  real = optim.learning_rate_schedule

  def schedule(config):
    base = real(config)
    return lambda step: jnp.where(step >= bad_step, jnp.inf, base(step))

  monkeypatch.setattr(optim, "learning_rate_schedule", schedule)
  return real


def test_a_checkpoint_that_led_to_a_divergence_is_not_resumed_silently(listops_dir, finished,
                                                                       tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)
  # As the trainer records it when step 9 of a 10-step run turns NaN after checkpoint 8.
  workdir_lib.diverged(workdir, 9, 8)
  config = tiny_config(listops_dir, **{**STEPS, "num_train_steps": 10})
  with pytest.raises(UserError) as error:
    trainer.train_and_evaluate(config, str(workdir))
  assert str(error.value) == (
      f"{workdir} holds a run that diverged: its checkpoint at step 8 led to NaN or inf by "
      f"step 9 (see {workdir}/diverged.json). Use a new --workdir, or add "
      f"--allow_config_change to go on with this run anyway (recorded in its results.json)")


@pytest.mark.slow
def test_a_diverged_run_says_what_helps_and_is_not_resumed_into_the_same_divergence(
    listops_dir, tmp_path, monkeypatch):
  workdir = tmp_path / "run"
  config = tiny_config(listops_dir, num_train_steps=8, log_every=1, checkpoint_every=2)
  real = _explodes_at(monkeypatch, 3)
  with pytest.raises(trainer.NonFiniteLossError) as error:
    trainer.train_and_evaluate(config, str(workdir))
  assert str(error.value) == (
      f"the training loss or parameters became NaN or infinite by step 4; the checkpoint "
      f"saved before it (step 2) is kept but may already be ruined (recorded in "
      f"{workdir}/diverged.json). Train again in a new --workdir with a lower "
      f"config.learning_rate or a config.grad_clip_norm")
  monkeypatch.setattr(optim, "learning_rate_schedule", real)
  # The same command again would resume step 2, which led there: refused, with the way on.
  with pytest.raises(UserError, match=r"holds a run that diverged: its checkpoint at step 2 "
                                      r"led to NaN or inf by step 4 .*new --workdir"):
    trainer.train_and_evaluate(config, str(workdir))
  assert not (workdir / "results.json").exists()


def test_a_divergence_before_any_checkpoint_says_none_was_saved(tmp_path):
  """The message the trainer raises (_check_finite) when no checkpoint was saved yet."""
  message = workdir_lib.diverged(tmp_path, 1, None)
  assert message.startswith("the training loss or parameters became NaN or infinite by step "
                            "1; no checkpoint was saved before it (recorded in"), message
  assert "None" not in message
  assert json.loads((tmp_path / "diverged.json").read_text()) == [
      {"step": 1, "last_checkpoint": None}]
