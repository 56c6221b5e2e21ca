"""The accuracy table from made-up results.json files (no training, no JAX): the paper's own
figures consistent; runs collected (of several runs of a cell, the best on validation, by a
stated rule, never compared by validation on different data); cells, averages, markdown, CSV
and JSON; a run set beside the paper's number only on the task's full data with the
paper-comparable config, and an average over a marked cell marked; rows of their own for the
chunked Transformer and Mega-chunk; the paper rows of the models that ran, or all of them.
(Seeds pooled in a cell: tests/test_seeds.py.)"""
from __future__ import annotations

import csv
import importlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from lra.data import tasks
from lra.commands.references import paper_configs
from lra.reporting import accuracy, files, markdown, paper, results
from tests.reporting import FULL, full_runs, paper_config, result, run_eval, write_result

FIVE = ("listops", "text", "retrieval", "image", "pathfinder")


def _write_run(root, name: str, model: str, task: str, test: float, val: float,
               full: bool = True) -> str:
  """A results.json; `full`: a run of the task's base config on its full data (comparable
  with the paper), else a small CPU-sized run."""
  run = root / name
  run.mkdir(parents=True)
  if full and model in paper.PAPER_ACCURACY:
    config = json.loads(json.dumps(
        importlib.import_module(f"lra.configs.{task}").get_config(model).to_dict()))
    count = tasks.FACTS[task].test_size
  else:
    config = {"task": task, "batch_size": 32, "num_train_steps": 2000,
              "data": {"max_len": 512},
              "model": {"name": model, "num_layers": 2, "emb_dim": 64, "num_heads": 4,
                        "qkv_dim": 64, "mlp_dim": 128, "attention": {}}}
    count = 2000
  steps = config["num_train_steps"]
  result = {
      "task": task, "model": model, "test_accuracy": test, "test_loss": 1.0,
      "test_count": count, "best_step": steps, "best_val_accuracy": val,
      "last_step_test_accuracy": test, "test_majority_rate": 0.1175,
      "num_train_steps": steps, "train_time_s": 12.5,
      "hardware": {"platform": "cpu", "device_kind": "cpu", "device_count": 1,
                   "process_count": 1, "jax_version": "0.0"},
      "config": config,
  }
  (run / "results.json").write_text(json.dumps(result))
  return str(run)


def _row(table: dict, model: str) -> dict:
  return next(r for r in table["rows"] if r["model"] == model)


def test_paper_tables_consistent():
  assert set(paper.PAPER_ACCURACY) == set(paper.PAPER_MODELS)
  for model, row in paper.PAPER_ACCURACY.items():
    assert row["pathx"] is None
    mean = sum(row[t] for t in FIVE) / 5
    # The paper's own Sinkhorn average does not match its row (51.48 vs the printed 51.39).
    tolerance = 0.09 if model == "sinkhorn" else 0.006
    assert abs(mean - paper.PAPER_AVG5[model]) < tolerance, model
  assert set(paper.PAPER_SPEED) == set(paper.PAPER_MEMORY)
  assert "longformer" not in paper.PAPER_SPEED
  assert paper.PAPER_SPEED["transformer"][1024] == 8.1
  assert paper.PAPER_MEMORY["performer"][4096] == 1.06


def test_report_does_not_import_jax():
  code = ("import sys, lra.reporting.accuracy, lra.reporting.charts, lra.reporting.files, "
          "lra.reporting.markdown, lra.reporting.results; assert 'jax' not in sys.modules")
  subprocess.run([sys.executable, "-c", code], check=True,
                 cwd=os.path.dirname(os.path.dirname(__file__)))


