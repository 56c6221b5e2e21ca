"""eval.py for papers: `curves` (loss and accuracy against step for a set of runs), a bubble
chart skipped in one line where it would be empty (the tables written all the same), the paper
rows of the models that ran (or all of them), and `speed`'s grid on a CPU when --lengths and
--batch are not given. In-process calls of eval.main, on made-up files (no training)."""
import json

import pytest
from PIL import Image

from lra.commands import measuring
from lra.reporting import charts

from tests.test_eval_faults import _eval, _one_error_line as _error  # one eval.py runner


def _metrics(run, rows: list[dict], torn: str = "") -> str:
  run.mkdir(parents=True)
  (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)
  return str(run)


def _train_rows(loss: float, steps=(2, 4, 6)) -> list[dict]:
  rows = []
  for step in steps:
    rows.append({"step": step, "kind": "train", "train_loss": loss / step,
                 "train_accuracy": 0.1 * step, "steps_per_s": 3.0, "learning_rate": 0.1})
    if step % 4 == 0:
      rows.append({"step": step, "kind": "val", "val_loss": loss / step, "val_accuracy": 0.3})
  return rows + [{"step": steps[-1], "kind": "test", "test_accuracy": 0.3, "test_loss": 1.0}]


def test_curves_draws_every_run_with_labelled_axes_and_a_legend(capsys, tmp_path, monkeypatch):
  a = _metrics(tmp_path / "grid" / "a" / "transformer", _train_rows(2.0))
  # A run killed in mid-write: its torn last line is left out, as a resume drops it.
  b = _metrics(tmp_path / "grid" / "b" / "transformer", _train_rows(3.0),
               torn='{"step": 8, "train_lo')
  c = _metrics(tmp_path / "performer", _train_rows(2.5, steps=(2, 4)))
  drawn = []
  real = charts.curves_chart
  monkeypatch.setattr(charts, "curves_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  code, out, err = _eval(capsys, "curves", a, b, c, f"--out={tmp_path / 'out'}")
  assert code == 0, err
  (chart,) = drawn
  assert chart["legend"] == ["a/transformer", "b/transformer", "performer"]  # told apart
  assert chart["labels"] == {"train_loss": ("step", "train loss"),
                             "val_loss": ("step", "validation loss"),
                             "train_accuracy": ("step", "train accuracy (%)"),
                             "val_accuracy": ("step", "validation accuracy (%)")}
  assert all(lines == chart["legend"] for lines in chart["lines"].values())
  assert Image.open(tmp_path / "out" / "curves.png").size[0] > 800
  assert "wrote" in out and "curves.png" in out


def test_curves_label_a_denoise_runs_masked_token_figures(capsys, tmp_path, monkeypatch):
  """Issue 36 item 5: a denoise run's train and validation loss are of the masked tokens:
  its legend entry says so; a classification run beside it keeps its plain name."""
  pre = _metrics(tmp_path / "pre", _train_rows(4.0))
  (tmp_path / "pre" / "config.json").write_text(json.dumps({"objective": "denoise"}))
  ft = _metrics(tmp_path / "ft", _train_rows(2.0))
  (tmp_path / "ft" / "config.json").write_text(json.dumps({"objective": "classify"}))
  drawn = []
  real = charts.curves_chart
  monkeypatch.setattr(charts, "curves_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  code, _, err = _eval(capsys, "curves", pre, ft, f"--out={tmp_path / 'out'}")
  assert code == 0, err
  assert drawn[0]["legend"] == ["pre (denoise: masked-token loss and accuracy)", "ft"]


@pytest.mark.parametrize("content, words", [
    (None, "no metrics.jsonl"),
    ('{"step": 2, "train_loss": 1.0}\nnot json\n{"step": 4, "train_loss": 0.9}\n',
     "line 2 is not JSON"),
    ('{"train_loss": 1.0}\n', "line 1 has no integer 'step'"),
    ('{"step": 2, "train_loss": "high"}\n', "line 1: train_loss='high' is not a finite number"),
])
def test_curves_of_a_missing_or_malformed_metrics_file_is_one_line(capsys, tmp_path, content,
                                                                  words):
  run = tmp_path / "run"
  run.mkdir()
  if content is not None:
    (run / "metrics.jsonl").write_text(content)
  code, _, err = _eval(capsys, "curves", str(run), f"--out={tmp_path / 'out'}")
  assert code == 1 and words in _error(err) and str(run) in _error(err)
  assert not (tmp_path / "out").exists()


def _result(root, model: str, task: str, accuracy: float) -> None:
  run = root / f"{model}_{task}"
  run.mkdir(parents=True)
  (run / "results.json").write_text(json.dumps({
      "task": task, "model": model, "test_accuracy": accuracy, "test_loss": 1.0,
      "test_count": 2000, "best_step": 100, "best_val_accuracy": accuracy,
      "num_train_steps": 100, "test_majority_rate": 0.1,
      "config": {"task": task, "model": {"name": model}}}))


def _speed(path, models) -> str:
  rows = [{"model": m, "length": 1024, "status": "ok", "steps_per_s": 2.0,
           "compiled_memory_bytes": 10**8} for m in models]
  path.write_text(json.dumps({"machine": {"device_kind": "cpu"}, "rows": rows}))
  return str(path)


TABLES = ("accuracy.md", "accuracy.csv", "accuracy.json")


def _skipped(err: str) -> str:
  """The one line of a bubble chart that was skipped."""
  lines = [l for l in err.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("warning: bubble chart skipped: "), err
  return lines[0]


def test_bubble_chart_of_listops_runs_without_average_is_skipped_tables_written(capsys,
                                                                                tmp_path):
  """Every run a ListOps one, --speed and no --average (avg5, which needs the five tasks):
  the tables are written and only the chart is skipped, in one line naming the --average that
  draws it (a regression: nothing at all was written)."""
  for model in ("transformer", "performer"):
    _result(tmp_path / "runs", model, "listops", 0.37)
  speed = _speed(tmp_path / "speed.json", ["transformer", "performer"])
  out = tmp_path / "out"
  code, stdout, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                            f"--out={out}")
  assert code == 0, err
  assert all((out / name).is_file() for name in TABLES)
  assert not (out / "bubble.png").exists()
  line = _skipped(err)
  assert "--average=avg5: none of the measured models (performer, transformer)" in line
  assert "use --average=listops (a task every measured model ran)" in line
  assert "| Transformer | 37.0* |" in stdout and f"wrote {out}/accuracy.{{md,csv,json}}" in stdout
  table = json.loads((out / "accuracy.json").read_text())
  assert {r["model"] for r in table["rows"]} == {"transformer", "performer"}
  # What the line says draws it.
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                       "--average=listops", f"--out={out}")
  assert code == 0 and not err.strip(), err
  assert (out / "bubble.png").exists()


def test_bubble_chart_over_an_average_no_model_has_is_skipped(capsys, tmp_path):
  for model in ("transformer", "performer"):
    for task in ("listops", "text"):
      _result(tmp_path / "runs", model, task, 0.4)
  _result(tmp_path / "runs", "performer", "image", 0.4)
  speed = _speed(tmp_path / "speed.json", ["transformer", "performer"])
  out = tmp_path / "out"
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                       f"--out={out}")  # --average=avg5: no model ran the five tasks
  line = _skipped(err)
  assert code == 0 and "--average=avg5: none of the measured models" in line
  assert "use --average=listops (a task every measured model ran)" in line
  assert all((out / name).is_file() for name in TABLES) and not (out / "bubble.png").exists()
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                       "--average=image", f"--out={out}")  # only performer ran it: drawn
  assert code == 0, err
  assert (out / "bubble.png").exists()
  # No measured model has a run at all; the bubble.png left from before is said to be old.
  other = _speed(tmp_path / "other.json", ["linformer"])
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={other}",
                       "--average=listops", f"--out={out}")
  line = _skipped(err)
  assert code == 0 and "no model has both a finished run" in line
  assert "eval.py speed --models=performer,transformer" in line
  assert f"(the {out}/bubble.png there is an earlier one)" in line


