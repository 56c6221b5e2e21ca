"""`python -m lra.commands.accelerator`: the dry run end to end (CPU, tiny sizes), and its
refusals.

The dry run is the real run's code path at tiny sizes: every part in its own process, the
clock checked before each part, the same files; its training cells end by their time limit
and by the clock (then tested), and one speed cell runs out of memory. It takes about 1.5
minutes on 2 cores.
"""
import json
import os
import time

import pytest

from tests import commands
from tests.commands import ROOT

MODULE = "lra.commands.accelerator"
PROGRAM_COST = os.path.join(ROOT, "scripts", "program_cost.py")
EXPECTED = ("env.json", "attention.json", "speed.md", "speed.json", "training.json",
            "summary.md", "log.txt", "tails.txt")


def _run(*args, timeout=170):
  """`python -m lra.commands.accelerator` by tests/commands.py: one CPU device, as a user
  would have; the test checks the exit code."""
  return commands.run("-m", MODULE, *args, timeout=timeout, expect=None)


@pytest.mark.slow  # about 1.5 minutes; CI runs it as its own step (.ci/run)
@pytest.mark.commands
def test_dry_run_writes_every_file(tmp_path):
  out = tmp_path / "out"
  start = time.time()
  proc = _run("--dry_run", "--fast_attention", f"--out={out}", f"--work={tmp_path / 'work'}",
              timeout=300)
  seconds = time.time() - start
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  assert seconds < 215, f"the dry run took {seconds:.0f} s (its budget is 190 s)"
  assert sorted(os.listdir(out)) == sorted(EXPECTED)

  env = json.loads((out / "env.json").read_text())
  assert env["platform"] == "cpu" and env["dry_run"] is True and env["versions"]["jax"]

  attention = json.loads((out / "attention.json").read_text())
  assert [c["shape"]["length"] for c in attention["cases"]] == [96, 77]  # 77: no tile multiple
  for case in attention["cases"]:
    pairs = {p["pair"]: p for p in case["pairs"]}
    for pair in ("dense vs reference_f32", "chunked vs dense", "chunked vs reference_f32"):
      assert pairs[pair]["pass"] is True, pairs[pair]
      assert set(pairs[pair]["errors"]) == {"output", "dq", "dk", "dv"}
    assert pairs["cudnn vs dense"]["pass"] is None  # cuDNN needs a GPU: recorded as skipped
    assert "skipped" in case["implementations"]["cudnn"]["status"]
  model = attention["model_check"]  # the trainer's loss and step, fused (here chunked) vs dense
  assert model["status"] == "ok" and model["implementation"] == "chunked", model
  assert model["tokens"] == 77 and len(model["step_losses"]["chunked"]) == 3
  assert model["pass"] is True and attention["pass"] is True

  training = json.loads((out / "training.json").read_text())
  assert training["dry_run"] is True
  listops, performer = training["cells"]
  # Ended by its time limit with a test accuracy, the plan from the step rate recorded.
  assert listops["cell"] == "listops_transformer" and listops["status"] == "finished"
  assert listops["this_run"] is True and listops["stopped"] is None
  assert listops["stopped_early"]["by"] == "max_train_time_s"
  assert 0 < listops["steps_trained"] < listops["planned_num_train_steps"] == 100000
  assert listops["plan"]["steps_per_s"] > 0 and listops["max_train_time_s"] > 1
  assert 0.0 <= listops["test_accuracy"] <= 100.0 and listops["paper_test_accuracy"] == 36.37
  assert "implementation 'auto'" in listops["deviation"]  # --fast_attention, recorded
  assert "--config.model.attention_dropout_rate=0.0" in listops["overrides"]
  # No limit: the clock stopped it (checkpoint saved), then a rerun tested that checkpoint.
  assert performer["stopped"] == "stopped for time (checkpoint saved)", performer
  assert performer["test_after_stop"]["exit_code"] == 0
  assert performer["status"] == "finished" and performer["this_run"] is True
  assert performer["max_train_time_s"] is None and performer["steps_trained"] > 1

  speed = json.loads((out / "speed.json").read_text())
  order = [(r["model"], r["length"]) for r in speed["rows"]]
  assert order[:3] == [("transformer", 128), ("test_oom", 128), ("performer", 128)], order
  measured = {(r["model"], r["length"]) for r in speed["rows"]}
  skipped = {(s["model"], s["length"]) for s in speed["skipped"]}
  assert len(measured | skipped) == 6 and not measured & skipped  # each cell: done or named
  oom = next(r for r in speed["rows"] if r["model"] == "test_oom")
  assert oom["status"] == "OOM" and any("RESOURCE_EXHAUSTED" in l for l in oom["output_tail"])
  assert "Transformer" in (out / "speed.md").read_text()

  tails = (out / "tails.txt").read_text()
  for block in ("===== env:", "===== attention:", "===== training listops_transformer",
                "===== training listops_performer", "===== speed test_oom @ 128"):
    assert block in tails
  assert "config.max_train_time_s" in tails and "RESOURCE_EXHAUSTED" in tails

  summary = (out / "summary.md").read_text()
  assert summary.startswith("# Accelerator run on cpu: DRY RUN")
  assert f"`python -m {MODULE} --dry_run --fast_attention --out={out}" in summary  # the command
  assert "Device: **cpu**" in summary and "Time budget" in summary
  assert "**77 tokens**" in summary and "ended by its time limit" in summary


