"""Seeds in the accuracy table: runs of one cell that differ only in config.seed are pooled
(mean +- sample std and n, in the markdown, JSON and CSV), runs that differ in more are chosen
among as before, and the bubble chart draws the spread; each cell says how many of its runs
are at chance and each row which checkpoint its runs tested. Made-up results.json files: no
JAX."""
import csv
import fractions
import importlib
import json
import math
import os
import pathlib

import pytest
from PIL import Image

from lra.data.tasks import FACTS
from lra.commands.references import paper_configs
from lra.reporting import accuracy, chance, charts, markdown, results, seeds

EVAL = importlib.import_module("eval")
FIVE = ("listops", "text", "retrieval", "image", "pathfinder")


def _config(task: str, model: str = "transformer", **changes) -> dict:
  """The task config's base option for `model` as results.json records it (paper-comparable)."""
  config = json.loads(json.dumps(
      importlib.import_module(f"lra.configs.{task}").get_config(model).to_dict()))
  for key, value in changes.items():  # "model.dtype" reaches into the nested dicts
    *parents, last = key.split(".")
    node = config
    for part in parents:
      node = node[part]
    node[last] = value
  return config


def _result(root, name: str, task: str, test: float, val: float, config: dict) -> str:
  """A finished run on the task's full data; returns its workdir."""
  run = root / name
  run.mkdir(parents=True)
  (run / "results.json").write_text(json.dumps({
      "task": task, "model": config["model"]["name"], "test_accuracy": test,
      "best_val_accuracy": val, "best_step": 100, "num_train_steps": config["num_train_steps"],
      "test_count": FACTS[task].test_size, "train_count": FACTS[task].train_size,
      "config": config}))
  return str(run)


def _collect(root) -> tuple[list[dict], list[str]]:
  warnings: list[str] = []
  return results.collect_results([str(root)], warnings, references=paper_configs), warnings


def _cell(found: list[dict], task: str = "listops") -> dict:
  table = accuracy.accuracy_table(found, references=paper_configs, include_paper_models=False)
  return table["rows"][0]["cells"][task]


def test_three_seeds_are_pooled_with_mean_sample_std_and_n(tmp_path):
  dirs = [_result(tmp_path / "runs", f"seed{seed}", "listops", test, 0.4,
                  _config("listops", seed=seed))
          for seed, test in ((0, 0.40), (1, 0.42), (2, 0.47))]
  found, warnings = _collect(tmp_path / "runs")
  assert not warnings and len(found) == 1
  assert [s["seed"] for s in found[0]["seeds"]] == [0, 1, 2]
  cell = _cell(found)
  # Mean 43; deviations -3, -1, +4: sample variance (9 + 1 + 16) / (3 - 1) = 13.
  assert cell["ours"] == pytest.approx(43.0) and cell["n"] == 3
  assert cell["std"] == pytest.approx(math.sqrt(13))
  assert cell["diff"] == pytest.approx(43.0 - 36.37) and not cell["not_comparable"]

  table, md = accuracy.write_tables(found, tmp_path / "out", paper_configs)
  assert "| Transformer | 43.0 ± 3.6 (n=3) (36.4, +6.6) |" in md
  assert seeds.SEED_RULE in md and results.CHOICE_RULE not in md  # nothing was chosen
  # Each seed's run named relative to the folder read, never by its absolute path.
  assert all(f"`{os.path.basename(d)}`" in md for d in dirs) and "seed 2 47.0%" in md
  assert str(tmp_path) not in md
  saved = json.loads((tmp_path / "out" / "accuracy.json").read_text())
  cell = saved["rows"][0]["cells"]["listops"]
  assert (cell["n"], round(cell["std"], 4)) == (3, round(math.sqrt(13), 4))
  assert [s["seed"] for s in cell["run"]["seeds"]] == [0, 1, 2]
  with open(tmp_path / "out" / "accuracy.csv") as f:
    row = next(r for r in csv.DictReader(f) if r["task"] == "listops")
  assert float(row["ours"]) == pytest.approx(43.0) and row["n"] == "3"
  assert float(row["std"]) == pytest.approx(math.sqrt(13)) and row["seeds"] == "[0, 1, 2]"


