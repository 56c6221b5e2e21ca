"""scripts/accelerator_run.py: the dry run end to end (CPU, tiny sizes), and its refusals.

The dry run is the real script's code path at tiny sizes: every part in its own process, the
clock checked before each part, the same files. It takes about 1.5 minutes on 2 cores.
"""
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "accelerator_run.py")
EXPECTED = ("env.json", "attention.json", "speed.md", "speed.json", "training.json",
            "summary.md", "log.txt")


def _run(*args, timeout=170):
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # no fake devices: the script runs one CPU device, as a user would
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.slow  # about a minute; CI runs it as its own step (.ci/run)
def test_dry_run_writes_every_file(tmp_path):
  out = tmp_path / "out"
  start = time.time()
  proc = _run("--dry_run", f"--out={out}", f"--work={tmp_path / 'work'}")
  seconds = time.time() - start
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  assert seconds < 120, f"the dry run took {seconds:.0f} s"
  names = sorted(os.listdir(out))
  assert len(names) <= 8 and set(EXPECTED) <= set(names), names

  env = json.loads((out / "env.json").read_text())
  assert env["platform"] == "cpu" and env["dry_run"] is True and env["versions"]["jax"]

  attention = json.loads((out / "attention.json").read_text())
  pairs = {p["pair"]: p for p in attention["pairs"]}
  for pair in ("dense vs reference_f32", "chunked vs dense", "chunked vs reference_f32"):
    assert pairs[pair]["pass"] is True, pairs[pair]
    assert set(pairs[pair]["errors"]) == {"output", "dq", "dk", "dv"}
  assert pairs["cudnn vs dense"]["pass"] is None  # cuDNN needs a GPU: recorded as skipped
  assert "skipped" in attention["implementations"]["cudnn"]["status"]
  assert attention["pass"] is True

  training = json.loads((out / "training.json").read_text())
  assert training["dry_run"] is True
  listops = training["cells"][0]
  assert listops["cell"] == "listops_transformer" and listops["status"] == "finished"
  assert 0.0 <= listops["test_accuracy"] <= 100.0 and listops["paper_test_accuracy"] == 36.37

  speed = json.loads((out / "speed.json").read_text())
  assert speed["rows"] and speed["rows"][0]["model"] == "transformer"
  measured = {(r["model"], r["length"]) for r in speed["rows"]}
  skipped = {(s["model"], s["length"]) for s in speed["skipped"]}
  assert len(measured | skipped) == 4 and not measured & skipped  # each cell: done or named
  assert "Transformer" in (out / "speed.md").read_text()

  summary = (out / "summary.md").read_text()
  assert summary.startswith("# Accelerator run on cpu: DRY RUN")
  assert "Device: **cpu**" in summary and "Time budget" in summary


def test_bad_out_is_one_line(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  proc = _run("--dry_run", f"--out={a_file}", timeout=60)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
      f"error: --out={a_file} is a file, not a folder; name a folder for the results"]
  (tmp_path / "busy").mkdir()
  (tmp_path / "busy" / "mine.txt").write_text("x")
  proc = _run("--dry_run", f"--out={tmp_path / 'busy'}", timeout=60)
  assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
  assert "holds other files (mine.txt)" in proc.stderr
