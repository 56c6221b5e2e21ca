"""Stored-metric regression: rerun a committed quick run and get its accuracy exactly.

The runs are deterministic (fixed seeds, generated data), so a change that alters training
(initialisation, data order, the optimizer, a mixer's numerics) changes these figures. The
stored figures come from results/ (made by `python -m lra.leaderboard ... --preset=cpu` and
scripts/mixer_table.py on the 2-core development VM); XLA's CPU code may round differently on
another CPU family, so a failure there names both machines.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
STORED = ROOT / "results" / "quick_listops" / "transformer" / "results.json"


@pytest.mark.slow
def test_quick_listops_transformer_reproduces_the_stored_accuracy(tmp_path):
  stored = json.loads(STORED.read_text())
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one device, as stored
  workdir = tmp_path / "run"
  subprocess.run([sys.executable, "train.py", "--config=configs/listops.py:transformer,cpu",
                  f"--workdir={workdir}", f"--config.data.data_dir={tmp_path / 'data'}"],
                 cwd=ROOT, env=env, check=True, capture_output=True, timeout=1800)
  result = json.loads((workdir / "results.json").read_text())
  machines = f"stored on {stored['hardware']}, rerun on {result['hardware']}"
  for key in ("test_accuracy", "test_loss", "best_step", "best_val_accuracy",
              "last_step_test_accuracy"):
    assert result[key] == stored[key], f"{key}: {result[key]!r} != stored {stored[key]!r} " \
        f"({machines})"
