"""eval.py end to end: the speed run (two models, two tiny lengths, failures reported) and the
accuracy table with its bubble chart."""
import json

import pytest
from PIL import Image

from tests import commands


def _eval(*args, expect=None, **kwargs):
  """eval.py ARGS (tests/commands.py); expect=None: the test checks the exit code itself."""
  return commands.run("eval.py", *args, expect=expect, **kwargs)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_speed_then_accuracy_tables_and_charts(tmp_path):
  out = tmp_path / "out"
  proc = _eval("speed", "--models=transformer,test_identity,test_oom",
               "--lengths=16,32", "--batch=2", "--emb_dim=16", "--qkv_dim=16",
               "--mlp_dim=32", "--num_heads=2", "--num_layers=1", "--repeats=2",
               "--import=tests.extra_mixers", f"--out={out}", expect=0)
  speed = json.loads((out / "speed.json").read_text())
  status = {(r["model"], r["length"]): r["status"] for r in speed["rows"]}
  assert len(status) == 6
  assert all(status[(m, l)] == "ok" for m in ("transformer", "test_identity") for l in (16, 32))
  assert status[("test_oom", 16)] == "OOM"
  oom = next(r for r in speed["rows"] if r["model"] == "test_oom")
  assert any("RESOURCE_EXHAUSTED" in line for line in oom["output_tail"])  # the reason, kept
  ok = [r for r in speed["rows"] if r["status"] == "ok"]
  for r in ok:
    assert r["steps_per_s"] > 0 and r["compiled_memory_bytes"] > 0 and r["flops_per_step"] > 0
  # Full attention's memory grows with the length (the scores alone grow with its square).
  mem = {r["length"]: r["compiled_memory_bytes"] for r in ok if r["model"] == "transformer"}
  assert mem[32] > mem[16]
  table = (out / "speed.md").read_text()
  assert "OOM" in table and "x)" in table
  assert speed["machine"]["matmul_peak_flops_per_s"] > 0
  assert Image.open(out / "scaling.png").size[0] > 400

  run = tmp_path / "runs" / "listops_transformer"
  run.mkdir(parents=True)
  (run / "results.json").write_text(json.dumps({
      "task": "listops", "model": "transformer", "test_accuracy": 0.40, "test_loss": 1.5,
      "test_count": 2000, "best_step": 100, "best_val_accuracy": 0.41,
      "last_step_test_accuracy": 0.39, "test_majority_rate": 0.12, "num_train_steps": 100,
      "train_time_s": 10.0, "hardware": {"platform": "cpu", "device_kind": "cpu",
                                         "device_count": 1, "process_count": 1,
                                         "jax_version": "0.10.2"},
      "config": {"task": "listops", "model": {"name": "transformer"}}}))
  proc = _eval("accuracy", str(tmp_path / "runs"), f"--speed={out / 'speed.json'}",
               "--average=listops", f"--out={out}", expect=0)
  # A 100-step run with no recorded config is shown, marked, never beside the paper's 36.4.
  assert "| 40.0* |" in proc.stdout and "36.4, +3.6" not in proc.stdout
  assert json.loads((out / "accuracy.json").read_text())["rows"]
  assert Image.open(out / "bubble.png").size[0] > 400


@pytest.mark.slow  # heavy; `pytest -m slow`
@pytest.mark.commands
def test_speed_set_overrides_model_fields(tmp_path):
  out = tmp_path / "out"
  proc = _eval("speed", "--models=local", "--lengths=16", "--batch=2",
               "--emb_dim=16", "--qkv_dim=16", "--mlp_dim=32", "--num_heads=2",
               "--num_layers=1", "--repeats=1", "--config.model.reversible=True",
               "--config.model.num_layers=3", "--config.model.ffn_chunks", "2",
               "--set", "attention.block_size=4", f"--out={out}")  # the old spelling too
  assert proc.returncode == 0, proc.stderr[-3000:]
  speed = json.loads((out / "speed.json").read_text())
  assert speed["machine"]["model_size"] == {
      "emb_dim": 16, "qkv_dim": 16, "mlp_dim": 32, "num_heads": 2, "num_layers": 3,
      "reversible": True, "ffn_chunks": 2, "attention.block_size": 4}
  status = {r["model"]: r["status"] for r in speed["rows"]}
  assert status["local"] == "ok"

  proc = _eval("speed", "--models=transformer", "--config.model.no_such_field=1",
               f"--out={out}")
  assert proc.returncode == 1 and "config.model has no field 'no_such_field'" in proc.stderr


def test_speed_measures_grid_aliases_as_their_mixer_with_its_settings():
  """`eval.py speed --models=mega_chunk,transformer_chunked` times the grid's aliases (the
  child process names each row by the alias)."""
  from lra.commands import measuring
  size = measuring.TEXT_BASE_SIZE
  c = measuring.measured_config("mega_chunk", 256, 2, size, "float32")
  assert (c.model.name, c.model.attention.chunk_size, c.data.max_len) == ("mega", 128, 256)
  c = measuring.measured_config("transformer_chunked", 256, 2, size, "float32")
  assert (c.model.name, c.model.attention.implementation) == ("transformer", "chunked")
  assert measuring.measured_config("mega", 256, 2, size, "float32").model.attention.chunk_size == 0