@pytest.fixture
def sweep(tmp_path):
  """Runs of three models; returns (collected results, warnings, tmp_path)."""
  # Transformer: all five, no Path-X. Local: four only. Performer: all six.
  scores = {"listops": 0.40, "text": 0.60, "retrieval": 0.50, "image": 0.30,
            "pathfinder": 0.70}
  for task, acc in scores.items():
    _write_run(tmp_path / "sweep", f"transformer_{task}", "transformer", task, acc, acc)
    _write_run(tmp_path / "sweep", f"performer_{task}", "performer", task, acc, acc)
  for task in FIVE[:4]:
    _write_run(tmp_path / "sweep", f"local_{task}", "local", task, 0.2, 0.2)
  _write_run(tmp_path / "sweep", "performer_pathx", "performer", "pathx", 0.62, 0.61)
  # A second ListOps transformer run: better test accuracy but worse validation, so it loses.
  _write_run(tmp_path / "other", "transformer_listops_b", "transformer", "listops", 0.90, 0.10)
  # A second Image run with better validation: it wins although its test accuracy is lower.
  _write_run(tmp_path / "other", "transformer_image_b", "transformer", "image", 0.25, 0.99)
  unfinished = tmp_path / "sweep" / "unfinished"
  unfinished.mkdir()
  (unfinished / "metrics.jsonl").write_text("{}\n")
  (tmp_path / "empty").mkdir()
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path / "sweep"), str(tmp_path / "other"),
                                   str(tmp_path / "empty"), str(tmp_path / "nope")], warnings,
                                  references=paper_configs)
  return found, warnings, tmp_path


def test_collect_warns_and_keeps_the_best_on_validation(sweep):
  found, warnings, root = sweep
  assert len(found) == 5 + 5 + 1 + 4
  assert any("unfinished" in w for w in warnings)
  assert any(str(root / "empty") in w for w in warnings)
  assert any("nope" in w for w in warnings)
  assert sum("two runs" in w for w in warnings) == 2
  by_key = {(r["model"], r["task"]): r for r in found}
  assert by_key[("transformer", "listops")]["test_accuracy"] == 0.40
  assert by_key[("transformer", "image")]["test_accuracy"] == 0.25
  assert by_key[("transformer", "image")]["superseded"]


def test_accuracy_table_cells_and_averages(sweep):
  table = accuracy.accuracy_table(sweep[0], references=paper_configs)
  t = _row(table, "transformer")
  assert t["cells"]["listops"]["ours"] == pytest.approx(40.0)
  assert t["cells"]["listops"]["diff"] == pytest.approx(40.0 - 36.37)
  assert t["cells"]["pathx"]["ours"] is None and t["cells"]["pathx"]["paper_fail"]
  assert t["avg5"] == pytest.approx((40 + 60 + 50 + 25 + 70) / 5)
  assert t["avg6"] == pytest.approx((40 + 60 + 50 + 25 + 70 + 50) / 6)
  assert t["avg6_pathx_assumed"]
  assert t["paper_avg5"] == 54.39
  assert t["paper_avg6"] == pytest.approx((36.37 + 64.27 + 57.46 + 42.44 + 71.40 + 50) / 6)
  assert t["cells"]["listops"]["run"]["num_train_steps"] == 5000
  assert "L4" in t["cells"]["listops"]["run"]["config"]
  assert t["cells"]["listops"]["run"]["hardware"] == "cpu x1"

  loc = _row(table, "local")
  assert loc["avg5"] is None and loc["avg6"] is None
  assert loc["cells"]["pathfinder"]["ours"] is None

  perf = _row(table, "performer")
  assert perf["avg6"] == pytest.approx((40 + 60 + 50 + 30 + 70 + 62) / 6)
  assert not perf["avg6_pathx_assumed"]
  # Only the models that ran have rows (each beside its paper figures)...
  assert [r["model"] for r in table["rows"]] == ["transformer", "local", "performer"]
  # ... unless every paper row is asked for: those without a run have the paper's figures only.
  every = accuracy.accuracy_table(sweep[0], references=paper_configs, include_paper_models=True)
  assert {r["model"] for r in every["rows"]} >= set(paper.PAPER_MODELS)
  assert _row(every, "bigbird")["cells"]["text"] == {
      "ours": None, "paper": 64.02, "paper_fail": False, "diff": None, "not_comparable": [],
      "run": None}


