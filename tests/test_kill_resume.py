"""A training process killed with SIGKILL and started again ends like an uninterrupted one."""
import json
import signal
import subprocess
import time

import pytest

from tests import commands
from tests.test_cli import TINY


@pytest.mark.slow
@pytest.mark.commands
def test_sigkilled_run_resumes_to_the_same_result(listops_dir, tmp_path):
  settings = [*TINY, "--config.num_train_steps=150", "--config.checkpoint_every=10",
              "--config.eval_every=50"]

  def command(workdir):
    return ["train.py", "--config=configs/listops.py:transformer,cpu",
            f"--workdir={workdir}", f"--config.data.data_dir={listops_dir}", *settings]

  straight, killed = tmp_path / "straight", tmp_path / "killed"
  commands.run(*command(straight))
  proc = commands.start(*command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while not (killed / "checkpoints" / "20").exists() and time.time() < deadline:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (killed / "results.json").exists(), "the run ended before it could be killed"
  resumed = commands.run(*command(killed))
  assert "Resuming from the checkpoint" in resumed.stdout
  a = json.loads((straight / "results.json").read_text())
  b = json.loads((killed / "results.json").read_text())
  for key in ("test_accuracy", "test_loss", "best_step", "best_val_accuracy",
              "last_step_test_accuracy"):
    assert a[key] == b[key], key
