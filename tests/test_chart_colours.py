"""Issue 44 item 5: a model keeps its colour across every chart, whatever other models a chart
shows (the scaling chart, the bubble chart, the training curves), and the bubble chart says when
its points' runs were trained for different numbers of steps. Charts read from the figures that
are saved (no image comparison)."""
import json

import pytest
from matplotlib.colors import to_hex
from matplotlib.collections import PathCollection

from lra.reporting import charts

from tests.test_eval_faults import _eval


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
  code, _, err = _eval(capsys, "curves", *runs, f"--out={tmp_path / 'out'}")
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
def test_bubble_chart_says_when_its_points_trained_for_different_steps(
    capsys, tmp_path, monkeypatch, steps, said):
  _listops(tmp_path / "runs", "transformer", steps[0])
  _listops(tmp_path / "runs", "s5", steps[1])
  (tmp_path / "speed.json").write_text(json.dumps(SPEED))
  drawn = []
  real = charts.bubble_chart
  monkeypatch.setattr(charts, "bubble_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  code, _, err = _eval(capsys, "accuracy", str(tmp_path / "runs"),
                       f"--speed={tmp_path / 'speed.json'}", "--average=listops",
                       f"--out={tmp_path / 'out'}")
  assert code == 0, err
  notes = [n for n in drawn[0]["notes"] if "numbers of steps" in n]
  if said:
    assert notes == ["Trained for different numbers of steps (num_train_steps): ListOps: "
                     "Transformer 100, S5 200"]
  else:
    assert notes == []