def test_accuracy_markdown_csv_and_json(sweep):
  table = accuracy.accuracy_table(sweep[0], references=paper_configs)
  out = sweep[2] / "out"
  md = markdown.accuracy_markdown(table)
  line = next(x for x in md.splitlines() if x.startswith("| Transformer "))
  assert "40.0 (36.4, +3.6)" in line
  assert "- (FAIL)" in line  # no Path-X run
  assert "54.4" in line and "†" in line
  loc_line = next(x for x in md.splitlines() if x.startswith("| Local Attention "))
  assert "- (66.6)" in loc_line  # missing Pathfinder shown as missing, not filled
  # No averages; the Checkpoint column last (`?`: these results.json record no tested one).
  assert loc_line.rstrip(" |").endswith("- (46.1) | - (46.7) | ?")
  assert "How each cell was obtained" in md and "5000 steps" in md

  # Flat CSV rows and the JSON helper.
  flat = accuracy.accuracy_rows(table)
  files.write_csv(str(out / "accuracy.csv"), flat)
  with open(out / "accuracy.csv") as f:
    read = list(csv.DictReader(f))
  assert len(read) == len(flat)
  files.write_json(str(out / "accuracy.json"), {"table": table, "nan": float("nan")})
  assert json.loads((out / "accuracy.json").read_text())["nan"] is None


def test_extra_model_without_paper_figures(tmp_path):
  """A model the paper lacks gets its row; a run of a model this repository has no config of
  is marked, as any toy run is, though there is no paper figure to keep it from."""
  _write_run(tmp_path, "s4_listops", "s4", "listops", 0.55, 0.5)
  found = results.collect_results([str(tmp_path)], references=paper_configs)
  table = accuracy.accuracy_table(found, references=paper_configs, include_paper_models=False)
  assert [r["model"] for r in table["rows"]] == ["s4"]
  md = markdown.accuracy_markdown(table)
  assert "| s4 | 55.0* | - |" in md
  assert "no paper-comparable config of model 's4'" in md


def test_chunked_transformer_gets_a_row_of_its_own(tmp_path):
  """Runs of the Transformer's chunked implementation are a row beside the dense one (not a
  second run of one cell, one of which would be dropped), and are not set beside the paper."""
  _write_run(tmp_path, "dense", "transformer", "listops", 0.40, 0.41, full=True)
  chunked = pathlib.Path(_write_run(tmp_path, "chunked", "transformer", "listops", 0.39, 0.40,
                                    full=True)) / "results.json"
  result = json.loads(chunked.read_text())
  result["config"]["model"]["attention"]["implementation"] = "chunked"
  chunked.write_text(json.dumps(result))
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path)], warnings, references=paper_configs)
  assert not warnings
  assert sorted((r["model"], r["mixer"]) for r in found) == [
      ("transformer", "transformer"), ("transformer_chunked", "transformer")]
  table = accuracy.accuracy_table(found, references=paper_configs,
                                 include_paper_models=False)
  row = _row(table, "transformer_chunked")["cells"]["listops"]
  assert row["ours"] == pytest.approx(39.0) and row["paper"] is None
  assert _row(table, "transformer")["cells"]["listops"]["diff"] is not None


def test_mega_chunk_gets_a_row_of_its_own(tmp_path):
  """A Mega run with a chunk size is the Mega-chunk row (the grid's mega_chunk), beside Mega."""
  _write_run(tmp_path, "full", "mega", "listops", 0.60, 0.61, full=False)
  chunked = pathlib.Path(_write_run(tmp_path, "chunk", "mega", "listops", 0.58, 0.59,
                                    full=False)) / "results.json"
  result = json.loads(chunked.read_text())
  result["config"]["model"]["attention"]["chunk_size"] = 128
  chunked.write_text(json.dumps(result))
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path)], warnings, references=paper_configs)
  assert sorted((r["model"], r["mixer"]) for r in found) == [("mega", "mega"),
                                                             ("mega_chunk", "mega")]
  table = accuracy.accuracy_table(found, references=paper_configs, include_paper_models=False)
  assert _row(table, "mega_chunk")["cells"]["listops"]["ours"] == pytest.approx(58.0)
  assert "| Mega-chunk |" in markdown.accuracy_markdown(table)


