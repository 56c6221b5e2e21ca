"""Seeds in the accuracy table: runs of one cell that differ only in config.seed are pooled
(mean +- sample std and n, in the markdown, JSON and CSV), runs that differ in more are chosen
among as before, and the bubble chart draws the spread. Made-up results.json files: no JAX."""
import csv
import importlib
import json
import math
import pathlib

import pytest
from PIL import Image

from lra.data.tasks import FACTS
from lra.commands.references import paper_configs
from lra.reporting import accuracy, charts, markdown, results, seeds

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
  assert all(f"`{d}`" in md for d in dirs) and "seed 2 47.0%" in md
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
    assert other in cell["run"]["superseded"]
  else:
    assert (cell["ours"], cell["std"], cell["n"]) == (pytest.approx(90.0), None, 1)
    assert cell["run"]["workdir"] == other and len(cell["run"]["superseded"]) == 3
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
  assert [s["workdir"] for s in found[0]["seeds"]] == [better, str(runs / "c")]
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
