"""A grid run again on a root that holds runs (python -m lra.commands.leaderboard --root=R):
runs of other settings refused once before anything runs, the closing table of what this
command ran (a new sweep tabled and charted as a sweep of its own), and a warning that every
run prints shown once."""
import json
import os
import signal

import pytest

from lra.commands import grid_plan, leaderboard

SWEEP = ["--models=transformer", "--tasks=listops", "--preset=cpu"]


def _held(run, **model) -> None:
  """The config.json a run of `run`'s settings left in its workdir, with `model` changed (a
  run made by an earlier grid): no checkpoint, no results.json, so this grid would resume it."""
  config = grid_plan._config(run.task, run.model, "cpu")
  for key, value in run.items:
    grid_plan.cli.set_value(config, key, value)
  config.model.update(model)
  os.makedirs(run.workdir)
  with open(os.path.join(run.workdir, "config.json"), "w") as f:
    json.dump(config.to_dict(), f)


def test_runs_of_other_settings_on_the_root_are_refused_once_before_anything_runs(
    tmp_path, monkeypatch, capsys):
  args = [*SWEEP, f"--root={tmp_path}", "--sweep", "learning_rate=1e-3,3e-3,1e-2",
          "--config.model.mlp_dim=32"]
  runs = leaderboard.plan(leaderboard.parse_args(args))
  _held(runs[0], mlp_dim=48)
  _held(runs[1], mlp_dim=48)
  _held(runs[2])  # the same settings: it goes on
  started = []
  monkeypatch.setattr(leaderboard, "execute", lambda run, stop: started.append(run) or (1, ""))
  with pytest.raises(SystemExit) as e:
    leaderboard.main(args)
  assert e.value.code == 1 and started == []
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1, err
  assert err[0].startswith(
      f"error: --root={tmp_path} holds 2 of this grid's runs made otherwise than it asks "
      f"(listops/transformer-cpu_sweep/learning_rate=0.001: model.mlp_dim 48 -> 32; and 1 "
      f"more), which train.py would not go on with; nothing has run: give a new --root"), err
  assert "add --allow_config_change to go on with them" in err[0]
  # With the flag (passed on to every run) the same check lets them go on.
  allowed = {"preset": "cpu", "imports": [], "root": str(tmp_path), "allow": True,
             "runs": [[run.name, run.task, run.model, run.items, run.workdir] for run in runs]}
  grid_plan._check_in_child(allowed)


def _result(folder, lr: float, layers: int, val: float, model: str = "transformer") -> None:
  """A finished ListOps run's results.json, recording its learning rate and depth."""
  os.makedirs(folder)
  config = {"seed": 0, "learning_rate": lr, "num_train_steps": 10,
            "model": {"name": model, "num_layers": layers}, "data": {"max_len": 100}}
  with open(os.path.join(folder, "results.json"), "w") as f:
    json.dump({"task": "listops", "model": model, "test_accuracy": val, "best_val_accuracy": val,
               "best_step": 10, "num_train_steps": 10, "config": config}, f)


def test_the_closing_table_shows_a_new_sweep_on_a_root_that_holds_another(tmp_path, capsys):
  """`--sweep model.num_layers=1,2` after `--sweep learning_rate=...` on the same root: the
  table is of the new sweep (and of the other models there), with its chart."""
  cell = tmp_path / "listops" / "transformer-cpu_sweep"
  _result(cell / "learning_rate=0.001", 0.001, 2, 0.9)  # another command's sweep, better
  _result(cell / "learning_rate=0.003", 0.003, 2, 0.8)
  _result(tmp_path / "listops" / "s4d-cpu", 0.01, 2, 0.6, model="s4d")  # a model not run here
  runs = leaderboard.plan(leaderboard.parse_args(
      [*SWEEP, f"--root={tmp_path}", "--sweep", "model.num_layers=1,2"]))
  _result(cell / "model.num_layers=1", 0.05, 1, 0.3)
  _result(cell / "model.num_layers=2", 0.05, 2, 0.4)
  leaderboard.write_table(str(tmp_path), runs)
  table = json.loads((tmp_path / "table" / "accuracy.json").read_text())
  (sweep,) = table["sweeps"]
  assert sweep["keys"] == ["model.num_layers"] and sweep["spread"]["points"] == 2
  assert [c["name"] for c in sweep["chosen"]] == ["model.num_layers=2"]
  cells = {row["model"]: row["cells"]["listops"]["ours"] for row in table["rows"]}
  assert cells == {"transformer": pytest.approx(40.0), "s4d": pytest.approx(60.0)}
  out = capsys.readouterr().out
  assert (f"not in it: 2 runs under {tmp_path} of the models and tasks this grid ran, made by "
          f"another command (e.g. {cell / 'learning_rate=0.001'}); python eval.py accuracy "
          f"{tmp_path} tables every run there") in out
  assert os.listdir(tmp_path / "table").count("sweep_model.num_layers.png") == 1
  assert not (tmp_path / "table" / "sweep_learning_rate.png").exists()


@pytest.mark.commands
def test_a_warning_every_run_prints_is_shown_once_per_grid(tmp_path, capfd):
  code = ("import sys; print('warning: a short run'); print('step 1/2'); "
          "print('warning: on stderr', file=sys.stderr); print('error: x', file=sys.stderr); "
          "sys.exit(3)")
  run = grid_plan.Run("listops", "transformer", str(tmp_path), ("python", "-c", code), ())
  handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    stop = leaderboard.Stop()
    results = [leaderboard.execute(run, stop) for _ in range(3)]
  finally:
    for s, handler in handlers.items():
      signal.signal(s, handler)
  assert results == [(3, "error: x")] * 3
  out, err = capfd.readouterr()
  assert out.splitlines() == ["warning: a short run", "step 1/2", "step 1/2", "step 1/2"]
  assert err.splitlines() == ["warning: on stderr", "error: x", "error: x", "error: x"]
