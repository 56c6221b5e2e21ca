"""The grid's sweep axis (--sweep KEY=V1,V2,...): the points' folder names, commands, workdirs
and SLURM tasks, the one-line refusals, a finished point skipped; linked keys (--sweep
KEY1,KEY2=(..),(..)) moving together; the table's choice per seed on validation with the
spread over the sweep, and the chart of accuracy against each swept key or linked keys
(made-up results.json files: no JAX); and one slow grid of two models x two learning rates x
two widths on tiny MQAR, killed in a point and resumed."""
import importlib
import itertools
import json
import os
import shlex
import statistics

import pytest

from lra import sweep_names
from lra.commands import leaderboard, sweep_axis
from lra.commands.references import paper_configs
from lra.reporting import accuracy, chance, results, sweep_chart, sweeps
from tests import commands
from tests.commands import ROOT

EVAL = importlib.import_module("eval")
MQAR = ["--models=transformer,s5", "--tasks=mqar", "--preset=cpu"]
AXIS = ["--sweep", "learning_rate=1e-3,3e-3", "--sweep=model.emb_dim=16,32"]
POINTS = ["learning_rate=0.001,model.emb_dim=16", "learning_rate=0.001,model.emb_dim=32",
          "learning_rate=0.003,model.emb_dim=16", "learning_rate=0.003,model.emb_dim=32"]


# ------------------------------------------------------------------ folder names of points

def test_point_names_are_readable_safe_and_read_back():
  values = {"model.positions": "a/b,c=d_e f", "learning_rate": 0.001, "model.w": (1, 2),
            "flag": True}
  name = sweep_names.point_name(values)
  assert name == ("flag=True,learning_rate=0.001,model.positions=a%2Fb%2Cc%3Dd%5Fe%20f,"
                  "model.w=%281%2C%202%29")  # keys sorted, every unsafe character encoded
  assert "/" not in name and name.count(",") == 3 and name.count("_") == 1  # learning_rate
  recorded = {"flag": True, "learning_rate": 1e-3, "model.positions": "a/b,c=d_e f",
              "model.w": [1, 2], "other": 5}  # a tuple as JSON records it
  assert sweep_names.matches(name, recorded) == {k: recorded[k] for k in values}
  assert sweep_names.matches(name + "_spt", recorded) is not None  # a --protocol stage
  assert sweep_names.matches(name, {**recorded, "learning_rate": 0.003}) is None
  for other in ("transformer-cpu", "transformer-cpu_seed1", "a=1,a=2", "learning_rate",
                "x=1_2=3"):
    assert sweep_names.parse_point(other) is None, other
  assert sweep_names.matches("learning_rate=0.001", {"learning_rate": 0.001}) == {
      "learning_rate": 0.001}


# ------------------------------------------------------------------ the plan