@pytest.mark.commands
def test_no_device_of_the_platform_stops_at_once(tmp_path):
  """Asked for a platform this machine lacks (here: cuda on a CPU), the run stops in its
  first seconds with one line, and the reason comes back in the files."""
  out = tmp_path / "out"
  start = time.time()
  proc = _run("--dry_run", "--platform=cuda", f"--out={out}", f"--work={tmp_path / 'w'}",
              timeout=120)
  assert proc.returncode == 1 and time.time() - start < 60
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: JAX has no cuda device here"), lines
  assert "JAX could not start the platform 'cuda'" in lines[0]
  assert {"env.json", "log.txt", "tails.txt", "summary.md"} <= set(os.listdir(out))
  assert "Traceback" in (out / "tails.txt").read_text()  # the child's own traceback
  assert not (tmp_path / "w" / "train").exists()  # nothing ran


@pytest.mark.commands
def test_program_cost_counts_the_trainer_steps():
  """scripts/program_cost.py (the time plan's FLOP and traffic counts): compile only; the
  train step (forward, backward, update) costs more than twice the evaluation step."""
  proc = commands.run(PROGRAM_COST,
                      "--config=listops:transformer,cpu", "--config.data.max_len=64",
                      timeout=120)
  row = json.loads(proc.stdout.strip().splitlines()[-1])
  assert row["max_len"] == 64 and row["batch"] > 0
  assert row["train"]["flops"] > 2 * row["eval"]["flops"] > 0
  assert row["train"]["bytes_accessed"] > row["eval"]["bytes_accessed"] > 0


def test_real_plan_orders_speed_cells_by_length_and_offers_the_fast_path(tmp_path):
  """The real run's speed cells: 4K first, each length's Transformer first, then the models
  of the paper's Table 2 in its order; the ListOps Transformer's fast path is a deviation."""
  from lra.commands.accelerator import speed_cells, training_cells
  from lra.reporting.paper import PAPER_SPEED
  cfg = speed_cells.settings(dry_run=False)
  order = speed_cells.cell_order(cfg)
  assert order[:len(PAPER_SPEED)] == [(m, 4096) for m in PAPER_SPEED]
  assert [n for _, n in order] == sorted((n for _, n in order), reverse=True)
  assert [m for m, n in order if n == 1024][0] == "transformer"
  plain, fast = (training_cells.cells(str(tmp_path), False, f)[0] for f in (False, True))
  assert plain.deviation == "" and "--config.model.dtype=bfloat16" in plain.overrides
  assert "--config.model.attention.implementation=cudnn" in fast.overrides
  assert "without attention dropout" in fast.deviation and fast.limit


@pytest.mark.commands
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


@pytest.mark.commands
def test_program_cost_refuses_a_bad_key_in_one_line():
  proc = commands.run(PROGRAM_COST,
                      "--config=listops:transformer,cpu", "--config.data.max_lenx=64",
                      timeout=120, expect=1)
  assert proc.stderr.strip().splitlines() == [
      "error: bad --config override --config.data.max_lenx=64: config.data has no key "
      "'max_lenx' (did you mean 'max_len'?); a key must already exist in the config (see the "
      "config file for the valid keys)"]
