"""SIGTERM (a preemption notice) mid-run: the step finishes, a checkpoint is saved, one line
says how to resume, and the resumed run ends exactly like an uninterrupted one."""
import json
import os
import re
import signal

import pytest

from tests import commands
from tests.test_cli import TINY

STEPS = 300  # far more than run before the signal lands (a few ms a step)


def _command(listops_dir, workdir):
  # log_every=3: the stop most likely falls inside a log interval, whose train sums the
  # checkpoint must carry. checkpoint_every > STEPS: only the stop saves before step 100.
  return ["train.py", "--config=configs/listops.py:transformer,cpu",
          f"--workdir={workdir}", f"--config.data.data_dir={listops_dir}", *TINY,
          f"--config.num_train_steps={STEPS}", "--config.log_every=3",
          "--config.eval_every=100", "--config.checkpoint_every=1000"]


def _records(workdir):
  """metrics.jsonl without the timings, which differ from run to run."""
  with open(workdir / "metrics.jsonl") as f:
    records = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if k not in ("steps_per_s", "time")} for r in records]


@pytest.mark.slow  # heavy; `pytest -m slow`
@pytest.mark.commands
def test_sigterm_saves_and_the_resumed_run_equals_an_uninterrupted_one(listops_dir, tmp_path):
  straight, stopped = tmp_path / "straight", tmp_path / "stopped"
  commands.run(*_command(listops_dir, straight))

  proc = commands.start(*_command(listops_dir, stopped))
  first_log = proc.stdout.readline()  # training has started: step 3 is done
  if first_log.startswith("warning: config.num_train_steps="):  # checkpoint_every > STEPS
    first_log = proc.stdout.readline()
  assert first_log.startswith("step 3/"), first_log + proc.stderr.read()[-3000:]
  proc.send_signal(signal.SIGTERM)
  _, err = commands.finish(proc, expect=128 + signal.SIGTERM)
  assert "Traceback" not in err, err[-3000:]
  lines = [l for l in err.splitlines() if l.startswith("error:")]
  assert len(lines) == 1, err[-3000:]
  match = re.match(r"error: stopped by SIGTERM after step (\d+)/300; checkpoint saved in "
                   r"(\S+)/checkpoints; to resume, run the same command again: python "
                   r"train.py ", lines[0])
  assert match and match.group(2) == str(stopped), lines[0]
  step = int(match.group(1))
  assert 3 <= step < 100, lines[0]  # before the first evaluation's checkpoint
  assert sorted(os.listdir(stopped / "checkpoints")) == [str(step)]
  assert not (stopped / "results.json").exists()

  resumed = commands.run(*_command(listops_dir, stopped))
  assert f"Resuming from the checkpoint at step {step}" in resumed.stdout
  a = json.loads((straight / "results.json").read_text())
  b = json.loads((stopped / "results.json").read_text())
  for key in ("test_accuracy", "test_loss", "best_step", "best_val_accuracy",
              "last_step_test_accuracy"):
    assert a[key] == b[key], key
  # Train records include the interval the stop cut short; then validation and test.
  assert _records(stopped) == _records(straight)