def test_sweep_commands_workdirs_and_slurm_tasks(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  args = [*MQAR, "--root=runs/grid", *AXIS, "--seeds=0,1", "--config.num_train_steps=10"]
  leaderboard.main([*args, "--print_commands"])
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  expected = []
  for seed, model, point in itertools.product((0, 1), ("transformer", "s5"), POINTS):
    folder = f"{model}-cpu" + ("_seed1" if seed else "")
    lr, width = (item.split("=")[1] for item in point.split(","))
    expected.append([f"--config=configs/mqar.py:{model},cpu",
                     f"--workdir=runs/grid/mqar/{folder}_sweep/{point}",
                     "--config.num_train_steps=10", f"--config.seed={seed}",
                     f"--config.learning_rate={lr}", f"--config.model.emb_dim={width}"])
  assert [line[2:] for line in lines] == expected
  runs = leaderboard.plan(leaderboard.parse_args(args))
  assert runs[1].name == "mqar/transformer-cpu_sweep/learning_rate=0.001,model.emb_dim=32"
  assert dict(runs[1].expect)["learning_rate"] == 0.001  # a number, as results.json has it
  leaderboard.main([*args, f"--slurm={tmp_path / 'grid.sbatch'}"])
  assert "a SLURM array of 16 runs" in capsys.readouterr().out
  assert "#SBATCH --array=0-15\n" in (tmp_path / "grid.sbatch").read_text()


def test_a_finished_point_is_skipped_and_another_value_is_not(tmp_path):
  runs = leaderboard.plan(leaderboard.parse_args(
      ["--models=s5", "--tasks=mqar", "--preset=cpu", f"--root={tmp_path}", *AXIS]))
  assert [os.path.basename(r.workdir) for r in runs] == POINTS
  run = runs[2]
  os.makedirs(run.workdir)
  config = {"seed": 0, "learning_rate": 0.003, "model": {"emb_dim": 16},
            "num_train_steps": dict(run.expect)["num_train_steps"]}
  record = {"task": "mqar", "model": "s5", "test_accuracy": 0.5, "config": config}
  (tmp_path / "mqar" / "s5-cpu_sweep" / POINTS[2] / "results.json").write_text(
      json.dumps(record))
  assert leaderboard.finished(run) == (record, "")
  config["learning_rate"] = 0.001  # a run of another point in this folder
  (tmp_path / "mqar" / "s5-cpu_sweep" / POINTS[2] / "results.json").write_text(
      json.dumps(record))
  assert leaderboard.finished(run) == (
      None, "its results.json records learning_rate=0.001, this grid asks for 0.003")


@pytest.mark.parametrize("sweep, extra, words", [
    (["--sweep", "learning_rat=1e-3"], [], "has no key 'learning_rat' (did you mean "
     "'learning_rate'?)"),
    (["--sweep", "learning_rate=1e-3,abc"], [], "'abc' for the mqar/transformer config: "
     "--config.learning_rate=abc: config.learning_rate takes a number"),
    (["--sweep", "model.emb_dim=16,0.5"], [], "config.model.emb_dim takes an integer"),
    (["--sweep", "learning_rate=1e-3"], ["--config.learning_rate=1e-2"],
     "the runs of mqar/transformer also get learning_rate from a --config.learning_rate"),
    (["--sweep", "learning_rate=1e-3"], ["--config.learning_rate@s5=1e-2"],
     "the runs of mqar/s5 also get learning_rate"),
    (["--sweep", "learning_rate="], [], "an empty list or value"),
    (["--sweep", "learning_rate=1e-3,,3e-3"], [], "an empty list or value"),
    (["--sweep", "learning_rate=1e-3,1e-3"], [], "1e-3 is given twice"),
    (["--sweep", "learning_rate=1e-3,0.001"], [], "1e-3 and 0.001 are the same value (0.001)"),
    (["--sweep", "learning_rate"], [], "give KEY=V1,V2,..."),
    (["--sweep", "learning_rate=1e-3", "--sweep", "learning_rate=3e-3"], [],
     "learning_rate is swept by another --sweep too"),
    (["--sweep", "seed=0,1"], [], "--seeds gives each run its seed"),
    (["--sweep", "model=1,2"], [], "config.model is a section"),
])
def test_bad_sweeps_are_one_line_before_anything_runs(tmp_path, capsys, sweep, extra, words):
  with pytest.raises(SystemExit) as exit_info:
    leaderboard.main([*MQAR, f"--root={tmp_path / 'grid'}", *sweep, *extra])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith("error: --sweep ") and words in err[0], err
  assert not (tmp_path / "grid").exists()


# ------------------------------------------------------------------ linked keys: the plan

WIDTHS = ["--sweep", "model.emb_dim,model.qkv_dim=(16,16),(32,32)"]


@pytest.mark.parametrize("order", ["widths first", "learning rate first"])
def test_linked_keys_move_together_in_points_commands_and_slurm(tmp_path, monkeypatch, capsys,
                                                                order):
  monkeypatch.chdir(ROOT)
  lrs = ["--sweep", "learning_rate=1e-3,3e-3"]
  axis = WIDTHS + lrs if order == "widths first" else lrs + WIDTHS
  args = [*MQAR, "--root=runs/grid", *axis, "--config.num_train_steps=10"]
  leaderboard.main([*args, "--print_commands"])
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  expected, points = [], []
  pairs = itertools.product(("0.001", "0.003"), (16, 32))  # 4 points per cell, not 8
  if order == "widths first":  # the first flag's values vary slowest
    pairs = sorted(pairs, key=lambda pair: pair[1])
  for model, (lr, width) in itertools.product(("transformer", "s5"), list(pairs)):
    points.append(f"learning_rate={lr},model.emb_dim={width},model.qkv_dim={width}")
    expected.append([f"--config=configs/mqar.py:{model},cpu",
                     f"--workdir=runs/grid/mqar/{model}-cpu_sweep/learning_rate={lr},"
                     f"model.emb_dim={width},model.qkv_dim={width}",
                     "--config.num_train_steps=10", f"--config.learning_rate={lr}",
                     f"--config.model.emb_dim={width}", f"--config.model.qkv_dim={width}"])
  assert [line[2:] for line in lines] == expected
  runs = leaderboard.plan(leaderboard.parse_args(args))
  assert [r.point for r in runs] == points and len(set(points)) == 4
  for run in runs:  # each point's results.json must record both widths, equal
    expect = dict(run.expect)
    assert expect["model.emb_dim"] == expect["model.qkv_dim"] in (16, 32)
  leaderboard.main([*args, f"--slurm={tmp_path / 'grid.sbatch'}"])
  assert "a SLURM array of 8 runs" in capsys.readouterr().out
  assert "#SBATCH --array=0-7\n" in (tmp_path / "grid.sbatch").read_text()


def test_three_linked_widths_and_a_single_keys_tuple_value():
  runs = leaderboard.plan(leaderboard.parse_args(
      ["--models=s5", "--tasks=mqar", "--preset=cpu", "--sweep",
       "model.qkv_dim, model.emb_dim ,model.mlp_dim=(16,16,64),( 32 , 32, 128 )"]))
  assert [r.point for r in runs] == [
      "model.emb_dim=16,model.mlp_dim=64,model.qkv_dim=16",
      "model.emb_dim=32,model.mlp_dim=128,model.qkv_dim=32"]  # each value with its key
  # One key: a parenthesised value is that key's tuple value, as without linked keys.
  (axis,) = sweep_axis.parse(["model.w=(1, 2),(3,4)"])
  assert (axis.keys, axis.groups) == (("model.w",), (("(1, 2)",), ("(3,4)",)))
  (axis,) = sweep_axis.parse(["a,b=((1, 2),'x,y'),((3,4),z)"])  # brackets and quotes kept
  assert axis.groups == (("(1, 2)", "'x,y'"), ("(3,4)", "z"))


@pytest.mark.parametrize("sweep, extra, words", [
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,16,16),(32,32)"], [],
     "(16,16,16) holds 3 values for 2 keys; give one value per key"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16),(32,32)"], [], "(16) holds 1 values"),
    (["--sweep", "model.emb_dim,model.qkv_dim=16,32"], [], "16 is not in parentheses"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,16),32"], [], "32 is not in parentheses"),
    (["--sweep", "model.emb_dim,model.emb_dim=(16,16)"], [],
     "model.emb_dim is given twice among the linked keys"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,16)", "--sweep", "model.qkv_dim=32"], [],
     "model.qkv_dim is swept by another --sweep too"),
    (["--sweep", "learning_rate=1e-3", "--sweep", "model.emb_dim,learning_rate=(16,1e-3)"],
     [], "learning_rate is swept by another --sweep too"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(),(32,32)"], [], "() is an empty group"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,),(32,32)"], [], "(16,) is an empty group"),
    (["--sweep", "model.emb_dim,model.qkv_dim="], [], "an empty list or value"),
    (["--sweep", "model.emb_dim,=(16,16)"], [], "give KEY=V1,V2,..."),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,16),(16, 16)"], [], "(16,16) is given twice"),
    (["--sweep", "learning_rate,model.emb_dim=(1e-3,16),(0.001,16)"], [],
     "(1e-3,16) and (0.001,16) are the same values (0.001, 16)"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,abc)"], [],
     "'abc' for the mqar/transformer config"),
    (["--sweep", "model.emb_dim,model.qkv_dim=(16,16)"], ["--config.model.qkv_dim=8"],
     "the runs of mqar/transformer also get model.qkv_dim from a --config.model.qkv_dim"),
    (["--sweep", "learning_rate,seed=(1e-3,0)"], [], "--seeds gives each run its seed"),
])
def test_bad_linked_sweeps_are_one_line_naming_the_flag(tmp_path, capsys, sweep, extra, words):
  test_bad_sweeps_are_one_line_before_anything_runs(tmp_path, capsys, sweep, extra, words)


