"""Tables and charts are honest at a glance, and metrics.jsonl says what happened (issue 14,
class 10): a run is set beside the paper's number only on the task's full data with the
paper-comparable config; several runs of a cell are chosen by a stated rule; the bubble chart
has no negative speed, a guessing line and the measured model size; memory below 1 GB in MB;
metrics rows carry a kind and a time, and a resumed run leaves no duplicate rows."""
import importlib
import json

import pytest

from lra.commands.references import paper_configs
from lra.reporting import accuracy, charts, markdown, results, speed, speed_table
from lra.training import writers

EVAL = importlib.import_module("eval")


def _config(task: str, arg: str, **changes) -> dict:
  config = json.loads(json.dumps(importlib.import_module(f"lra.configs.{task}").get_config(
      arg).to_dict()))
  config.update(changes)
  return config


# (train, test) examples of each task's full data under its default config: the LRA release
# sizes (Text: 10% of IMDb's 25,000 train reviews held out; Image: CIFAR-10's train[:90%]).
FULL = {"listops": (96000, 2000), "text": (22500, 25000), "retrieval": (147086, 17437),
        "image": (45000, 10000), "pathfinder": (160000, 20000), "pathx": (160000, 20000)}


def _run(root, name: str, task: str, test: float, val: float, config: dict, **fields) -> str:
  run = root / name
  run.mkdir(parents=True)
  result = {"task": task, "model": config["model"]["name"], "test_accuracy": test,
            "test_loss": 1.0, "best_step": config["num_train_steps"], "best_val_accuracy": val,
            "num_train_steps": config["num_train_steps"], "test_majority_rate": 0.5,
            "test_count": FULL[task][1], "train_count": FULL[task][0], "config": config,
            **fields}
  (run / "results.json").write_text(json.dumps(result))
  return str(run)


def _full(root, model: str = "transformer", test: float = 0.40, val: float = 0.40):
  """Runs of `model` on all five tasks with their base configs on the full data."""
  for task in ("listops", "text", "retrieval", "image", "pathfinder"):
    _run(root, f"{model}_{task}", task, test, val, _config(task, model))


def _line(md: str, title: str) -> str:
  return next(l for l in md.splitlines() if l.startswith(f"| {title} |"))


def test_toy_run_is_marked_not_compared_with_the_paper(tmp_path):
  # The example: a 10-step CPU Text run shown as "100.0 (64.3, +35.7)".
  toy = _config("text", "transformer,cpu", num_train_steps=10)
  _run(tmp_path, "toy", "text", 1.0, 1.0, toy, test_count=64, train_count=90)
  found = results.collect_results([str(tmp_path)], references=paper_configs)
  table = accuracy.accuracy_table(found, references=paper_configs)
  cell = next(r for r in table["rows"] if r["model"] == "transformer")["cells"]["text"]
  assert cell["ours"] == 100.0 and cell["diff"] is None
  assert "tested on 64 of 25000 examples" in cell["not_comparable"]
  assert "num_train_steps=10 (base: 20000)" in cell["not_comparable"]
  md = markdown.accuracy_markdown(table)
  row = _line(md, "Transformer")
  assert "| 100.0* |" in row and "64.3" not in row and "+35.7" not in md
  assert "not comparable with the paper" in md
  # One short line for the run: its differences compactly, the first few, then how many more.
  (note,) = [l for l in md.splitlines() if l.startswith("- Transformer / Text: tested")]
  assert note.startswith("- Transformer / Text: tested on 64 of 25000 examples; trained on 90 "
                         "of 22500; ")
  assert "model.num_layers=2 (base: 4)" in note
  more = len(cell["not_comparable"]) - markdown.SHOWN_DIFFERENCES
  assert more > 0 and note.endswith(f"; +{more} more (accuracy.csv)") and len(note) < 400
  assert "(the base config:" not in md  # the old, longer form