@pytest.mark.parametrize("other_val, pooled", [(0.30, True), (0.99, False)])
def test_runs_that_differ_in_more_than_the_seed_are_not_pooled(tmp_path, other_val, pooled):
  runs = tmp_path / "runs"
  _result(runs, "a_seed0", "listops", 0.40, 0.40, _config("listops", seed=0))
  _result(runs, "a_seed1", "listops", 0.42, 0.40, _config("listops", seed=1))
  # Another compute dtype (still comparable with the paper) and other generated data.
  other = _result(runs, "b_bf16", "listops", 0.90, other_val,
                  _config("listops", seed=2, **{"model.dtype": "bfloat16"}))
  _result(runs, "c_data", "listops", 0.10, 0.99, _config("listops", seed=3, **{"data.seed": 5}))
  found, warnings = _collect(runs)
  cell = _cell(found)
  if pooled:  # the two seeds' mean validation accuracy beats the bfloat16 run's
    assert (cell["ours"], cell["n"]) == (pytest.approx(41.0), 2)
    assert cell["std"] == pytest.approx(math.sqrt(2))
    assert os.path.basename(other) in cell["run"]["superseded"]
  else:
    assert (cell["ours"], cell["std"], cell["n"]) == (pytest.approx(90.0), None, 1)
    assert cell["run"]["workdir"] == os.path.basename(other)
    assert len(cell["run"]["superseded"]) == 3
    md = markdown.accuracy_markdown(accuracy.accuracy_table(found, references=paper_configs))
    assert "| Transformer | 90.0 (36.4, +53.6) |" in md and "±" not in md
  assert len(warnings) == 2 and "runs of other settings" in warnings[0]
  assert "different data" in warnings[1]  # another data.seed: never chosen by validation


def test_a_repeated_seed_is_chosen_and_a_run_without_a_seed_is_never_pooled(tmp_path):
  runs = tmp_path / "runs"
  _result(runs, "a", "listops", 0.30, 0.30, _config("listops", seed=0))
  better = _result(runs, "b", "listops", 0.50, 0.60, _config("listops", seed=0))
  _result(runs, "c", "listops", 0.40, 0.40, _config("listops", seed=1))
  found, warnings = _collect(runs)
  assert [s["workdir"] for s in found[0]["seeds"]] == [os.path.basename(better), "c"]
  assert _cell(found)["ours"] == pytest.approx(45.0)
  assert len(warnings) == 1 and "two runs" in warnings[0]
  unseeded = [{"task": "listops", "model": "transformer", "workdir": name,
               "config": {"num_train_steps": 1}} for name in ("x", "y")]
  assert seeds.groups(unseeded) == [[unseeded[0]], [unseeded[1]]]


SPEED = {"machine": {"device_kind": "cpu", "batch": 32},
         "rows": [{"model": m, "length": 1024, "status": "ok", "steps_per_s": steps,
                   "compiled_memory_bytes": 5 * 10**8}
                  for m, steps in (("transformer", 0.02), ("performer", 0.03))]}


def test_the_bubble_chart_draws_the_spread_over_seeds(tmp_path, monkeypatch):
  runs, stds = tmp_path / "runs", []
  for i, task in enumerate(FIVE):
    tests = (0.40, 0.40 + 0.01 * (i + 1), 0.45)
    for seed, test in enumerate(tests):
      _result(runs, f"transformer_{task}_{seed}", task, test, 0.4, _config(task, seed=seed))
    stds.append(seeds.mean_std([100 * t for t in tests])[1])
    _result(runs, f"performer_{task}", task, 0.5, 0.5, _config(task, "performer"))
  (tmp_path / "speed.json").write_text(json.dumps(SPEED))
  drawn = []
  real = charts.bubble_chart
  monkeypatch.setattr(charts, "bubble_chart", lambda *a, **k: drawn.append(real(*a, **k)))
  EVAL.main(["accuracy", str(runs), f"--speed={tmp_path / 'speed.json'}",
             f"--out={tmp_path / 'out'}"])
  (chart,) = drawn
  # The average's bar: its five cells' spread combined as independent draws.
  expected = math.sqrt(sum(s * s for s in stds)) / 5
  assert chart["error_bars"] == {"transformer": pytest.approx(expected)}
  assert any(n.startswith("Error bars: ± the sample standard deviation over seeds (n = 3)")
             for n in chart["notes"])
  with Image.open(tmp_path / "out" / "bubble.png") as png:
    assert png.format == "PNG" and png.size[0] > 400