def test_paper_rows_of_the_models_that_ran_unless_all_are_asked_for(capsys, tmp_path):
  _result(tmp_path / "runs", "performer", "listops", 0.4)
  code, out, err = _eval(capsys, "accuracy", str(tmp_path / "runs"),
                         f"--out={tmp_path / 'out'}")
  assert code == 0, err
  rows = [l for l in out.splitlines() if l.startswith("| ") and not l.startswith("| Model")]
  assert [r.split(" | ")[0] for r in rows] == ["| Performer"]
  assert "- (65.4)" in rows[0]  # the paper's Text figure, beside no run of ours
  code, out, err = _eval(capsys, "accuracy", str(tmp_path / "runs"), "--all_paper_rows",
                         f"--out={tmp_path / 'out'}")
  assert code == 0, err
  assert "| Transformer |" in out and "| BigBird |" in out


@pytest.mark.parametrize("platform, lengths, batch, said", [
    ("cpu", [512, 1024], 4, True),
    ("gpu", [1024, 2048, 3072, 4096], 32, False),
])
def test_speed_without_lengths_and_batch_measures_the_machines_grid(
    capsys, tmp_path, monkeypatch, platform, lengths, batch, said):
  measured = []
  monkeypatch.setattr(measuring, "machine_in_fresh_process", lambda dtype: {
      "platform": platform, "device_kind": platform, "device_count": 1,
      "matmul_peak_flops_per_s": 1e11})

  def measure(model, length, batch, *args, **kwargs):
    measured.append((model, length, batch))
    return {"model": model, "length": length, "batch": batch, "status": "ok",
            "step_time_s": 1.0, "steps_per_s": 1.0, "compiled_memory_bytes": 10**8}
  monkeypatch.setattr(measuring, "run_in_fresh_process", measure)
  code, out, err = _eval(capsys, "speed", "--models=transformer", f"--out={tmp_path}")
  assert code == 0, err
  assert measured == [("transformer", n, batch) for _ in range(5) for n in lengths]  # rounds
  assert ("CPU: the CPU-sized grid (lengths 512,1024, batch 4;" in out) == said
  assert ("(1 model x 2 lengths x 5 rounds, one process each)" in out) == said
  machine = json.loads((tmp_path / "speed.json").read_text())["machine"]
  assert machine["batch"] == batch and machine["software"]["libraries"]["jax"]
  # Issue 36 item 5: the paper's memory is of batch 32; the CPU grid's of batch 4 says so.
  table = (tmp_path / "speed.md").read_text()
  assert "The paper's TPU v3 figure (batch 32) in parentheses" in table
  assert ("ours are at batch 4, so compare how the two grow with length" in table) == said
  # Given flags are kept as they are on a CPU too.
  measured.clear()
  code, out, err = _eval(capsys, "speed", "--models=transformer", "--lengths=64", "--batch=2",
                         f"--out={tmp_path}")
  assert code == 0 and measured == [("transformer", 64, 2)] * 5 and "CPU-sized" not in out
