"""The charts of eval.py, read from the figures they save (no image comparison): the bubble
chart (accuracy against speed, memory as size) and the scaling chart are valid PNGs even with
nothing to draw; the bubble chart is honest (no negative speed, a guessing line, the measured
model size, marked averages, a note when its runs trained for different numbers of steps) and
is skipped in one line where it would be empty, the tables written all the same; `eval.py
curves` draws every run with labelled axes and a legend, and refuses a missing or malformed
metrics.jsonl in one line; a model keeps its colour across every chart."""
from __future__ import annotations

import itertools
import json

import pytest
from matplotlib.colors import to_hex
from matplotlib.collections import PathCollection
from PIL import Image

from lra.reporting import charts, speed
from tests.reporting import (EVAL, SMALL_SPEED, SPEED_ROWS, full_runs, one_error_line,
                             paper_config, result, run_eval, speed_row, write_result)


def test_bubble_inputs():
  tables = speed.speed_tables(SPEED_ROWS)
  acc = {"rows": [{"model": "performer", "avg5": 60.0}, {"model": "transformer", "avg5": 55.0},
                  {"model": "reformer", "avg5": None}]}
  scores, steps, memory, length = speed.bubble_inputs(acc, tables)
  assert length == 2048
  assert scores == {"performer": 60.0, "transformer": 55.0}
  assert steps == {"performer": 4.0, "reformer": 1.0}
  assert memory == {"performer": 2.0, "reformer": 3.0}


def _check_png(path) -> None:
  with Image.open(path) as im:
    im.verify()
  with Image.open(path) as im:
    assert im.format == "PNG"
    width, height = im.size
  assert 400 <= width <= 4000 and 300 <= height <= 3000, (width, height)


def test_charts(tmp_path):
  bubble = tmp_path / "charts" / "bubble.png"
  charts.bubble_chart(str(bubble),
                      {"transformer": 54.4, "performer": 51.4, "linformer": 51.4, "local": 46.1},
                      {"transformer": 1.4, "performer": 8.0, "linformer": 7.7},
                      {"transformer": 9.48, "performer": 1.06, "linformer": 0.99},
                      title="LRA: accuracy vs speed at 4K")
  _check_png(bubble)
  scaling = tmp_path / "charts" / "scaling.png"
  charts.scaling_chart(str(scaling), SPEED_ROWS)
  _check_png(scaling)
  # Nothing to draw must still give a valid figure, not an exception.
  charts.bubble_chart(str(tmp_path / "empty.png"), {}, {}, {}, title="empty")
  _check_png(tmp_path / "empty.png")
  charts.scaling_chart(str(tmp_path / "empty_scaling.png"),
                       [speed_row("transformer", 1024, status="OOM")])
  _check_png(tmp_path / "empty_scaling.png")


def test_bubble_chart_is_honest(tmp_path, monkeypatch):
  full_runs(tmp_path / "runs")
  full_runs(tmp_path / "runs", "performer", 0.5, 0.5)
  (tmp_path / "runs" / "performer_image" / "results.json").unlink()  # a CPU run instead
  write_result(tmp_path / "runs", "performer_image_cpu", "image", 0.5, 0.5,
               paper_config("image", "performer,cpu"))
  (tmp_path / "speed.json").write_text(json.dumps(SMALL_SPEED))
  drawn = []
  real = charts.bubble_chart
  monkeypatch.setattr(charts, "bubble_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  EVAL.main(["accuracy", str(tmp_path / "runs"), f"--speed={tmp_path / 'speed.json'}",
             f"--out={tmp_path / 'out'}"])
  (chart,) = drawn
  assert chart["xlim"][0] >= 0  # speeds near 0: the axis does not run below 0
  assert chart["baseline"] == (pytest.approx(50.0), "majority class")
  assert chart["ylim"][0] <= 50.0 <= chart["ylim"][1]
  assert chart["labels"]["transformer"].endswith("500 MB")
  assert chart["labels"]["performer"] == "Performer*\n2.00 GB"  # its average is marked
  assert chart["labels"]["transformer"] == "Transformer\n500 MB"
  assert any("not comparable with the paper" in n for n in chart["notes"])
  # The speed runs' model size is not the accuracy runs': the chart says so.
  assert any("emb_dim=256, num_layers=4" in n for n in chart["notes"])
  assert (tmp_path / "out" / "bubble.png").stat().st_size > 0


