"""python -m lra.commands.leaderboard: a grid of train.py runs, skip and resume, failures, the table,
the printed commands and the SLURM script, one-line refusals."""
import itertools
import json
import os
import shlex
import signal
import stat
import subprocess
import time

import pytest

from lra.commands import leaderboard
from lra.models import registry
from tests import commands
from tests.commands import ROOT

GRID = ["--models=transformer,linear_transformer", "--tasks=listops,pathfinder", "--preset=cpu"]
RUNS = ["listops/transformer-cpu", "listops/linear_transformer-cpu",
        "pathfinder/transformer-cpu", "pathfinder/linear_transformer-cpu"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """One compilation cache for this file's runs (the same cell compiles once)."""
  return str(tmp_path_factory.mktemp("jax_cache"))


def _tiny(data: str, cache: str, tasks=("listops", "pathfinder"), **given) -> list[str]:
  """--config overrides for runs of seconds: a tiny model, 2 steps, data generated into `data`;
  `given` (KEY=VALUE) replaces or adds a plain one (the grid refuses a key given twice)."""
  values = dict(num_train_steps=2, eval_every=2, checkpoint_every=2, log_every=1, batch_size=8,
                eval_batch_size=8, progress=False, compilation_cache_dir=cache, **{
                    "model.num_layers": 1, "model.emb_dim": 16, "model.qkv_dim": 16,
                    "model.mlp_dim": 16, "model.num_heads": 2})
  values.update(given)
  common = [f"{key}={value}" for key, value in values.items()]
  per_task = {
      "listops": [f"data.data_dir={data}/listops", "data.max_len=32", "data.num_train=64",
                  "data.num_val=16", "data.num_test=16", "data.max_length=30",
                  "data.workers=1"],
      "pathfinder": [f"data.data_dir={data}/pathfinder", "data.num_images=20",
                     "data.workers=1", "data.level=easy"]}
  scoped = [item.replace("=", f"@{task}=", 1) for task in tasks for item in per_task.get(task, [])]
  return [f"--config.{item}" for item in common + scoped]


# One CPU device, and XLA's cheapest compile (these runs are all compiling and no training).
XLA_FLAGS = commands.FAST_COMPILE


def _leaderboard(*args, **kwargs):
  """The grid, by tests/commands.py (started, with popen=True); the test checks its exit."""
  args = ["-m", "lra.commands.leaderboard", *args]
  if kwargs.pop("popen", False):
    return commands.start(*args, xla_flags=XLA_FLAGS, **kwargs)
  return commands.run(*args, xla_flags=XLA_FLAGS, expect=None, timeout=900, **kwargs)


def _progress(stdout: str) -> list[str]:
  return [l for l in stdout.splitlines() if l.startswith("[")]


def _table_cells(root) -> dict:
  """{(model, task): our accuracy} of the table the grid wrote in ROOT/table."""
  assert (root / "table" / "accuracy.md").exists() and (root / "table" / "accuracy.csv").exists()
  table = json.loads((root / "table" / "accuracy.json").read_text())
  return {(row["model"], task): cell["ours"] for row in table["rows"]
          for task, cell in row["cells"].items() if cell["ours"] is not None}


def _four_cells(root) -> None:
  cells = _table_cells(root)
  assert set(cells) == {(m, t) for m in ("transformer", "linear_transformer")
                        for t in ("listops", "pathfinder")}, cells


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_grid_runs_end_to_end_then_skips_finished_runs(tmp_path, cache):
  root = tmp_path / "grid"
  args = [*GRID, f"--root={root}", *_tiny(str(tmp_path / "data"), cache)]
  first = _leaderboard(*args)
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  lines = _progress(first.stdout)
  assert [l.split(":")[0] for l in lines] == [
      f"[{i // 2 + 1}/4] {name}" for i, name in enumerate(r for r in RUNS for _ in (0, 1))]
  assert lines[0].startswith("[1/4] listops/transformer-cpu: starting; 3 left after it, grid "
                             "0:00:00"), lines
  assert all(": done, test accuracy " in l and "; run 0:0" in l and ", grid 0:0" in l
             for l in lines[1::2]), lines
  assert "grid: 4 runs: 4 done, 0 skipped, 0 failed; " in first.stdout
  for run in RUNS:
    assert (root / run / "results.json").exists()
  _four_cells(root)
  assert f"wrote the accuracy table of {root}: {root}/table/accuracy." in first.stdout

  again = _leaderboard(*args)  # everything finished: nothing trains
  assert again.returncode == 0, again.stderr[-3000:]
  assert [l.split(": ")[1].split(" (")[0] for l in _progress(again.stdout)] == [
      "skipped, finished before"] * 4
  assert "grid: 4 runs: 0 done, 4 skipped, 0 failed; " in again.stdout
  _four_cells(root)


def _wait_until_gone(group: int, seconds: float = 10) -> None:
  """Until the killed group's processes are reaped (a killed trainer's lock is free even while
  it waits as a zombie, so the wait is bounded and not asserted)."""
  deadline = time.time() + seconds
  while time.time() < deadline:
    try:
      os.killpg(group, 0)
    except ProcessLookupError:
      return
    time.sleep(0.05)


def _kill_and_resume(args: list[str], done, killed):
  """Starts the grid and kills it (the grid and its trainer, as a lost machine would) once the
  run in `killed` has saved step 2, then runs the same grid again: (that run, its progress
  lines). The run in `done` finished before the kill."""
  proc = _leaderboard(*args, popen=True, start_new_session=True, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while not (killed / "checkpoints" / "2").exists() and time.time() < deadline:
    time.sleep(0.05)
  os.killpg(proc.pid, signal.SIGKILL)
  proc.wait()
  _wait_until_gone(proc.pid)
  assert (done / "results.json").exists()
  assert not (killed / "results.json").exists(), f"{killed} ended before it was killed"
  resumed = _leaderboard(*args)
  assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
  return resumed, _progress(resumed.stdout)


@pytest.mark.slow  # five training runs
@pytest.mark.commands
def test_killed_grid_skips_finished_runs_and_resumes_the_killed_one(tmp_path, cache):
  root = tmp_path / "grid"
  # The 2nd run saves every step, so it is killed between two of its checkpoints.
  args = [*GRID, f"--root={root}", *_tiny(str(tmp_path / "data"), cache),
          "--config.num_train_steps@linear_transformer=8",
          "--config.checkpoint_every@linear_transformer=1"]
  second = root / RUNS[1]
  resumed, lines = _kill_and_resume(args, root / RUNS[0], second)
  assert lines[0].startswith("[1/4] listops/transformer-cpu: skipped, finished before"), lines
  assert lines[1].startswith("[2/4] listops/linear_transformer-cpu: resuming;"), lines
  assert "Resuming from the checkpoint at step " in resumed.stdout
  assert "grid: 4 runs: 3 done, 1 skipped, 0 failed; " in resumed.stdout
  assert json.loads((second / "results.json").read_text())["num_train_steps"] == 8
  _four_cells(root)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_seeds_each_run_resumes_and_the_table_pools_them(tmp_path, cache):
  root = tmp_path / "grid"
  # Seed 1 saves every step, so it is killed between two of its checkpoints.
  args = ["--models=transformer", "--tasks=listops", "--preset=cpu", "--seeds=0,1",
          f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",)),
          "--config.num_train_steps@transformer=6", "--config.checkpoint_every@transformer=1"]
  runs = [root / "listops" / "transformer-cpu", root / "listops" / "transformer-cpu_seed1"]
  resumed, lines = _kill_and_resume(args, *runs)
  assert lines[0].startswith("[1/2] listops/transformer-cpu: skipped, finished before"), lines
  assert lines[1].startswith("[2/2] listops/transformer-cpu_seed1: resuming;"), lines
  assert "grid: 2 runs: 1 done, 1 skipped, 0 failed; " in resumed.stdout
  found = [json.loads((run / "results.json").read_text()) for run in runs]
  assert [r["config"]["seed"] for r in found] == [0, 1]
  assert [r["config"]["data"]["seed"] for r in found] == [0, 0]  # the same data
  tests = [100 * r["test_accuracy"] for r in found]
  cell = json.loads((root / "table" / "accuracy.json").read_text())["rows"][0]["cells"][
      "listops"]
  assert cell["n"] == 2 and cell["ours"] == pytest.approx(sum(tests) / 2)
  assert cell["std"] == pytest.approx(abs(tests[0] - tests[1]) / 2 ** 0.5)
  assert cell["chance_judged"] == 2  # a trained run records the test count and majority rate
  assert (f"± {cell['std']:.1f} (n=2, {cell['at_chance']}/2 at chance)"
          in (root / "table" / "accuracy.md").read_text())


def test_seeds_give_each_cell_one_workdir_and_command_per_seed(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  args = ["--models=transformer", "--tasks=listops,pathfinder", "--preset=paper",
          "--root=runs/grid", "--seeds=0,2"]
  leaderboard.main([*args, "--print_commands"])
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert [line[3:] for line in lines] == [  # every cell of seed 0, then of seed 2
      ["--workdir=runs/grid/listops/transformer-paper", "--config.seed=0"],
      ["--workdir=runs/grid/pathfinder/transformer-paper", "--config.seed=0"],
      ["--workdir=runs/grid/listops/transformer-paper_seed2", "--config.seed=2"],
      ["--workdir=runs/grid/pathfinder/transformer-paper_seed2", "--config.seed=2"]]
  leaderboard.main([*args, f"--slurm={tmp_path / 'grid.sbatch'}"])
  assert "#SBATCH --array=0-3\n" in (tmp_path / "grid.sbatch").read_text()


def test_mega_chunk_runs_mega_with_the_papers_chunk_size_per_task(monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  leaderboard.main(["--models=mega_chunk", "--tasks=listops,pathx", "--preset=cpu",
                    "--root=runs/grid", "--config.num_train_steps@mega_chunk=10",
                    "--print_commands"])
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert [line[2:] for line in lines] == [
      ["--config=configs/listops.py:mega,cpu", "--workdir=runs/grid/listops/mega_chunk-cpu",
       "--config.model.attention.chunk_size=128", "--config.num_train_steps=10"],
      ["--config=configs/pathx.py:mega,cpu", "--workdir=runs/grid/pathx/mega_chunk-cpu",
       "--config.model.attention.chunk_size=4096", "--config.num_train_steps=10"]]


def test_a_seed_0_run_made_without_seeds_is_finished_for_a_grid_with_seeds(tmp_path):
  args = leaderboard.parse_args([*TINY, f"--root={tmp_path}", "--seeds=0,1"])
  seed0, seed1 = leaderboard.plan(args)
  steps = dict(seed0.expect)["num_train_steps"]
  for run in (seed0, seed1):  # both record seed 0, as a run without --seeds does
    os.makedirs(run.workdir)
    with open(os.path.join(run.workdir, "results.json"), "w") as f:
      json.dump({"task": "listops", "model": "transformer", "test_accuracy": 0.5,
                 "config": {"seed": 0, "num_train_steps": steps}}, f)
  assert seed0.workdir == str(tmp_path / "listops" / "transformer-cpu")
  assert leaderboard.finished(seed0)[0] is not None
  assert leaderboard.finished(seed1) == (
      None, "its results.json records seed=0, this grid asks for 1")


@pytest.mark.slow  # two training processes
@pytest.mark.commands
def test_a_failed_run_is_reported_and_the_grid_goes_on(tmp_path, cache):
  root = tmp_path / "grid"
  proc = _leaderboard("--models=transformer", "--tasks=image,listops", "--preset=cpu",
                      f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",)),
                      f"--config.data.data_dir@image={tmp_path / 'no_image_data'}")
  assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
  failed, done = [l for l in _progress(proc.stdout) if ": starting;" not in l]
  assert failed.startswith("[1/2] image/transformer-cpu: FAILED (exit 1: error: "), failed
  assert "python -m lra.data image" in failed  # train.py's one line, with its fix
  assert "1 left, going on" in failed
  assert done.startswith("[2/2] listops/transformer-cpu: done, test accuracy "), done
  assert "grid: 2 runs: 1 done, 0 skipped, 1 failed; " in proc.stdout
  assert "  failed: image/transformer-cpu (exit 1: error: " in proc.stdout
  assert set(_table_cells(root)) == {("transformer", "listops")}


def test_print_commands_and_slurm_script(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  models = registry.names() + ["transformer_chunked"]
  args = ["--models=all,transformer_chunked", "--tasks=listops,pathfinder", "--preset=paper",
          "--root=runs/grid", "--config.num_train_steps=10", "--config.data.max_len@listops=500",
          "--config.seed=1 2"]
  leaderboard.main([*args, "--print_commands"])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 2 * len(models)
  for line, (task, model) in zip(lines, itertools.product(("listops", "pathfinder"), models)):
    argv = shlex.split(line)
    mixer = "transformer" if model == "transformer_chunked" else model
    assert argv[:4] == ["python", "train.py", f"--config=configs/{task}.py:{mixer},paper",
                        f"--workdir=runs/grid/{task}/{model}-paper"], argv
    assert argv[4:] == (["--config.model.attention.implementation=chunked"] * (
        model != mixer) + ["--config.num_train_steps=10"] + [
            "--config.data.max_len=500"] * (task == "listops") + ["--config.seed=1 2"]), argv
    assert os.path.exists(argv[1]) and os.path.exists(argv[2].split("=")[1].split(":")[0])

  script = tmp_path / "grid.sbatch"
  leaderboard.main([*args, f"--slurm={script}"])
  assert f"wrote {script}: a SLURM array of {len(lines)} runs" in capsys.readouterr().out
  text = script.read_text()
  assert f"#SBATCH --array=0-{len(lines) - 1}\n" in text
  # The script run as array tasks 0 and N-1, with a `python` that prints its arguments.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "python").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
  (bin_dir / "python").chmod(stat.S_IRWXU)
  for index in (0, len(lines) - 1):
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SLURM_ARRAY_TASK_ID": str(index)}
    ran = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    assert ran.stdout.splitlines() == shlex.split(lines[index])[1:]


TINY = ["--models=transformer", "--tasks=listops", "--preset=cpu"]


def test_the_old_set_spelling_is_an_alias_with_one_line_each(capsys):
  """--set KEY=VALUE and --set SCOPE:KEY=VALUE plan what --config.KEY[@SCOPE]=VALUE plans, and
  each says how it is written now."""
  new = leaderboard.parse_args([*TINY, "--config.num_train_steps=10",
                                "--config.data.max_len@listops=50"])
  assert capsys.readouterr().err == ""
  old = leaderboard.parse_args([*TINY, "--set", "num_train_steps=10",
                                "--set=listops:data.max_len=50"])
  assert old.sets == new.sets == [(None, "num_train_steps", "10"),
                                  ("listops", "data.max_len", "50")]
  assert capsys.readouterr().err.splitlines() == [
      "warning: --set num_train_steps=10 is the old spelling; write --config.num_train_steps=10",
      "warning: --set listops:data.max_len=50 is the old spelling; write "
      "--config.data.max_len@listops=50"]


@pytest.mark.parametrize("args, words", [
    (["--models=", "--tasks=listops", "--preset=cpu"], "--models=''"),
    (["--models=transformer,no_such", "--tasks=listops", "--preset=cpu"], "'no_such'"),
    (["--models=transformer", "--tasks=listops,", "--preset=cpu"], "--tasks="),
    (["--models=transformer", "--tasks=lisops", "--preset=cpu"], "'lisops'"),
    (["--models=transformer", "--tasks=listops"], "--preset=''"),
    (["--models=transformer", "--tasks=listops", "--preset=gpu"], "cpu, paper, base"),
    ([*TINY, "--config.num_train_steps"], "not --config.KEY=VALUE"),
    ([*TINY, "--config.no_such_key=1"], "has no key 'no_such_key'"),
    ([*TINY, "--config.num_train_steps@image=1"], "'image' is no task or model of this grid"),
    (["--models=transformer,local", "--tasks=listops", "--preset=cpu", "--config.model.attention.block_size=4"], "KEY@TASK=VALUE or --config.KEY@MODEL=VALUE"),
    ([*TINY, "--seeds=0,0"], "--seeds='0,0': give distinct non-negative integers"),
    ([*TINY, "--seeds=-1"], "--seeds='-1'"),
    ([*TINY, "--seeds=1,a"], "--seeds='1,a'"),
    ([*TINY, "--seeds="], "--seeds=''"),
    ([*TINY, "--seeds=0,,1"], "--seeds='0,,1'"),
    ([*TINY, "--seeds=0,1", "--config.seed@listops=3"], "--seeds gives each run its seed"),
    ([*TINY, "--protocol=spx"], "--protocol='spx': give one of scratch, spt"),
    ([*TINY, "--protocol=spt", "--config.init_from=x"], "--protocol=spt sets them for each"),
])
def test_bad_input_is_one_line_before_anything_runs(tmp_path, capsys, args, words):
  with pytest.raises(SystemExit) as exit_info:
    leaderboard.main([*args, f"--root={tmp_path / 'grid'}"])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
  assert not (tmp_path / "grid").exists()


def test_a_root_that_is_a_file_is_refused(tmp_path, capsys):
  (tmp_path / "grid").write_text("")
  with pytest.raises(SystemExit):
    leaderboard.main([*TINY, f"--root={tmp_path / 'grid'}"])
  assert "is a file" in capsys.readouterr().err


@pytest.mark.commands
def test_bad_input_from_the_command_line(tmp_path):
  proc = _leaderboard("--models=transformer,performr", "--tasks=listops", "--preset=cpu",
                      f"--root={tmp_path / 'grid'}")
  assert proc.returncode == 1 and proc.stdout == ""
  assert proc.stderr.splitlines() == [proc.stderr.strip()] and "'performr'" in proc.stderr
  assert "unknown name 'performr' (did you mean 'performer'?); valid: all, " in proc.stderr
  assert "performer" in proc.stderr  # the valid names are listed


SPT = ["--models=transformer", "--tasks=listops", "--preset=cpu", "--protocol=spt"]


def _spt_runs(root) -> list:
  return [root / "listops" / "transformer-cpu_pretrain", root / "listops" / "transformer-cpu_spt"]


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_spt_grid_pretrains_then_fine_tunes_and_the_table_has_the_spt_row(tmp_path, cache):
  root = tmp_path / "grid"
  args = [*SPT, f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",))]
  first = _leaderboard(*args)
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  lines = _progress(first.stdout)
  assert [l.split(": ")[0] for l in lines] == [
      "[1/2] listops/transformer-cpu_pretrain"] * 2 + ["[2/2] listops/transformer-cpu_spt"] * 2
  assert ": done, masked-token accuracy on validation " in lines[1], lines
  assert ": done, test accuracy " in lines[3], lines
  pretrain, spt = [json.loads((run / "results.json").read_text()) for run in _spt_runs(root)]
  assert pretrain["objective"] == "denoise" and "test_accuracy" not in pretrain
  assert spt["config"]["init_from"] == str(_spt_runs(root)[0])
  assert spt["init"]["objective"] == "denoise"
  assert set(_table_cells(root)) == {("transformer_spt", "listops")}  # no pretraining row
  assert "(SPT)" in (root / "table" / "accuracy.md").read_text()

  again = _leaderboard(*args)  # both stages finished: nothing trains
  assert again.returncode == 0, again.stderr[-3000:]
  assert [l.split(": ")[1].split(" (")[0] for l in _progress(again.stdout)] == [
      "skipped, finished before"] * 2
  assert "grid: 2 runs: 0 done, 2 skipped, 0 failed; " in again.stdout


@pytest.mark.slow  # three training runs
@pytest.mark.commands
def test_spt_grid_killed_in_the_fine_tune_skips_the_pretraining_and_resumes(tmp_path, cache):
  root = tmp_path / "grid"
  # The fine-tune saves every step, so it is killed between two of its checkpoints.
  args = [*SPT, f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",),
                                         num_train_steps=6, checkpoint_every=1)]
  pretrain, spt = _spt_runs(root)
  resumed, lines = _kill_and_resume(args, pretrain, spt)
  assert lines[0].startswith("[1/2] listops/transformer-cpu_pretrain: skipped, finished before "
                             "(masked-token accuracy on validation "), lines
  assert lines[1].startswith("[2/2] listops/transformer-cpu_spt: resuming;"), lines
  assert "Resuming from the checkpoint at step " in resumed.stdout
  assert "grid: 2 runs: 1 done, 1 skipped, 0 failed; " in resumed.stdout
  assert json.loads((spt / "results.json").read_text())["num_train_steps"] == 6
  assert set(_table_cells(root)) == {("transformer_spt", "listops")}


@pytest.mark.slow  # four training runs
@pytest.mark.commands
def test_spt_grid_given_more_steps_refuses_the_fine_tune_of_the_old_pretraining(tmp_path, cache):
  """The pretraining goes on to the new step count and its best checkpoint
  moves; the fine-tune that started from the old one is refused in one line (it would go on
  from the old encoder under a "(SPT)" row of the longer grid), and keeps what it saved."""
  root = tmp_path / "grid"
  def args(**given):  # the learning rate at its peak from the start
    return [*SPT, f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",),
                                           warmup_steps=1, **given)]
  first = _leaderboard(*args())
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  pretrain, spt = _spt_runs(root)
  before = json.loads((spt / "results.json").read_text())
  # Validated at every step of the longer run, so that its best checkpoint moves on.
  longer = _leaderboard(*args(num_train_steps=20, eval_every=1))
  assert longer.returncode != 0, longer.stdout[-3000:]
  moved = json.loads((pretrain / "results.json").read_text())["best_step"]
  assert before["init"]["checkpoint"] == "best/2" and moved > 2, moved  # the premise
  lines = _progress(longer.stdout)
  assert lines[-1].startswith("[2/2] listops/transformer-cpu_spt: FAILED (exit 1: error: "), lines
  assert (f"was started from the encoder of config.init_from={pretrain}, which has changed "
          f"since (best/2 then, best/{moved} now)") in lines[-1]
  assert "a new --root" in lines[-1]
  assert f"  {leaderboard.GRID_ADVICE}" in longer.stdout.splitlines()  # what a grid does
  assert json.loads((spt / "results.json").read_text()) == before
  went_on = _leaderboard(*args(num_train_steps=20, eval_every=1),
                         "--allow_config_change")  # passed on to the fine-tune
  assert went_on.returncode == 0, went_on.stdout[-3000:]
  after = json.loads((spt / "results.json").read_text())
  assert after["num_train_steps"] == 20 and after["init"] == before["init"]
  assert after["config_changes"][-1]["init_from_changed"] == f"best/2 then, best/{moved} now"


def test_a_refused_changed_setting_gets_the_grids_advice(tmp_path, monkeypatch, capsys):
  """train.py's "use a new --workdir, or add --allow_config_change" is
  followed by what applies to a grid, and the grid's --allow_config_change reaches every run."""
  refusal = (f"error: {tmp_path}/listops/transformer-cpu holds a run that does not fit this "
             f"config: model.emb_dim 16 -> 32. Use a new --workdir, or add "
             f"--allow_config_change to go on with this run anyway")
  monkeypatch.setattr(leaderboard, "execute", lambda run, stop: (1, refusal))
  outcome, _ = leaderboard.run_grid(leaderboard.plan(leaderboard.parse_args(
      ["--models=transformer", "--tasks=listops", "--preset=cpu", f"--root={tmp_path}"])))
  out = capsys.readouterr().out.splitlines()
  assert f": FAILED (exit 1: {refusal}); run " in out[-2], out
  assert out[-1] == f"  {leaderboard.GRID_ADVICE}" and "--root" in out[-1]
  runs = leaderboard.plan(leaderboard.parse_args([*SPT, f"--root={tmp_path}",
                                                  "--allow_config_change"]))
  assert [run.command[-1] for run in runs] == ["--allow_config_change"] * 2


def test_a_failed_pretraining_leaves_its_fine_tune_not_run(tmp_path, monkeypatch, capsys):
  args = leaderboard.parse_args([*SPT, f"--root={tmp_path}", "--seeds=0,1"])
  runs = leaderboard.plan(args)
  started = []

  def execute(run, stop):  # seed 0's pretraining fails, the rest succeed without training
    del stop
    started.append(run.name)
    return (1, "error: boom") if run is runs[0] else (0, "")
  monkeypatch.setattr(leaderboard, "execute", execute)
  monkeypatch.setattr(leaderboard, "finished",
                      lambda run: ({"test_accuracy": 0.5}, "") if run.name in started[1:]
                      else (None, ""))
  outcome, _ = leaderboard.run_grid(runs)
  assert started == ["listops/transformer-cpu_pretrain", "listops/transformer-cpu_seed1_pretrain",
                     "listops/transformer-cpu_seed1_spt"]
  assert outcome["not run"] == [(runs[1], f"its pretraining {runs[0].workdir} did not finish")]
  leaderboard._summary(outcome, len(runs), 1.0)
  out = capsys.readouterr().out
  assert f"[2/4] listops/transformer-cpu_spt: not run (its pretraining {runs[0].workdir} " in out
  assert "grid: 4 runs: 2 done, 0 skipped, 1 failed, 1 not run; " in out


def test_a_finished_denoise_run_is_a_finished_pretraining(tmp_path):
  pretrain, spt = leaderboard.plan(leaderboard.parse_args([*SPT, f"--root={tmp_path}"]))
  assert pretrain.denoise and not spt.denoise and spt.after == pretrain.workdir
  os.makedirs(pretrain.workdir)
  record = {"task": "listops", "model": "transformer", "objective": "denoise",
            "val_masked_accuracy": 0.25, "config": dict(pretrain.expect)}
  (tmp_path / "listops" / "transformer-cpu_pretrain" / "results.json").write_text(
      json.dumps(record))
  assert leaderboard.finished(pretrain) == (record, "")
  record["config"]["objective"] = "classify"  # a classification run in that folder
  (tmp_path / "listops" / "transformer-cpu_pretrain" / "results.json").write_text(
      json.dumps({**record, "objective": "classify", "test_accuracy": 0.5}))
  assert leaderboard.finished(pretrain)[1].startswith("its results.json is not valid (not a "
                                                      "denoise run's")


def test_spt_commands_and_slurm_script_run_the_stages_in_order(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  args = [*SPT[:2], "--tasks=listops,pathfinder", "--preset=cpu", "--protocol=spt",
          "--root=runs/grid"]
  leaderboard.main([*args, "--print_commands"])
  lines = capsys.readouterr().out.splitlines()
  assert [shlex.split(line)[3:] for line in lines] == [
      ["--workdir=runs/grid/listops/transformer-cpu_pretrain", "--config.objective=denoise"],
      ["--workdir=runs/grid/listops/transformer-cpu_spt",
       "--config.init_from=runs/grid/listops/transformer-cpu_pretrain"],
      ["--workdir=runs/grid/pathfinder/transformer-cpu_pretrain", "--config.objective=denoise"],
      ["--workdir=runs/grid/pathfinder/transformer-cpu_spt",
       "--config.init_from=runs/grid/pathfinder/transformer-cpu_pretrain"]]
  script = tmp_path / "grid.sbatch"
  leaderboard.main([*args, f"--slurm={script}"])
  assert "a SLURM array of 2 cells of two stages" in capsys.readouterr().out
  text = script.read_text()
  assert "#SBATCH --array=0-1\n" in text and "the fine-tune starts only if its pretraining" in text
  # A `python` that prints its arguments, and fails (exit 3) where FAIL names its argument.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "python").write_text('#!/bin/sh\nprintf \'%s\\n\' "$@"\n'
                                  'case "$*" in *"$FAIL"*) exit 3;; esac\n')
  (bin_dir / "python").chmod(stat.S_IRWXU)

  def task(index: int, fail: str):
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SLURM_ARRAY_TASK_ID": str(index), "FAIL": fail}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
  ran = task(1, "no such argument")
  assert ran.returncode == 0, ran.stderr
  assert ran.stdout.splitlines() == shlex.split(lines[2])[1:] + shlex.split(lines[3])[1:]
  ran = task(1, "objective=denoise")  # the pretraining fails: no fine-tune, the task fails
  assert ran.returncode == 3 and ran.stdout.splitlines() == shlex.split(lines[2])[1:]


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_rotary_and_window_controls_are_rows_of_their_own(tmp_path, cache, capsys):
  """--controls adds window16/window64 (the Longformer mixer without global tokens, mean
  pooled, no CLS) and transformer_rotary is the Transformer with rotary positions; a tiny grid
  of two of them trains and tables each under its own title."""
  leaderboard.main(["--models=transformer_rotary", "--tasks=listops", "--preset=cpu",
                    "--controls", "--root=runs/grid", "--print_commands"])
  lines = capsys.readouterr().out.splitlines()
  assert [shlex.split(l)[3].rsplit("/", 1)[1] for l in lines] == [
      "transformer_rotary-cpu", "window16-cpu", "window64-cpu"]
  assert shlex.split(lines[0])[2].endswith("listops.py:transformer,cpu")
  assert shlex.split(lines[0])[4:] == ["--config.model.positions=rotary"]
  assert shlex.split(lines[1])[2].endswith("listops.py:longformer,cpu")
  assert shlex.split(lines[1])[4:] == [
      "--config.model.attention.window=16", "--config.model.attention.global_positions=()",
      "--config.model.pooling=MEAN", "--config.model.use_cls=False"]
  root = tmp_path / "grid"
  run = _leaderboard("--models=transformer_rotary,window16", "--tasks=listops", "--preset=cpu",
                     f"--root={root}", *_tiny(str(tmp_path / "data"), cache, ("listops",)))
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert set(_table_cells(root)) == {("transformer_rotary", "listops"), ("window16", "listops")}
  recorded = json.loads((root / "listops" / "window16-cpu" / "results.json").read_text())
  assert recorded["config"]["model"]["attention"]["global_positions"] == []
  table = (root / "table" / "accuracy.md").read_text()
  assert "Transformer (rotary)" in table and "Window-16 (control)" in table
