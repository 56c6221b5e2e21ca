"""Refusals that come before a run or a grid spends anything: a train
step the memory cannot hold, conflicting overrides, a workdir of another task, a Python without
the packages, and a grid cell whose settings its model refuses."""
import collections
import os
import sys

import psutil
import pytest

from lra import cli, config_record
from lra.commands import leaderboard
from lra.errors import UserError
from lra.training import trainer, workdir as workdir_lib
from tests import commands
from tests.commands import NONZERO, ROOT, error_line
from tests.tiny import tiny_config

_Memory = collections.namedtuple("_Memory", "available")


def test_a_step_the_host_cannot_hold_is_refused_before_the_data(tmp_path, monkeypatch):
  """The compiled train step's memory is compared with the host's before any data is made or
  loaded (here there is none to load): one line with both sizes and the fix."""
  monkeypatch.setattr(psutil, "virtual_memory", lambda: _Memory(2**20))  # 1 MB available
  config = tiny_config(str(tmp_path / "no_data"))
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(config, str(tmp_path / "run"))
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith("out of host memory (the train step needs "), message
  assert "by XLA's memory analysis of the compiled step; the host has 1.0 MB available" \
      in message, message
  assert "config.data.max_len=40, config.batch_size=16" in message, message
  assert "--config=configs/listops.py:transformer,cpu" in message, message
  assert not (tmp_path / "no_data").exists()


@pytest.mark.slow  # two tiny runs, over 10 s on 2 cores
def test_the_checked_train_step_is_compiled_once(listops_dir, tmp_path):
  """The check compiles the trainer's own jitted step, on the batch's dtypes (ListOps' tokens
  are uint8) and, resuming, the restored state's: training finds it compiled, in a new run and
  in a resumed one, so the check adds no compile."""
  from jax._src import monitoring
  lowered = []

  def count(event, duration, **kwargs):
    del duration
    if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
      lowered.append(kwargs.get("fun_name"))
  monitoring.register_event_duration_secs_listener(count)
  try:
    for steps in (2, 4):  # a new run, then its resume
      trainer.train_and_evaluate(tiny_config(listops_dir, num_train_steps=steps, eval_every=2,
                                             checkpoint_every=2, log_every=2, warmup_steps=1),
                                 str(tmp_path / "run"))
      assert lowered.count("jit(train_step)") == 1, lowered
      lowered.clear()
  finally:
    monitoring.unregister_event_duration_listener(count)


@pytest.mark.slow  # about 10 s on 2 cores
@pytest.mark.commands
def test_train_py_refuses_a_batch_no_host_holds_in_one_line(tmp_path):
  """4096 ListOps sequences of 30,000 tokens: about 160 TB, on any machine; refused before any
  data is made (the `,cpu` config would generate its data)."""
  data = tmp_path / "data"
  line = error_line(commands.run(
      "train.py", "--config=configs/listops.py:transformer,cpu", f"--workdir={tmp_path / 'run'}",
      f"--config.data.data_dir={data}", "--config.data.max_len=30000",
      "--config.batch_size=4096", "--config.eval_batch_size=4096", "--config.model.num_layers=1",
      "--config.compilation_cache_dir=", expect=NONZERO))
  assert line.startswith("error: out of host memory (the train step needs "), line
  assert " TB by XLA's memory analysis" in line, line
  assert "config.data.max_len=30000, config.batch_size=4096" in line and ",cpu)" in line, line
  assert not data.exists()


@pytest.mark.parametrize("argv, words", [
    (["--config.num_train_steps=300", "--config.num_train_steps=100"],
     "--config.num_train_steps=300 and --config.num_train_steps=100"),
    (["--config.num_train_steps@listops=3", "--config.num_train_steps@listops", "4"],
     "--config.num_train_steps@listops=3 and --config.num_train_steps@listops=4"),
])
def test_one_key_given_two_values_in_one_scope_is_refused(argv, words):
  with pytest.raises(UserError, match="disagree") as e:
    cli.take_overrides(argv, scoped=True)
  assert words in str(e.value), e.value