def test_self_pretrained_seeds_from_their_own_pretrainings_are_pooled(tmp_path):
  """Each seed of an SPT cell starts from its own seed's pretraining (init_from differs):
  pooled by the objective they start from; a run from scratch stays apart."""
  for seed, test in ((0, 0.50), (1, 0.46)):
    workdir = _result(tmp_path / "runs", f"spt{seed}", "listops", test, 0.5,
                      _config("listops", seed=seed, init_from=f"/runs/pretrain{seed}"))
    record = json.loads((pathlib.Path(workdir) / "results.json").read_text())
    record["init"] = {"workdir": f"/runs/pretrain{seed}", "objective": "denoise"}
    (pathlib.Path(workdir) / "results.json").write_text(json.dumps(record))
  found, _ = _collect(tmp_path / "runs")
  assert len(found) == 1 and [s["seed"] for s in found[0]["seeds"]] == [0, 1]
  _result(tmp_path / "runs", "scratch2", "listops", 0.44, 0.5, _config("listops", seed=2))
  found, _ = _collect(tmp_path / "runs")
  assert max(len(r.get("seeds") or []) for r in found) == 2  # scratch is not pooled in


# At chance (lra.reporting.chance) and the checkpoint tested, through `eval.py accuracy`.
FINAL = "the final state (step {}): no copy of the best-on-validation checkpoint (step {}) restores"


def _run(root, name: str, task: str, test: float, config: dict, **fields) -> str:
  """_result's run with more results.json fields (test_majority_rate, tested_checkpoint...)."""
  workdir = pathlib.Path(_result(root, name, task, test, 0.4, config))
  record = json.loads((workdir / "results.json").read_text())
  (workdir / "results.json").write_text(json.dumps({**record, **fields}))
  return str(workdir)


def _accuracy(tmp_path) -> tuple[dict, str, list[dict]]:
  """(accuracy.json, accuracy.md, accuracy.csv rows) as `eval.py accuracy RUNS` writes them."""
  out = tmp_path / "out"
  EVAL.main(["accuracy", str(tmp_path / "runs"), f"--out={out}"])
  with open(out / "accuracy.csv") as f:
    rows = list(csv.DictReader(f))
  return (json.loads((out / "accuracy.json").read_text()), (out / "accuracy.md").read_text(),
          rows)


def _line(md: str, title: str) -> str:
  return next(l for l in md.splitlines() if l.startswith(f"| {title} |"))


def test_a_cell_of_five_seeds_with_two_at_chance_reports_2_of_5(tmp_path):
  # ListOps' 2000 test examples, 17.5% of them the majority class: 18.0% is 0.5 points above
  # it, well inside binomial noise (the 1% margin there is 2.05 points); 40% is far above.
  tests = (0.17, 0.18, 0.40, 0.45, 0.50)
  for seed, test in enumerate(tests):
    _run(tmp_path / "runs", f"seed{seed}", "listops", test, _config("listops", seed=seed),
         test_majority_rate=0.175, tested_checkpoint=f"/runs/seed{seed}/best/100",
         tested_step=100)
  table, md, rows = _accuracy(tmp_path)
  cell = table["rows"][0]["cells"]["listops"]
  assert (cell["n"], cell["at_chance"], cell["chance_judged"]) == (5, 2, 5)
  assert [s["at_chance"] for s in cell["run"]["seeds"]] == [True, True, False, False, False]
  assert cell["run"]["seeds"][0]["majority_rate"] == pytest.approx(17.5)
  assert "| Transformer | 34.0 ± 15.5 (n=5, 2/5 at chance) (36.4, -2.4) |" in _line(
      md, "Transformer")
  assert chance.CHANCE_RULE in md and "seed 1 18.0% (at chance) `" in md
  (row,) = [r for r in rows if r["task"] == "listops"]
  assert (row["n"], row["at_chance"], row["chance_judged"]) == ("5", "2", "5")
  assert row["checkpoint"] == "best" and json.loads(row["checkpoint_counts"]) == {"best": 5}
  assert "0.01" in chance.CHANCE_RULE and "test_majority_rate" in chance.CHANCE_RULE


def _exact_tail(k: int, n: int) -> fractions.Fraction:
  """P[X >= k], X ~ Binomial(n, 1/2), exactly."""
  return fractions.Fraction(sum(math.comb(n, i) for i in range(k, n + 1)), 2 ** n)