# ------------------------------------------------------------------ the table and the chart

TEST_COUNT = 1000


def _point_run(root, model: str, seed: int, lr: float, width: int, val: float, test: float):
  """A finished MQAR run of one point, in the folder the grid gives it."""
  folder = root / "mqar" / f"{model}-cpu{'_seed1' if seed else ''}_sweep" / (
      f"learning_rate={lr!r},model.emb_dim={width}")
  folder.mkdir(parents=True)
  config = {"seed": seed, "learning_rate": lr, "num_train_steps": 100,
            "model": {"name": model, "emb_dim": width}, "data": {"max_len": 64}}
  (folder / "results.json").write_text(json.dumps({
      "task": "mqar", "model": model, "test_accuracy": test, "best_val_accuracy": val,
      "best_step": 100, "num_train_steps": 100, "test_count": TEST_COUNT,
      "test_majority_rate": 0.1, "train_count": 64, "config": config}))


# (model, seed, lr, width) -> (val, test): S5 chooses other points per seed, and one of its
# points stays at chance (test 10% = the majority rate) in both seeds.
FIGURES = {
    ("transformer", 0, 1e-3, 16): (0.50, 0.48), ("transformer", 0, 1e-3, 32): (0.90, 0.88),
    ("transformer", 0, 3e-3, 16): (0.70, 0.95), ("transformer", 0, 3e-3, 32): (0.60, 0.62),
    ("transformer", 1, 1e-3, 16): (0.40, 0.41), ("transformer", 1, 1e-3, 32): (0.80, 0.84),
    ("transformer", 1, 3e-3, 16): (0.70, 0.70), ("transformer", 1, 3e-3, 32): (0.65, 0.66),
    ("s5", 0, 1e-3, 16): (0.10, 0.10), ("s5", 0, 1e-3, 32): (0.30, 0.33),
    ("s5", 0, 3e-3, 16): (0.45, 0.40), ("s5", 0, 3e-3, 32): (0.35, 0.50),
    ("s5", 1, 1e-3, 16): (0.11, 0.10), ("s5", 1, 1e-3, 32): (0.60, 0.55),
    ("s5", 1, 3e-3, 16): (0.20, 0.25), ("s5", 1, 3e-3, 32): (0.50, 0.52),
}