def test_one_key_given_the_same_value_twice_is_taken():
  rest, items = cli.take_overrides(["--config.seed=1", "--x", "--config.seed=1",
                                    "--config.learning_rate=0.001",
                                    "--config.learning_rate=1e-3"])
  assert rest == ["--x"] and len(items) == 4


GRID = ["--models=transformer,fnet", "--tasks=listops", "--preset=cpu"]


@pytest.mark.parametrize("args, words", [
    (["--config.num_train_steps=300", "--config.num_train_steps=100"],
     "--config.num_train_steps=300 and --config.num_train_steps=100 disagree"),
    (["--config.seed@listops=1", "--config.seed@transformer=2"],
     "listops/transformer: --config.seed@listops=1 and --config.seed@transformer=2"),
])
def test_a_grid_refuses_two_values_for_one_cell(tmp_path, capsys, args, words):
  with pytest.raises(SystemExit) as e:
    leaderboard.main([*GRID, *args, f"--root={tmp_path / 'grid'}", "--print_commands"])
  assert e.value.code == 1
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and words in err[0], err


def test_a_grid_cells_scoped_value_overrides_the_plain_one(tmp_path, capsys):
  """The more specific value wins, and each run is given one value (train.py refuses two)."""
  leaderboard.main([*GRID, "--config.num_train_steps=300", "--config.num_train_steps@fnet=100",
                    f"--root={tmp_path / 'grid'}", "--print_commands"])
  lines = capsys.readouterr().out.splitlines()
  assert [l.split(" --workdir=")[1].split(" ", 1)[1] for l in lines] == [
      "--config.num_train_steps=300", "--config.num_train_steps=100"], lines


def test_a_grid_checks_every_cell_before_the_first_run(tmp_path, monkeypatch, capsys):
  """--config.model.positions=rotary reaches FNet, which has no queries and
  keys to rotate: refused before the Transformer's run starts, naming the cell."""
  started = []
  monkeypatch.setattr(leaderboard, "execute", lambda run, stop: started.append(run) or (1, ""))
  with pytest.raises(SystemExit) as e:
    leaderboard.main([*GRID, "--config.model.positions=rotary", f"--root={tmp_path / 'grid'}"])
  assert e.value.code == 1 and started == []
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1, err
  assert err[0].startswith("error: listops/fnet-cpu: config.model.positions='rotary' is not "
                           "valid: "), err
  assert "(nothing has run; " in err[0] and "--config.KEY@TASK=VALUE" in err[0], err
  assert not (tmp_path / "grid").exists()


def test_a_workdir_of_another_task_says_so_before_any_step_count(tmp_path):
  """A ListOps run trained to step 8, asked for as a 4-step Text run: the tasks, not the
  steps."""
  held = tiny_config(str(tmp_path))
  held.num_train_steps = 8
  asked = tiny_config(str(tmp_path), num_train_steps=4, task="text")
  with pytest.raises(UserError) as e:
    workdir_lib.check_resume(asked, tmp_path, config_record.as_json(held), 8, allow=False)
  assert str(e.value) == (
      f"{tmp_path} holds the run of task 'listops' (see {tmp_path}/config.json), this config "
      f"asks for task 'text': its checkpoints cannot start a run of another model or task; "
      f"pick a new --workdir")


@pytest.mark.commands
@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_without_the_packages_the_commands_say_how_to_install_them(script):
  """A Python without the venv (here: without site-packages) reads lra from the checkout, but
  not JAX: one line with the README's install command, not a ModuleNotFoundError."""
  proc = commands.run("-S", script, "--help", expect=NONZERO)
  assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
  assert proc.stderr.startswith("error: "), proc.stderr
  assert cli.INSTALL in proc.stderr and sys.executable in proc.stderr, proc.stderr
  with open(os.path.join(ROOT, "README.md")) as f:
    assert cli.INSTALL in f.read()  # the README's set-up command