# ----------------------------------------------------------------- skipped where it is empty


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
    result(tmp_path / "runs", model, "listops", 0.37)
  speed = _speed(tmp_path / "speed.json", ["transformer", "performer"])
  out = tmp_path / "out"
  code, stdout, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
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
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                          "--average=listops", f"--out={out}")
  assert code == 0 and not err.strip(), err
  assert (out / "bubble.png").exists()


def test_bubble_chart_over_an_average_no_model_has_is_skipped(capsys, tmp_path):
  for model in ("transformer", "performer"):
    for task in ("listops", "text"):
      result(tmp_path / "runs", model, task, 0.4)
  result(tmp_path / "runs", "performer", "image", 0.4)
  speed = _speed(tmp_path / "speed.json", ["transformer", "performer"])
  out = tmp_path / "out"
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                          f"--out={out}")  # --average=avg5: no model ran the five tasks
  line = _skipped(err)
  assert code == 0 and "--average=avg5: none of the measured models" in line
  assert "use --average=listops (a task every measured model ran)" in line
  assert all((out / name).is_file() for name in TABLES) and not (out / "bubble.png").exists()
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={speed}",
                          "--average=image", f"--out={out}")  # only performer ran it: drawn
  assert code == 0, err
  assert (out / "bubble.png").exists()
  # No measured model has a run at all; the bubble.png left from before is said to be old.
  other = _speed(tmp_path / "other.json", ["linformer"])
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), f"--speed={other}",
                          "--average=listops", f"--out={out}")
  line = _skipped(err)
  assert code == 0 and "no model has both a finished run" in line
  assert "eval.py speed --models=performer,transformer" in line
  assert f"(the {out}/bubble.png there is an earlier one)" in line