def test_the_chance_rule_at_its_edge_and_a_single_run_cell(tmp_path):
  """200 test examples, half of them the majority class: the least k right whose exact
  one-sided binomial tail is <= 1% (computed here with integers) has left chance; one fewer
  has not. A cell of one run says `at chance` when it is, nothing when it is not."""
  n = 200
  edge = next(k for k in range(n // 2, n + 1) if _exact_tail(k, n) <= fractions.Fraction(1, 100))
  assert _exact_tail(edge - 1, n) > fractions.Fraction(1, 100)  # 117: 58.5% is the edge
  assert chance.binomial_tail(edge, n, 0.5) == pytest.approx(float(_exact_tail(edge, n)))
  for task, k in (("text", edge), ("retrieval", edge - 1)):
    _run(tmp_path / "runs", task, task, k / n, _config(task), test_count=n,
         test_majority_rate=0.5)
  _run(tmp_path / "runs", "image", "image", 0.6, _config("image"))  # records no majority rate
  table, md, rows = _accuracy(tmp_path)
  cells = table["rows"][0]["cells"]
  assert (cells["text"]["at_chance"], cells["text"]["chance_judged"]) == (0, 1)
  assert (cells["retrieval"]["at_chance"], cells["retrieval"]["chance_judged"]) == (1, 1)
  assert (cells["image"]["at_chance"], cells["image"]["chance_judged"]) == (None, 0)
  line = _line(md, "Transformer")
  # Tested on 200 of the full test sets: marked `*`, never beside the paper.
  assert f"| {100 * edge / n:.1f}* | {100 * (edge - 1) / n:.1f} (at chance)* |" in line
  assert "| 60.0 (42.4, +17.6) |" in line  # not judged: no mark
  assert "Not judged for chance (no test_majority_rate or test_count in results.json): " \
         "Transformer / Image." in md
  by_task = {r["task"]: r for r in rows}
  assert (by_task["text"]["at_chance"], by_task["retrieval"]["at_chance"]) == ("0", "1")
  assert by_task["image"]["at_chance"] == "" and by_task["image"]["chance_judged"] == "0"


def test_the_checkpoint_column_best_last_and_mixed(tmp_path):
  runs = tmp_path / "runs"
  best = {"tested_checkpoint": "/w/best/100", "tested_step": 100}
  last = {"tested_checkpoint": FINAL.format(200, 100), "tested_step": 200}
  # A final state tested at the best step is the best-on-validation one.
  at_best = {"tested_checkpoint": FINAL.format(100, 100), "tested_step": 100}
  for task in ("listops", "text"):
    _run(runs, f"transformer_{task}", task, 0.6, _config(task), **best)
    _run(runs, f"performer_{task}", task, 0.6, _config(task, "performer"), **last)
  _run(runs, "linformer_listops", "listops", 0.6, _config("listops", "linformer"), **at_best)
  for seed, fields in enumerate((best, last)):  # a cell whose seeds tested different ones
    _run(runs, f"linformer_text{seed}", "text", 0.6, _config("text", "linformer", seed=seed),
         **fields)
  table, md, rows = _accuracy(tmp_path)
  by_model = {r["model"]: r for r in table["rows"]}
  assert [by_model[m]["checkpoint"] for m in ("transformer", "performer", "linformer")] == [
      "best", "last", "mixed"]
  text = by_model["linformer"]["cells"]["text"]
  assert text["checkpoint"] == "mixed" and text["checkpoint_counts"] == {"best": 1, "last": 1}
  assert [s["checkpoint"] for s in text["run"]["seeds"]] == ["best", "last"]
  assert by_model["linformer"]["cells"]["listops"]["checkpoint"] == "best"
  assert "| Checkpoint |" in md.splitlines()[0]
  assert _line(md, "Transformer").endswith("| best val |")
  assert _line(md, "Performer").endswith("| last |")
  assert _line(md, "Linformer").endswith(
      "| mixed: best val (ListOps, Text 1/2); last (Text 1/2) |")
  assert results.CHECKPOINT_RULE in md and "seed 1 60.0% (tested the last state) `" in md
  flat = {(r["model"], r["task"]): r for r in rows}
  assert flat[("performer", "text")]["checkpoint"] == "last"
  assert flat[("linformer", "text")]["checkpoint"] == "mixed"
  assert json.loads(flat[("linformer", "text")]["checkpoint_counts"]) == {"best": 1, "last": 1}
  assert flat[("linformer", "avg5")]["checkpoint"] == "mixed"  # the row's
  assert flat[("transformer", "avg6")]["checkpoint"] == "best"
