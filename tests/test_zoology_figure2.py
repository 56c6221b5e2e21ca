"""scripts/zoology_figure2.py: the paper's grid (its points, widths, learning rates and steps)
and the CPU version become grid commands that the grid accepts, every model reading causally
where it has the setting."""
import importlib.util
import pathlib
import shlex

import pytest

from lra.commands import leaderboard

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _script():
  spec = importlib.util.spec_from_file_location("zoology_figure2",
                                                ROOT / "scripts" / "zoology_figure2.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_papers_grid():
  script = _script()
  gpu = script.SCALES["gpu"]
  assert gpu["points"] == ((64, 4, 512), (128, 8, 512), (256, 16, 256))
  assert gpu["widths"] == (64, 128, 256, 512)
  assert gpu["models"] == script.MODELS and script.SCALES["cpu"]["models"] == (
      "transformer", "based", "hyena", "mamba", "s5")
  assert gpu["learning_rates"] == pytest.approx((1e-4, 4.642e-4, 2.154e-3, 1e-2), rel=1e-3)
  command = script.point_command(gpu, gpu["points"][2], ["transformer", "hyena", "s5"], "r")
  assert "--config.num_train_steps=25000" in command  # 64 epochs of 100,000 at batch 256
  assert "--config.model.attention.l_max@hyena=256" in command
  assert {"--config.model.attention.causal@transformer=True",
          "--config.model.attention.causal@hyena=True",
          "--config.model.attention.bidirectional@s5=False"} <= set(command)
  command = script.point_command(gpu, gpu["points"][0], ["gla", "retnet", "deltanet"], "r")
  hybrid = {a for a in command if "hybrid_conv" in a or "num_heads" in a}
  assert hybrid == {"--config.model.hybrid_conv@gla=3", "--config.model.num_heads@gla=2",
                    "--config.model.hybrid_conv@retnet=3"}


def test_every_cpu_command_is_a_valid_grid(monkeypatch, capsys):
  """The grid plans each point's runs (every key of every cell checked) and prints them."""
  monkeypatch.chdir(ROOT)
  script = _script()
  cpu = script.SCALES["cpu"]
  models = list(script.MODELS)  # every model the GPU grid runs, the CPU's five among them
  for point in cpu["points"]:
    command = script.point_command(cpu, point, models, "runs/figure2_cpu")
    assert command[1:3] == ["-m", "lra.commands.leaderboard"]
    leaderboard.main(command[3:] + ["--print_commands"])
    lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
    runs = len(cpu["widths"]) * len(cpu["learning_rates"])
    assert len(lines) == len(models) * runs
    for model in models:
      mine = [line for line in lines if f"--config=configs/mqar.py:{model},cpu" in line]
      assert len(mine) == runs
      widths = {next(a for a in line if a.startswith("--config.model.qkv_dim=")) for line in mine}
      assert widths == {f"--config.model.qkv_dim={w}" for w in cpu["widths"]}
      assert all(script.causal_settings(model)[0].replace(f"@{model}", "") in line
                 for line in mine)