def _expected(model: str, keep=lambda key: True) -> tuple[list[tuple], float]:
  """(the chosen (seed, lr, width) per seed, their mean test %): written plainly here."""
  chosen = []
  for seed in (0, 1):
    mine = [k for k in FIGURES if k[0] == model and k[1] == seed and keep(k)]
    chosen.append(max(mine, key=lambda k: FIGURES[k][0])[1:])
  return chosen, statistics.fmean(100 * FIGURES[(model, *c)][1] for c in chosen)


@pytest.fixture
def swept(tmp_path):
  for key, (val, test) in FIGURES.items():
    _point_run(tmp_path / "runs", *key, val, test)
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path / "runs")], warnings, references=paper_configs)
  assert warnings == []
  table, text = accuracy.write_tables(found, tmp_path / "out", paper_configs)
  return table, text, tmp_path


def test_the_table_chooses_each_seeds_point_on_validation_and_shows_the_spread(swept):
  table, text, _ = swept
  rows = {row["model"]: row for row in table["sweeps"]}
  for model in ("transformer", "s5"):
    chosen, mean = _expected(model)
    cell = next(r for r in table["beyond"]["rows"] if r["model"] == model)["cells"]["mqar"]
    assert cell["ours"] == pytest.approx(mean) and cell["n"] == 2
    assert [(c["seed"], c["name"]) for c in rows[model]["chosen"]] == [
        (seed, f"learning_rate={lr!r},model.emb_dim={w}") for seed, (_, lr, w) in
        zip((0, 1), chosen)]
    points = {k[2:]: [FIGURES[(model, s, *k[2:])] for s in (0, 1)] for k in FIGURES
              if k[0] == model}
    tests = [statistics.fmean(100 * t for _, t in p) for p in points.values()]
    vals = [statistics.fmean(100 * v for v, _ in p) for p in points.values()]
    spread = rows[model]["spread"]
    assert (spread["test_best"], spread["test_worst"]) == (pytest.approx(max(tests)),
                                                           pytest.approx(min(tests)))
    assert (spread["val_best"], spread["val_worst"]) == (pytest.approx(max(vals)),
                                                         pytest.approx(min(vals)))
    at_chance = sum(all(chance.binomial_tail(round(t * TEST_COUNT), TEST_COUNT, 0.1) > 0.01
                        for _, t in p) for p in points.values())
    assert (spread["points"], spread["at_chance"], spread["judged"]) == (4, at_chance, 4)
  assert rows["s5"]["spread"]["at_chance"] == 1 and rows["transformer"]["spread"][
      "at_chance"] == 0  # the premise: the s5 point at 10% stays at chance in both seeds
  # The markdown: the point named (the transformer's same in both seeds), the spread, the rule.
  assert ("| Transformer | MQAR | 4 | `learning_rate=0.001,model.emb_dim=32` (all 2 seeds) | "
          "86.0 ± 2.8 (n=2) | 86.0 / 44.5 | 85.0 / 45.0 | 0/4 |") in text
  assert ("| S5 | MQAR | 4 | seed 0: `learning_rate=0.003,model.emb_dim=16`; seed 1: "
          "`learning_rate=0.001,model.emb_dim=32` | 47.5 ± 10.6 (n=2) | 51.0 / 10.0 | "
          "45.0 / 10.5 | 1/4 |") in text
  assert sweeps.SWEEP_RULE in text and "`learning_rate=0.001,model.emb_dim=16` val 10.5, " \
      "test 10.0 (at chance)" in text
  saved = json.loads((swept[2] / "out" / "accuracy.json").read_text())
  assert saved["sweeps"][0]["spread"] == table["sweeps"][0]["spread"]


