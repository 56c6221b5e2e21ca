"""eval.py as a command: end to end (the speed run of two models at two tiny lengths with its
failures reported, then the accuracy table with its bubble chart; speed's model settings from
--config.model.*), and it never reports what it did not measure: bad inputs are one line and a
non-zero exit, checked before anything is measured or written, and earlier tables are never
replaced by empty ones (in-process calls of eval.main)."""
import json

import pytest
from PIL import Image

from tests import commands
from tests.reporting import one_error_line, run_eval


def _command(*args, expect=None, **kwargs):
  """eval.py ARGS (tests/commands.py); expect=None: the test checks the exit code itself."""
  return commands.run("eval.py", *args, expect=expect, **kwargs)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_speed_then_accuracy_tables_and_charts(tmp_path):
  out = tmp_path / "out"
  proc = _command("speed", "--models=transformer,test_identity,test_oom",
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
  proc = _command("accuracy", str(tmp_path / "runs"), f"--speed={out / 'speed.json'}",
                  "--average=listops", f"--out={out}", expect=0)
  # A 100-step run with no recorded config is shown, marked, never beside the paper's 36.4.
  assert "| 40.0* |" in proc.stdout and "36.4, +3.6" not in proc.stdout
  assert json.loads((out / "accuracy.json").read_text())["rows"]
  assert Image.open(out / "bubble.png").size[0] > 400


@pytest.mark.slow  # heavy; `pytest -m slow`
@pytest.mark.commands
def test_speed_set_overrides_model_fields(tmp_path):
  out = tmp_path / "out"
  proc = _command("speed", "--models=local", "--lengths=16", "--batch=2",
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

  proc = _command("speed", "--models=transformer", "--config.model.no_such_field=1",
                  f"--out={out}")
  assert proc.returncode == 1 and "config.model has no key 'no_such_field'" in proc.stderr


# ------------------------------------------------------------- bad inputs, one line each


# A model small enough that a measurement, were one to start, would finish.
TINY_SPEED = ["--models=transformer", "--lengths=16", "--batch=2", "--emb_dim=16",
              "--qkv_dim=16", "--mlp_dim=32", "--num_heads=2", "--num_layers=1", "--repeats=1"]


def _run(root, name: str, **fields) -> str:
  run = root / name
  run.mkdir(parents=True)
  result = {"task": "listops", "model": "transformer", "test_accuracy": 0.40,
            "test_count": 2000, "best_step": 100, "best_val_accuracy": 0.41,
            "num_train_steps": 100, "config": {"task": "listops"}, **fields}
  (run / "results.json").write_text(json.dumps(result))
  return str(run / "results.json")


@pytest.fixture
def earlier(tmp_path):
  """An output folder holding the tables of an earlier call."""
  out = tmp_path / "out"
  out.mkdir()
  for name in ("accuracy.md", "accuracy.csv", "accuracy.json"):
    (out / name).write_text("earlier\n")
  return out


def _kept(out) -> bool:
  return all((out / n).read_text() == "earlier\n"
             for n in ("accuracy.md", "accuracy.csv", "accuracy.json"))


def test_misspelled_folder_is_refused_and_earlier_tables_kept(capsys, tmp_path, earlier):
  _run(tmp_path / "runs", "a")
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "rusn"), f"--out={earlier}")
  assert code == 1 and "rusn: no such run directory" in one_error_line(err)
  assert _kept(earlier)


def test_empty_folder_is_refused_and_earlier_tables_kept(capsys, tmp_path, earlier):
  (tmp_path / "empty").mkdir()
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "empty"), f"--out={earlier}")
  assert code == 1
  line = [l for l in err.splitlines() if l.startswith("error: ")]
  assert len(line) == 1 and "no finished run" in line[0] and "earlier tables" in line[0]
  assert _kept(earlier)


def test_impossible_accuracy_is_refused_naming_the_file(capsys, tmp_path, earlier):
  bad = _run(tmp_path / "runs", "bad", test_accuracy=1.7)
  code, out, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={earlier}")
  assert code == 1 and "170.0" not in out
  assert any(bad in l and "test_accuracy=1.7" in l for l in err.splitlines()), err
  assert _kept(earlier)
  # Beside a valid run: the table is written without it, and a line names the file.
  _run(tmp_path / "runs", "good", model="performer")
  code, out, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={earlier}")
  assert code == 0 and "170.0" not in out and "40.0" in out
  assert [l for l in err.splitlines() if bad in l and "skipped" in l]


def test_run_of_an_unknown_task_is_named_not_dropped(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  odd = _run(tmp_path / "runs", "odd", task="sorting")
  code, out, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"),
                            f"--out={tmp_path / 'out'}")
  assert code == 0
  lines = [l for l in err.splitlines() if odd in l]
  assert len(lines) == 1 and "unknown task 'sorting'" in lines[0] and "skipped" in lines[0]


def test_malformed_speed_json_is_one_line_before_anything_is_written(capsys, tmp_path, earlier):
  _run(tmp_path / "runs", "good")
  speed = tmp_path / "speed.json"
  speed.write_text(json.dumps({"machine": {}, "rows": [
      {"model": "transformer", "length": 1024, "status": "ok"},
      {"model": "performer", "status": "ok", "steps_per_s": 3.0}]}))
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                          f"--out={earlier}")
  line = one_error_line(err)
  assert code == 1 and str(speed) in line and "row 1" in line and "'length'" in line
  assert _kept(earlier)


@pytest.mark.parametrize("flag, words", [
    ("--lengths=0", "--lengths=0"),
    ("--lengths=1024,x", "--lengths=1024,x"),
    ("--batch=0", "--batch=0 must be positive"),
    ("--repeats=0", "--repeats=0 must be positive"),
    ("--config.model.num_layers=0", "config.model.num_layers=0 is not valid"),
    ("--config.model.pooling=XYZ", "config.model.pooling='XYZ' is not valid"),
    ("--config.model.attention.block_size=4", "model 'transformer' does not take setting(s) "
     "block_size in config.model.attention"),
    ("--config.model.name=local", "choose the models with --models"),
    ("--config.data.max_len=4", "eval.py speed takes config.model settings"),
    ("--models=transformer,no_such_model", "valid models"),
])
def test_speed_settings_are_checked_before_measuring(capsys, tmp_path, flag, words):
  out = tmp_path / "out"
  code, stdout, err = run_eval(capsys, "speed", *TINY_SPEED, flag, f"--out={out}")
  assert code == 1 and words in one_error_line(err)
  assert "machine:" not in stdout and not out.exists()  # nothing measured, nothing written


def test_out_that_is_a_file_is_refused(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  (tmp_path / "out").write_text("mine\n")
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'out'}")
  assert code == 1 and "is a file" in one_error_line(err)
  assert (tmp_path / "out").read_text() == "mine\n"


def test_unwritable_out_is_one_line(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  (tmp_path / "file").write_text("mine\n")
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"),
                          f"--out={tmp_path / 'file' / 'sub'}")
  line = one_error_line(err)  # a fault of the machine: lra.errors.run_command's one line
  assert code == 1 and f"{tmp_path / 'file' / 'sub'}: Not a directory" in line
  assert "a folder was expected" in line
  assert (tmp_path / "file").read_text() == "mine\n"
