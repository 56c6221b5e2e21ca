"""train.py's one-line refusals and warnings: a near-miss override key names the key it
meant, no JAX backend line before a message, a run shorter than its warmup or cadences says
which settings, and metrics.jsonl without a checkpoint is moved aside in one line.

(The refusal to resume another model's checkpoints is in tests/test_workdir.py.)"""
import json
import logging

import pytest

from lra.commands import train as train_command
from lra.configs import listops as listops_config
from lra.training import config_checks
from tests import commands
from tests.commands import error_line
from tests.test_cli import TINY


# ------------------------------------------------------------------- near-miss override keys


@pytest.mark.parametrize("flag, suggestion", [
    ("--config.learning_rat=0.1", "did you mean 'learning_rate'?"),
    ("--config.model.num_layer=3", "did you mean 'num_layers'?"),
    ("--config.model.attention.query_chunks=128", "did you mean 'query_chunk'?"),
])
@pytest.mark.commands
def test_a_near_miss_key_is_one_line_with_the_suggestion(tmp_path, flag, suggestion):
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}", flag, expect=2)
  line = error_line(proc)
  assert len(proc.stderr.splitlines()) == 1, proc.stderr
  assert flag.split("=")[0].split(".")[-1] in line and suggestion in line, line
  assert not (tmp_path / "run").exists()


# ------------------------------------------------------------ JAX's backend line is quiet


@pytest.mark.commands
def test_no_backend_info_line_before_a_message(tmp_path):
  """Without JAX_PLATFORMS JAX tries every platform; the one it cannot start (libtpu) used to
  print an INFO line before every message."""
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}",
                      f"--config.data.data_dir={tmp_path / 'none'}",
                      "--config.data.generate_if_missing=False", expect=1,
                      env={"JAX_PLATFORMS": None, "XLA_FLAGS": None})
  assert proc.stderr.splitlines() == [error_line(proc)], proc.stderr
  assert "ListOps data not found" in proc.stderr


def test_the_backend_filter_drops_only_that_info_line():
  def passes(level, message):
    return train_command._NoBackendProbe().filter(
        logging.LogRecord("jax._src.xla_bridge", level, "x.py", 1, message, (), None))

  assert not passes(logging.INFO, "Unable to initialize backend '%s': %s")
  assert passes(logging.WARNING, "Unable to initialize backend 'cuda': plugin found, failed")
  assert passes(logging.WARNING, "An NVIDIA GPU may be present on this machine, but ...")
  assert passes(logging.INFO, "other news")


# ------------------------------------------- a run cut short; metrics without a checkpoint


def test_a_shortened_run_is_one_warning_line_naming_the_settings():
  config = listops_config.get_config("transformer")  # 5,000 steps, warmup 1,000, evals 500
  config.num_train_steps = 30
  line = config_checks.short_run_warning(config)
  assert line == (
      "config.num_train_steps=30 is at or below config.warmup_steps=1000 (the learning rate "
      "never reaches its peak), config.eval_every=500 (validated only at the last step), "
      "config.checkpoint_every=500 (no checkpoint to resume from before the end), "
      "config.log_every=100 (one log line, at the end); for a run this short give e.g. "
      "--config.warmup_steps=3 --config.eval_every=7 --config.checkpoint_every=7 "
      "--config.log_every=1")
  config.num_train_steps = 5000
  assert config_checks.short_run_warning(config) is None
  # A cadence equal to the length is a choice, and a value already at the suggestion is not
  # suggested again.
  config.num_train_steps = config.eval_every = config.checkpoint_every = config.log_every = 30
  config.warmup_steps = 3
  assert config_checks.short_run_warning(config) is None
  config.num_train_steps = config.warmup_steps = config.eval_every = 1
  config.checkpoint_every = config.log_every = 1
  assert config_checks.short_run_warning(config) is None
  config.warmup_steps = 2
  assert config_checks.short_run_warning(config).endswith("give e.g. --config.warmup_steps=1")
  assert config_checks.short_run_warning(listops_config.get_config("transformer,cpu")) is None


@pytest.mark.commands
def test_metrics_without_a_checkpoint_are_moved_aside_with_one_line(listops_dir, tmp_path):
  """A workdir whose checkpoints were deleted: training starts from step 0 and says so, the
  old rows go to metrics.old-1.jsonl; the same run (4 steps, warmup 200) warns that it is
  shorter than its warmup."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  old = '{"step": 900, "kind": "train", "train_loss": 1.5}\n'
  (workdir / "metrics.jsonl").write_text(old)
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={workdir}", f"--config.data.data_dir={listops_dir}", *TINY)
  lines = proc.stdout.splitlines()
  warnings = [l for l in lines if l.startswith("warning:")]
  assert warnings == [
      "warning: config.num_train_steps=4 is at or below config.warmup_steps=200 (the learning "
      "rate never reaches its peak); for a run this short give e.g. --config.warmup_steps=1",
      f"warning: found {workdir}/metrics.jsonl but no checkpoint: training starts from step 0; "
      f"the earlier metrics are moved to {workdir}/metrics.old-1.jsonl (and TensorBoard hides "
      f"their events)"], lines
  assert (workdir / "metrics.old-1.jsonl").read_text() == old
  steps = [json.loads(l)["step"] for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert 900 not in steps and max(steps) == 4