def test_the_chart_draws_accuracy_against_each_swept_key(swept):
  table, _, tmp_path = swept
  written = sweep_chart.write_charts(table, tmp_path / "out")
  assert [os.path.basename(p) for p in written] == ["sweep_learning_rate.png",
                                                    "sweep_model.emb_dim.png"]
  drawn = sweep_chart.sweep_chart(tmp_path / "lr.png", table["sweeps"], "learning_rate")
  assert drawn["xscale"] == {"mqar": "log"} and "model.emb_dim" in drawn["note"]
  for model in ("transformer", "s5"):  # each value: the best on validation over the widths
    expected = [(repr(lr), _expected(model, lambda k, lr=lr: k[2] == lr)[1])
                for lr in (1e-3, 3e-3)]
    assert drawn["lines"]["mqar"][model] == [(x, pytest.approx(y)) for x, y in expected]
  widths = sweep_chart.sweep_chart(tmp_path / "w.png", table["sweeps"], "model.emb_dim")
  expected = [(str(w), _expected("s5", lambda k, w=w: k[3] == w)[1]) for w in (16, 32)]
  assert widths["lines"]["mqar"]["s5"] == [(x, pytest.approx(y)) for x, y in expected]


def test_eval_accuracy_writes_the_sweep_table_and_charts(swept, capsys):
  _, _, tmp_path = swept
  EVAL.main(["accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'eval'}"])
  out = capsys.readouterr().out
  assert "Sweeps (each cell's point chosen on validation" in out
  for key in ("learning_rate", "model.emb_dim"):
    assert f"wrote {tmp_path / 'eval'}/sweep_{key}.png" in out
    assert (tmp_path / "eval" / f"sweep_{key}.png").stat().st_size > 0