def test_full_run_with_the_paper_config_is_compared(tmp_path):
  _full(tmp_path)
  # The `,paper` option is comparable too; bfloat16 compute and another seed change nothing.
  paper_arg = _config("listops", "transformer,paper", seed=3)
  paper_arg["model"]["dtype"] = "bfloat16"
  _run(tmp_path, "paper_listops", "listops", 0.38, 0.9, paper_arg)
  found = results.collect_results([str(tmp_path)], references=paper_configs)
  table = accuracy.accuracy_table(found, references=paper_configs)
  row = _line(markdown.accuracy_markdown(table), "Transformer")
  # At chance: these runs record a majority rate of 50% (lra.reporting.chance).
  assert "38.0 (at chance) (36.4, +1.6)" in row and "40.0 (at chance) (64.3, -24.3)" in row
  assert "*" not in row


def test_an_average_over_a_marked_cell_is_marked_and_not_compared(tmp_path):
  _full(tmp_path)
  (tmp_path / "transformer_image" / "results.json").unlink()
  _run(tmp_path, "image_cpu", "image", 0.9, 0.9, _config("image", "transformer,cpu"))
  found = results.collect_results([str(tmp_path)], references=paper_configs)
  table = accuracy.accuracy_table(found, references=paper_configs)
  t = next(r for r in table["rows"] if r["model"] == "transformer")
  assert t["avg5"] == pytest.approx((40 * 4 + 90) / 5)
  assert t["avg5_diff"] is None and t["avg6_diff"] is None and not t["avg5_comparable"]
  row = _line(markdown.accuracy_markdown(table), "Transformer")
  assert row.rstrip(" |").endswith("| 50.0* | 50.0*† | ?")  # then the Checkpoint column
  flat = {(r["model"], r["task"]): r for r in accuracy.accuracy_rows(table)}
  assert flat[("transformer", "avg5")]["diff"] is None
  assert flat[("transformer", "image")]["not_comparable"]


def test_several_runs_are_never_compared_by_validation_on_different_data(tmp_path):
  # A CPU run with a high validation accuracy on its own small data, and a full run.
  _run(tmp_path / "a", "cpu", "listops", 0.60, 0.95, _config("listops", "transformer,cpu"),
       train_count=20000)
  full = _run(tmp_path / "b", "full", "listops", 0.37, 0.38, _config("listops", "transformer"))
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path / "a"), str(tmp_path / "b")], warnings,
                                  references=paper_configs)
  assert found[0]["workdir"] == full
  assert any("full data and the paper's config" in w for w in warnings)
  # Two runs on different data, neither comparable: not by validation, by the data's size.
  _run(tmp_path / "c", "small", "text", 0.9, 0.99, _config("text", "transformer,cpu"),
       train_count=100, test_count=100)
  bigger = _run(tmp_path / "c", "bigger", "text", 0.6, 0.5, _config("text", "transformer,cpu"),
                train_count=1000, test_count=1000)
  warnings = []
  found = results.collect_results([str(tmp_path / "c")], warnings, references=paper_configs)
  assert found[0]["workdir"] == bigger
  assert any("not compared by validation" in w for w in warnings)
  md = markdown.accuracy_markdown(accuracy.accuracy_table(found, references=paper_configs))
  assert results.CHOICE_RULE in md and "chosen over" in md


def test_full_sizes():
  from lra.data.tasks import FACTS
  assert FULL == {t: (FACTS[t].train_size, FACTS[t].test_size) for t in FULL}


def test_guessing_baseline():
  table = accuracy.accuracy_table([], references=paper_configs)
  assert accuracy.guessing_baseline(table, "avg5") == (pytest.approx(34.0), "chance")
  assert accuracy.guessing_baseline(table, "text") == (pytest.approx(50.0), "chance")


