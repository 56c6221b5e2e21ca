"""eval.py never reports what it did not measure: bad inputs are one line and a non-zero exit,
checked before anything is measured or written; earlier tables are never replaced by empty
ones (issue 14, class 9). In-process calls of eval.main."""
import importlib
import json

import pytest

EVAL = importlib.import_module("eval")
# A model small enough that a measurement, were one to start, would finish.
TINY_SPEED = ["--models=transformer", "--lengths=16", "--batch=2", "--emb_dim=16",
              "--qkv_dim=16", "--mlp_dim=32", "--num_heads=2", "--num_layers=1", "--repeats=1"]


def _eval(capsys, *args) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of `python eval.py ARGS`."""
  try:
    EVAL.main(list(args))
    code = 0
  except SystemExit as e:
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err


def _one_error_line(err: str) -> str:
  lines = [l for l in err.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), err
  return lines[0]


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
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "rusn"), f"--out={earlier}")
  assert code == 1 and "rusn: no such run directory" in _one_error_line(err)
  assert _kept(earlier)


def test_empty_folder_is_refused_and_earlier_tables_kept(capsys, tmp_path, earlier):
  (tmp_path / "empty").mkdir()
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "empty"), f"--out={earlier}")
  assert code == 1
  line = [l for l in err.splitlines() if l.startswith("error: ")]
  assert len(line) == 1 and "no finished run" in line[0] and "earlier tables" in line[0]
  assert _kept(earlier)


def test_impossible_accuracy_is_refused_naming_the_file(capsys, tmp_path, earlier):
  bad = _run(tmp_path / "runs", "bad", test_accuracy=1.7)
  code, out, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={earlier}")
  assert code == 1 and "170.0" not in out
  assert any(bad in l and "test_accuracy=1.7" in l for l in err.splitlines()), err
  assert _kept(earlier)
  # Beside a valid run: the table is written without it, and a line names the file.
  _run(tmp_path / "runs", "good", model="performer")
  code, out, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={earlier}")
  assert code == 0 and "170.0" not in out and "40.0" in out
  assert [l for l in err.splitlines() if bad in l and "skipped" in l]


def test_run_of_an_unknown_task_is_named_not_dropped(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  odd = _run(tmp_path / "runs", "odd", task="sorting")
  code, out, err = _eval(capsys, "accuracy", str(tmp_path / "runs"),
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
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                       f"--out={earlier}")
  line = _one_error_line(err)
  assert code == 1 and str(speed) in line and "row 1" in line and "'length'" in line
  assert _kept(earlier)


@pytest.mark.parametrize("flag, words", [
    ("--lengths=0", "--lengths=0"),
    ("--lengths=1024,x", "--lengths=1024,x"),
    ("--batch=0", "--batch=0 must be positive"),
    ("--repeats=0", "--repeats=0 must be positive"),
    ("--config.model.num_layers=0", "config.model.num_layers=0 is not valid"),
    ("--config.model.pooling=XYZ", "config.model.pooling='XYZ' is not valid"),
    ("--config.model.attention.block_size=4", "config.model.attention has no field 'block_size'"),
    ("--config.data.max_len=4", "eval.py speed takes config.model settings"),
    ("--models=transformer,no_such_model", "valid models"),
])
def test_speed_settings_are_checked_before_measuring(capsys, tmp_path, flag, words):
  out = tmp_path / "out"
  code, stdout, err = _eval(capsys, "speed", *TINY_SPEED, flag, f"--out={out}")
  assert code == 1 and words in _one_error_line(err)
  assert "machine:" not in stdout and not out.exists()  # nothing measured, nothing written


def test_out_that_is_a_file_is_refused(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  (tmp_path / "out").write_text("mine\n")
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'out'}")
  assert code == 1 and "is a file" in _one_error_line(err)
  assert (tmp_path / "out").read_text() == "mine\n"


def test_unwritable_out_is_one_line(capsys, tmp_path):
  _run(tmp_path / "runs", "good")
  (tmp_path / "file").write_text("mine\n")
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"),
                       f"--out={tmp_path / 'file' / 'sub'}")
  line = _one_error_line(err)  # a fault of the machine: lra.errors.run_command's one line
  assert code == 1 and f"{tmp_path / 'file' / 'sub'}: Not a directory" in line
  assert "a folder was expected" in line
  assert (tmp_path / "file").read_text() == "mine\n"
