"""Two processes joined by jax.distributed (CPU collectives) train exactly like one."""
import json
import os
import socket
import subprocess

import pytest
import jax
import numpy as np

from lra.data import tasks
from lra.training import trainer
from lra.training.checkpoint import Checkpoints
from tests import commands
from tests.tiny import tiny_config


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _params(workdir, config):
  task = tasks.load(config)
  like = trainer.create_state(trainer.build_model(config, task), task, config,
                              trainer.make_mesh())
  ckpts = Checkpoints(workdir, 2)
  state, _ = ckpts.restore_latest(like)
  ckpts.close()
  return jax.device_get(state.params)


@pytest.mark.slow  # heavy; `pytest -m slow`
@pytest.mark.commands
@pytest.mark.sharding
def test_two_processes_equal_one(listops_dir, tmp_path):
  config = tiny_config(listops_dir)
  single = trainer.train_and_evaluate(config, str(tmp_path / "single"),
                                      devices=jax.devices()[:4])

  port, workdir = _free_port(), str(tmp_path / "multi")
  # Each worker gives itself 2 devices (tests/multiprocess_worker.py).
  procs = [commands.start("-m", "tests.multiprocess_worker", str(i), "2", str(port), listops_dir,
                          workdir, stderr=subprocess.STDOUT) for i in range(2)]
  for p in procs:
    commands.finish(p, timeout=300)

  with open(os.path.join(workdir, "results.json")) as f:
    multi = json.load(f)
  assert multi["hardware"]["process_count"] == 2 and multi["hardware"]["device_count"] == 4
  assert multi["test_count"] == single["test_count"]
  np.testing.assert_allclose(multi["test_loss"], single["test_loss"], rtol=1e-5)
  assert multi["best_step"] == single["best_step"]
  a, b = _params(workdir, config), _params(str(tmp_path / "single"), config)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