SPEED = {"machine": {"device_kind": "cpu", "batch": 32,
                     "model_size": {"emb_dim": 256, "num_layers": 4}},
         "rows": [{"model": "transformer", "length": 1024, "status": "ok", "steps_per_s": 0.02,
                   "compiled_memory_bytes": 5 * 10**8},
                  {"model": "performer", "length": 1024, "status": "ok", "steps_per_s": 0.03,
                   "compiled_memory_bytes": 2 * 10**9}]}


def test_bubble_chart_is_honest(tmp_path, monkeypatch):
  _full(tmp_path / "runs")
  _full(tmp_path / "runs", "performer", 0.5, 0.5)
  (tmp_path / "runs" / "performer_image" / "results.json").unlink()  # a CPU run instead
  _run(tmp_path / "runs", "performer_image_cpu", "image", 0.5, 0.5,
       _config("image", "performer,cpu"))
  (tmp_path / "speed.json").write_text(json.dumps(SPEED))
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


def test_memory_below_one_gigabyte_in_megabytes():
  tables = speed.speed_tables(SPEED["rows"])
  md = speed_table.speed_markdown(tables)
  assert "| Transformer | 500 MB (850 MB) |" in md and "| Performer | 2.00 GB (370 MB) |" in md


class _Recorder:
  """Stands in for tensorboardX's SummaryWriter and records how it was made."""
  made: list = []

  def __init__(self, logdir, purge_step=None):
    _Recorder.made.append(purge_step)

  def add_scalar(self, *args):
    pass

  def flush(self):
    pass

  def close(self):
    pass


def test_metrics_rows_have_kind_and_time_and_a_resume_drops_later_rows(tmp_path,
                                                                         monkeypatch):
  import tensorboardX
  monkeypatch.setattr(tensorboardX, "SummaryWriter", _Recorder)
  w = writers.MetricWriter(tmp_path)
  w.write(2, {"train_loss": 1.0, "learning_rate": 0.1})
  w.write(4, {"train_loss": 0.9, "learning_rate": 0.1})
  w.write(4, {"val_loss": 0.8, "val_accuracy": 0.5})
  w.write(6, {"train_loss": 0.7, "learning_rate": 0.1})  # after the checkpoint at 4
  w.close()
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 8, "train_lo')  # a kill in mid-write
  rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()[:4]]
  assert [r["kind"] for r in rows] == ["train", "train", "val", "train"]
  assert all(r["time"].endswith("+00:00") for r in rows)

  w = writers.MetricWriter(tmp_path, resume_step=4)
  w.write(6, {"train_loss": 0.7, "learning_rate": 0.1})
  w.write(8, {"test_accuracy": 0.5, "test_loss": 1.0})
  w.close()
  assert _Recorder.made[-1] == 4  # TensorBoard drops its events from step 4 on (and gets 4's again)
  steps = [(r["step"], r["kind"]) for r in map(json.loads, open(tmp_path / "metrics.jsonl"))]
  assert steps == [(2, "train"), (4, "train"), (4, "val"), (6, "train"), (8, "test")]
  # Run again at its end (a finished run): its test row is written once, not twice.
  writers.MetricWriter(tmp_path, resume_step=8).close()
  steps = [(r["step"], r["kind"]) for r in map(json.loads, open(tmp_path / "metrics.jsonl"))]
  assert steps == [(2, "train"), (4, "train"), (4, "val"), (6, "train")]


@pytest.mark.slow  # two tiny training runs: about 30 s on 2 idle cores
def test_trainer_resume_leaves_one_row_per_step_and_kind(listops_dir, tmp_path):
  from lra.training import trainer
  from tests.tiny import tiny_config
  config = tiny_config(listops_dir, num_train_steps=4)
  trainer.train_and_evaluate(config, str(tmp_path))
  # A finished run started again resumes at its end and tests again: one test row, not two.
  trainer.train_and_evaluate(config, str(tmp_path))
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  keys = [(r["step"], r["kind"]) for r in rows]
  assert keys == [(2, "train"), (4, "train"), (4, "val"), (4, "test")]