def test_swapped_point_folders_are_named_and_the_rest_of_the_sweep_tabled(tmp_path, capsys):
  """The transformer's seed-0 folders of learning rates 1e-3 and 3e-3 (width 32) swapped: each
  is one warning line naming it and both values, and is skipped; the sweep is tabled from the
  other points (before, the two won as plain runs over the sweep, whose table and charts
  vanished without a word, the kept run named by a folder spelling the other value)."""
  for key, (val, test) in FIGURES.items():
    _point_run(tmp_path / "runs", *key, val, test)
  folder = tmp_path / "runs" / "mqar" / "transformer-cpu_sweep"
  low, high = (folder / f"learning_rate={lr!r},model.emb_dim=32" for lr in (1e-3, 3e-3))
  low.rename(folder / "swap")
  high.rename(low)
  (folder / "swap").rename(high)
  EVAL.main(["accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'eval'}"])
  out, err = capsys.readouterr()
  assert [line for line in err.splitlines() if line.strip()] == [
      f"warning: {path}: its folder is named for learning_rate={named} but its results.json "
      f"records learning_rate={recorded} (point folders swapped or renamed?); skipped: rename "
      f"it to its point or move it out of the sweep"
      for path, named, recorded in ((low, "0.001", "0.003"), (high, "0.003", "0.001"))]
  rows = {row["model"]: row for row in json.loads(
      (tmp_path / "eval" / "accuracy.json").read_text())["sweeps"]}
  assert set(rows) == {"transformer", "s5"}
  # Seed 0 chooses among its two points left (val 0.5, 0.7), seed 1 among its four.
  assert rows["transformer"]["chosen"] == [
      {"seed": 0, "name": "learning_rate=0.003,model.emb_dim=16"},
      {"seed": 1, "name": "learning_rate=0.001,model.emb_dim=32"}]
  kept = [run["workdir"] for point in rows["transformer"]["points"] for run in point["runs"]]
  assert len(kept) == 6 and str(low) not in kept and str(high) not in kept
  assert "wrote " + str(tmp_path / "eval" / "sweep_learning_rate.png") in out


# ------------------------------------------------------------------ linked keys: table, chart