# ------------------------------------------------------------------------------ eval.py curves


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
  code, out, err = run_eval(capsys, "curves", a, b, c, f"--out={tmp_path / 'out'}")
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
  """A denoise run's train and validation loss are of the masked tokens:
  its legend entry says so; a classification run beside it keeps its plain name."""
  pre = _metrics(tmp_path / "pre", _train_rows(4.0))
  (tmp_path / "pre" / "config.json").write_text(json.dumps({"objective": "denoise"}))
  ft = _metrics(tmp_path / "ft", _train_rows(2.0))
  (tmp_path / "ft" / "config.json").write_text(json.dumps({"objective": "classify"}))
  drawn = []
  real = charts.curves_chart
  monkeypatch.setattr(charts, "curves_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  code, _, err = run_eval(capsys, "curves", pre, ft, f"--out={tmp_path / 'out'}")
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
  code, _, err = run_eval(capsys, "curves", str(run), f"--out={tmp_path / 'out'}")
  assert code == 1 and words in one_error_line(err) and str(run) in one_error_line(err)
  assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------- one colour a model


@pytest.fixture
def figures(monkeypatch):
  """Every figure a chart saves, in order."""
  saved = []
  real = charts._save
  monkeypatch.setattr(charts, "_save", lambda fig, path: (saved.append(fig), real(fig, path)))
  return saved


def _rows(models) -> list[dict]:
  return [{"model": m, "length": n, "status": "ok", "step_time_s": 0.1 * n / 1024,
           "steps_per_s": 1024 / (0.1 * n), "compiled_memory_bytes": 10**8 * n // 1024}
          for m in models for n in (1024, 2048)]


def _line_colours(fig) -> dict[str, str]:
  return {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()}


def test_a_model_keeps_its_colour_in_charts_of_other_models(tmp_path, figures):
  few = ["transformer", "s5", "relu_linear"]  # relu_linear: a mixer from outside models/
  many = ["transformer", "fnet", "lru", "mamba", "s5", "relu_linear", "nystromformer"]
  charts.scaling_chart(str(tmp_path / "a.png"), _rows(few))
  charts.scaling_chart(str(tmp_path / "b.png"), _rows(many))
  a, b = (_line_colours(fig) for fig in figures)
  for title in ("Transformer", "S5", "relu_linear"):
    assert a[title] == b[title], title
  assert len(set(b.values())) == len(b)  # still one colour per model within a chart

  charts.bubble_chart(str(tmp_path / "bubble.png"), {"transformer": 40.0, "s5": 60.0},
                      {"transformer": 2.0, "s5": 3.0}, {"transformer": 1.0, "s5": 0.5},
                      title="t")
  bubbles = [c for c in figures[2].axes[0].collections if isinstance(c, PathCollection)]
  # Drawn in the table's order: the Transformer, then S5; their colours as in the lines.
  assert [to_hex(c.get_facecolor()[0], keep_alpha=False) for c in bubbles] == \
      [a["Transformer"], a["S5"]]


def _curves_run(root, name: str, model: str) -> str:
  run = root / name
  run.mkdir(parents=True)
  rows = [{"step": s, "train_loss": 1.0 / s, "train_accuracy": 0.1 * s} for s in (1, 2, 3)]
  (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  (run / "config.json").write_text(json.dumps({"model": {"name": model}}))
  return str(run)


def test_curves_colour_each_run_by_its_model(capsys, tmp_path, figures):
  """Two runs of one model share its colour, told apart by the line's dash; an S5 run is drawn
  in S5's colour of the other charts."""
  charts.scaling_chart(str(tmp_path / "s.png"), _rows(["transformer", "lru", "s5"]))
  runs = [_curves_run(tmp_path, "a", "transformer"), _curves_run(tmp_path, "b", "s5"),
          _curves_run(tmp_path, "c", "transformer")]
  code, _, err = run_eval(capsys, "curves", *runs, f"--out={tmp_path / 'out'}")
  assert code == 0, err
  scaling, curves = _line_colours(figures[0]), figures[1]
  lines = {line.get_label(): line for line in curves.axes[0].get_lines()}
  assert to_hex(lines["b"].get_color()) == scaling["S5"]
  assert to_hex(lines["a"].get_color()) == to_hex(lines["c"].get_color()) == \
      scaling["Transformer"]
  assert lines["a"].get_linestyle() != lines["c"].get_linestyle()


SPEED = {"machine": {"device_kind": "cpu"},
         "rows": [{"model": m, "length": 1024, "status": "ok", "steps_per_s": s,
                   "compiled_memory_bytes": 10**8} for m, s in (("transformer", 1.0),
                                                                  ("s5", 2.0))]}


def _listops(root, model: str, steps: int) -> None:
  run = root / f"{model}_listops"
  run.mkdir(parents=True)
  (run / "results.json").write_text(json.dumps({
      "task": "listops", "model": model, "test_accuracy": 0.4, "test_loss": 1.0,
      "test_count": 2000, "best_step": steps, "best_val_accuracy": 0.4,
      "num_train_steps": steps, "test_majority_rate": 0.1,
      "config": {"task": "listops", "model": {"name": model}}}))


@pytest.mark.parametrize("steps, said", [((100, 200), True), ((100, 100), False)])
def test_bubble_chart_says_how_many_steps_its_points_trained(
    capsys, tmp_path, monkeypatch, steps, said):
  _listops(tmp_path / "runs", "transformer", steps[0])
  _listops(tmp_path / "runs", "s5", steps[1])
  (tmp_path / "speed.json").write_text(json.dumps(SPEED))
  drawn = []
  real = charts.bubble_chart
  monkeypatch.setattr(charts, "bubble_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  code, _, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"),
                          f"--speed={tmp_path / 'speed.json'}", "--average=listops",
                          f"--out={tmp_path / 'out'}")
  assert code == 0, err
  notes = [n for n in drawn[0]["notes"] if "numbers of steps" in n]
  if said:
    assert notes == ["Trained for different numbers of steps (num_train_steps): ListOps: "
                     "Transformer 100, S5 200"]
  else:
    assert notes == []
    assert "Runs trained for 100 steps (num_train_steps)" in drawn[0]["notes"]


# ----------------------------------------------------- readable at one length, one model, twelve

TWELVE = ["transformer", "based", "deltanet", "gated_deltanet", "gla", "hgrn2", "hyena", "mamba",
          "mamba2", "mlstm", "retnet", "s5"]  # Figure 2's


@pytest.fixture
def saved(monkeypatch):
  """Every matplotlib figure saved, in order (whichever module saves it)."""
  from matplotlib.figure import Figure
  found = []
  real = Figure.savefig
  monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (found.append(fig),
                                                               real(fig, *a, **k))[1])
  return found


def _tick_labels(axis) -> list[str]:
  """The texts of an axis' labelled ticks inside its limits, major and minor."""
  axis.get_ticklabels(which="both")  # gives each tick its text
  lo, hi = sorted(axis.get_view_interval())
  return [t.label1.get_text() for t in axis.get_major_ticks() + axis.get_minor_ticks()
          if lo <= t.get_loc() <= hi and t.label1.get_text()]


def test_the_scaling_chart_at_one_length_labels_its_y_axes(tmp_path, saved):
  """At one length the points span less than a decade: each log y axis still reads >= 2
  labelled ticks (a regression: step time none, memory one)."""
  rows = [{"model": m, "length": 1024, "status": "ok", "step_time_s": t, "steps_per_s": 1 / t,
           "compiled_memory_bytes": int(t * 10**9)} for m, t in (("transformer", 0.3),
                                                                  ("s5", 0.4))]
  charts.scaling_chart(str(tmp_path / "s.png"), rows)
  for ax in saved[0].axes:
    assert len(_tick_labels(ax.yaxis)) >= 2, (ax.get_title(), _tick_labels(ax.yaxis))


def _points(models, steps: int = 300) -> list[dict]:
  """Recall points over two decades of state size where many models sit at one place: every
  model at 4,096 and 100% at width 32, and near 512 and 40% at width 16; at width 64, at
  32,768 and 100% or 60% by turns."""
  return [{"max_len": 64, "num_kv_pairs": 4, "model": m, "width": w, "state_size": state,
           "test_accuracy": acc, "num_train_steps": steps}
          for i, m in enumerate(models)
          for w, state, acc in ((16, 512, 40.0 + i / 10), (32, 4096, 100.0),
                                (64, 32768, 100.0 - 40 * (i % 2)))]


def _markers(ax) -> list[tuple[float, float]]:
  """Where each marker of a panel is drawn (pixels), of lines and scatters alike."""
  found = [tuple(xy) for line in ax.get_lines() if line.get_marker() not in (None, "None", "")
           for xy in line.get_transform().transform(line.get_xydata())]
  return found + [tuple(xy) for c in ax.collections if isinstance(c, PathCollection)
                  for xy in c.get_offset_transform().transform(c.get_offsets())]


@pytest.mark.parametrize("models", [["transformer"], TWELVE], ids=["one model", "twelve"])
def test_the_recall_chart_shows_every_point_on_a_labelled_log_axis(tmp_path, saved, models):
  from lra.reporting import recall
  points = _points(models)
  recall.recall_chart(tmp_path / "r.png", points)
  (ax,) = saved[0].axes
  assert len(_tick_labels(ax.xaxis)) >= 3 and "log scale" in ax.get_xlabel()
  where = _markers(ax)
  assert len(where) == len(points)  # a marker per point, none hidden under another:
  assert min((abs(a[0] - b[0]) + abs(a[1] - b[1]) for a, b in
              itertools.combinations(where, 2)), default=99) > 5
  assert "runs of 300 training steps" in saved[0].get_suptitle()
  colours = {to_hex(c.get_facecolor()[0], keep_alpha=False) for c in ax.collections}
  assert len(colours) == len(models)


def test_every_known_model_has_a_colour_of_its_own_and_the_older_keep_theirs():
  known = charts._KNOWN
  colours = [to_hex(charts.model_style(m)[0]) for m in known]
  assert len(set(colours)) == len(known)  # a regression: the 21st reused the 1st's colour
  # Appended colours leave the earlier models' alone (the first twenty: tab20 as before).
  assert [to_hex(charts.model_style(m)[0]) for m in ("transformer", "performer", "s5", "mamba")
          ] == ["#1f77b4", "#aec7e8", "#c49c94", "#c7c7c7"]
  assert charts.model_style("relu_linear") == charts.model_style("relu_linear")


def _sweep_rows(models) -> list[dict]:
  """Sweep rows (lra.reporting.sweeps.sweep_rows) of two learning rates, one seed, every
  model at the same accuracies: all of them at one place at each value."""
  def point(lr: float) -> dict:
    run = {"seed": 0, "test_accuracy": 90.0, "best_val_accuracy": 90.0, "workdir": "w",
           "num_train_steps": 200}
    return {"name": f"learning_rate={lr!r}", "values": {"learning_rate": lr}, "runs": [run]}
  return [{"model": m, "task": "mqar", "keys": ["learning_rate"], "majority_rate": 10.0,
           "points": [point(1e-3), point(3e-3)]} for m in models]


@pytest.mark.parametrize("models", [["transformer"], TWELVE], ids=["one model", "twelve"])
def test_the_sweep_chart_shows_every_point_and_says_its_axis_is_logarithmic(tmp_path, saved,
                                                                            models):
  from lra.reporting import sweep_chart
  sweep_chart.sweep_chart(tmp_path / "s.png", _sweep_rows(models), "learning_rate")
  (ax,) = saved[0].axes
  assert ax.get_xscale() == "log" and ax.get_xlabel() == "learning_rate (log scale)"
  assert "runs of 200 training steps" in saved[0].get_suptitle()
  where = _markers(ax)
  assert len(where) == 2 * len(models)  # a marker per point, none hidden under another:
  assert min((abs(a[0] - b[0]) + abs(a[1] - b[1]) for a, b in
              itertools.combinations(where, 2)), default=99) > 3