# ------------------------------------------------- beside the paper only where comparable


def _line(md: str, title: str) -> str:
  return next(l for l in md.splitlines() if l.startswith(f"| {title} |"))


def test_toy_run_is_marked_not_compared_with_the_paper(tmp_path):
  # A 10-step CPU Text run, once shown as "100.0 (64.3, +35.7)".
  toy = paper_config("text", "transformer,cpu", num_train_steps=10)
  write_result(tmp_path, "toy", "text", 1.0, 1.0, toy, test_count=64, train_count=90)
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
  full_runs(tmp_path)
  # The `,paper` option is comparable too; bfloat16 compute and another seed change nothing.
  paper_arg = paper_config("listops", "transformer,paper", seed=3)
  paper_arg["model"]["dtype"] = "bfloat16"
  write_result(tmp_path, "paper_listops", "listops", 0.38, 0.9, paper_arg)
  found = results.collect_results([str(tmp_path)], references=paper_configs)
  table = accuracy.accuracy_table(found, references=paper_configs)
  row = _line(markdown.accuracy_markdown(table), "Transformer")
  # At chance: these runs record a majority rate of 50% (lra.reporting.chance).
  assert "38.0 (at chance) (36.4, +1.6)" in row and "40.0 (at chance) (64.3, -24.3)" in row
  assert "*" not in row


def test_an_average_over_a_marked_cell_is_marked_and_not_compared(tmp_path):
  full_runs(tmp_path)
  (tmp_path / "transformer_image" / "results.json").unlink()
  write_result(tmp_path, "image_cpu", "image", 0.9, 0.9, paper_config("image", "transformer,cpu"))
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
  write_result(tmp_path / "a", "cpu", "listops", 0.60, 0.95,
               paper_config("listops", "transformer,cpu"), train_count=20000)
  full = write_result(tmp_path / "b", "full", "listops", 0.37, 0.38,
                      paper_config("listops", "transformer"))
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path / "a"), str(tmp_path / "b")], warnings,
                                  references=paper_configs)
  assert found[0]["workdir"] == "b/full"  # named within the folder that holds a and b
  assert found[0]["path"] == f"{full}/results.json"
  assert any("full data and the paper's config" in w for w in warnings)
  # Two runs on different data, neither comparable: not by validation, by the data's size.
  write_result(tmp_path / "c", "small", "text", 0.9, 0.99,
               paper_config("text", "transformer,cpu"), train_count=100, test_count=100)
  bigger = write_result(tmp_path / "c", "bigger", "text", 0.6, 0.5,
                        paper_config("text", "transformer,cpu"), train_count=1000,
                        test_count=1000)
  warnings = []
  found = results.collect_results([str(tmp_path / "c")], warnings, references=paper_configs)
  assert found[0]["workdir"] == "bigger" and bigger == str(tmp_path / "c" / "bigger")
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


def test_paper_rows_of_the_models_that_ran_unless_all_are_asked_for(capsys, tmp_path):
  result(tmp_path / "runs", "performer", "listops", 0.4)
  code, out, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"),
                            f"--out={tmp_path / 'out'}")
  assert code == 0, err
  rows = [l for l in out.splitlines() if l.startswith("| ") and not l.startswith("| Model")]
  assert [r.split(" | ")[0] for r in rows] == ["| Performer"]
  assert "- (65.4)" in rows[0]  # the paper's Text figure, beside no run of ours
  code, out, err = run_eval(capsys, "accuracy", str(tmp_path / "runs"), "--all_paper_rows",
                            f"--out={tmp_path / 'out'}")
  assert code == 0, err
  assert "| Transformer |" in out and "| BigBird |" in out