@pytest.fixture(params=[("model.qkv_dim", 1), ("model.mlp_dim", 4)], ids=["qkv", "mlp"])
def linked(request, tmp_path):
  """FIGURES as a sweep of learning_rate x linked widths: model.emb_dim = W with model.qkv_dim
  = W (equal values) or model.mlp_dim = 4 W (other values)."""
  other, times = request.param
  for (model, seed, lr, width), (val, test) in FIGURES.items():
    folder = tmp_path / "runs" / "mqar" / f"{model}-cpu{'_seed1' if seed else ''}_sweep" / (
        sweep_names.point_name({"learning_rate": lr, "model.emb_dim": width,
                                other: times * width}))
    folder.mkdir(parents=True)
    model_config = {"name": model, "emb_dim": width, other.split(".")[1]: times * width}
    config = {"seed": seed, "learning_rate": lr, "num_train_steps": 100,
              "model": model_config, "data": {"max_len": 64}}
    (folder / "results.json").write_text(json.dumps({
        "task": "mqar", "model": model, "test_accuracy": test, "best_val_accuracy": val,
        "best_step": 100, "num_train_steps": 100, "test_count": TEST_COUNT,
        "test_majority_rate": 0.1, "train_count": 64, "config": config}))
  found = results.collect_results([str(tmp_path / "runs")], [], references=paper_configs)
  table, text = accuracy.write_tables(found, tmp_path / "out", paper_configs)
  return table, text, tmp_path, other, times


def test_a_linked_sweeps_table_names_all_its_keys(linked):
  table, text, _, other, times = linked
  rows = {row["model"]: row for row in table["sweeps"]}
  for model in ("transformer", "s5"):
    chosen, mean = _expected(model)
    assert rows[model]["ours"] == pytest.approx(mean) and rows[model]["spread"]["points"] == 4
    assert [c["name"] for c in rows[model]["chosen"]] == [
        f"learning_rate={lr!r},model.emb_dim={w},{other}={times * w}" for _, lr, w in chosen]
  assert (f"| Transformer | MQAR | 4 | `learning_rate=0.001,model.emb_dim=32,{other}="
          f"{32 * times}` (all 2 seeds) | 86.0 ± 2.8 (n=2) |") in text
  assert sweeps.axes(table["sweeps"]) == [("learning_rate",), ("model.emb_dim", other)]


def test_a_linked_sweep_is_one_chart_against_its_first_key(linked, capsys):
  table, _, tmp_path, other, times = linked
  written = sweep_chart.write_charts(table, tmp_path / "out")
  assert [os.path.basename(p) for p in written] == [
      "sweep_learning_rate.png", f"sweep_model.emb_dim+{other}.png"]
  drawn = sweep_chart.sweep_chart(tmp_path / "w.png", table["sweeps"], ("model.emb_dim", other))
  label = " = " if times == 1 else " / "
  assert drawn["xlabel"] == {"mqar": f"model.emb_dim{label}{other} (log scale)"}
  assert drawn["xscale"] == {"mqar": "log"} and "(over learning_rate)" in drawn["note"]
  for model in ("transformer", "s5"):  # each width: the best on validation over the lrs
    expected = [(str(w) if times == 1 else f"{w}/{times * w}",
                 _expected(model, lambda k, w=w: k[3] == w)[1]) for w in (16, 32)]
    assert drawn["lines"]["mqar"][model] == [(x, pytest.approx(y)) for x, y in expected]
  lrs = sweep_chart.sweep_chart(tmp_path / "lr.png", table["sweeps"], "learning_rate")
  assert f"(over model.emb_dim, {other})" in lrs["note"]
  EVAL.main(["accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'eval'}"])
  assert f"sweep_model.emb_dim+{other}.png" in capsys.readouterr().out


def test_keys_are_linked_only_where_they_moved_together():
  def rows(*points):
    return [{"points": [{"values": dict(zip("abc", p))} for p in points]}]
  assert sweeps.axes(rows((1, 1, 5), (2, 2, 5))) == [("a", "b"), ("c",)]  # c: one value
  assert sweeps.axes(rows((1, 1), (1, 2), (2, 1), (2, 2))) == [("a",), ("b",)]  # a product
  assert sweeps.axes(rows((1, 1), (2, 1))) == [("a",), ("b",)]  # b does not follow a
  assert sweeps.axes(rows((1, 1), (2, 2)) + rows((1, 2), (2, 1))) == [("a",), ("b",)]
  assert sweeps.axes(rows((1, 1), (2, 2)) + rows((1,), (2,))) == [("a",), ("b",)]  # b missing


# ------------------------------------------------------------------ one real grid

def _tiny_mqar(tmp_path, cache: str) -> list[str]:
  """Runs of seconds: MQAR of 32 tokens, 1 layer; S5 with a small state."""
  values = {"data.data_dir": tmp_path / "data", "data.vocab_size": 64, "data.max_len": 32,
            "data.num_kv_pairs": 4, "data.num_train": 64, "data.num_val": 16,
            "data.num_test": 16, "batch_size": 16, "eval_batch_size": 16, "num_train_steps": 2,
            "eval_every": 2, "checkpoint_every": 2, "log_every": 1, "warmup_steps": 1,
            "progress": False, "compilation_cache_dir": cache, "model.num_layers": 1,
            "model.qkv_dim": 16, "model.attention.state_size@s5": 8,
            "model.attention.blocks@s5": 2,
            # the transformer's points save every step, so one is killed between two of them
            "num_train_steps@transformer": 6, "checkpoint_every@transformer": 1}
  return [f"--config.{key}={value}" for key, value in values.items()]


@pytest.mark.slow  # nine training processes
@pytest.mark.commands
def test_a_sweep_grid_runs_resumes_after_a_kill_and_tables_its_points(tmp_path):
  from tests.test_leaderboard import _kill_and_resume
  root = tmp_path / "grid"
  args = [*MQAR, f"--root={root}", *AXIS, *_tiny_mqar(tmp_path, str(tmp_path / "cache"))]
  folder = root / "mqar" / "transformer-cpu_sweep"
  resumed, lines = _kill_and_resume(args, folder / POINTS[0], folder / POINTS[1])
  assert lines[0].startswith(f"[1/8] mqar/transformer-cpu_sweep/{POINTS[0]}: skipped, "
                             f"finished before"), lines
  assert lines[1].startswith(f"[2/8] mqar/transformer-cpu_sweep/{POINTS[1]}: resuming;"), lines
  assert "Resuming from the checkpoint at step " in resumed.stdout
  assert "grid: 8 runs: 7 done, 1 skipped, 0 failed; " in resumed.stdout
  table = json.loads((root / "table" / "accuracy.json").read_text())
  for model in ("transformer", "s5"):
    found = {p: json.loads((root / "mqar" / f"{model}-cpu_sweep" / p / "results.json")
                           .read_text()) for p in POINTS}
    assert all(r["config"]["learning_rate"] == float(p.split(",")[0].split("=")[1])
               for p, r in found.items())
    best = max(POINTS, key=lambda p: found[p]["best_val_accuracy"])  # first of a tie
    row = next(r for r in table["sweeps"] if r["model"] == model)
    assert row["chosen"] == [{"seed": 0, "name": best}]
    assert row["ours"] == pytest.approx(100 * found[best]["test_accuracy"])
    tests = [100 * r["test_accuracy"] for r in found.values()]
    assert (row["spread"]["test_best"], row["spread"]["test_worst"]) == (
        pytest.approx(max(tests)), pytest.approx(min(tests)))
  assert "| Points | Chosen on validation |" in (root / "table" / "accuracy.md").read_text()
  for key in ("learning_rate", "model.emb_dim"):
    assert (root / "table" / f"sweep_{key}.png").exists()
  again = commands.run("eval.py", "accuracy", str(root), f"--out={tmp_path / 'eval'}")
  assert "sweep_model.emb_dim.png" in again.stdout
  # The grid's other chart: recall against the state carried, a point per (model, width),
  # each the best-on-validation learning rate of its width.
  commands.run("eval.py", "recall", str(root), f"--out={tmp_path / 'recall'}")
  assert (tmp_path / "recall" / "recall.png").exists()
  points = json.loads((tmp_path / "recall" / "recall.json").read_text())["points"]
  assert sorted((p["model"], p["width"]) for p in points) == [
      (m, w) for m in ("s5", "transformer") for w in (16, 32)]
