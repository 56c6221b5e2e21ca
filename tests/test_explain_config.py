"""`train.py --explain_config`: the final config of a run, each value with the layer of
configs/ (or the command line) that set it (lra.config_sources), and one override parser
(lra.cli) for train.py and the other commands."""
import os

import pytest

from lra import cli, config_sources
from lra.errors import UserError
from tests import commands
from tests.commands import ROOT

S4D = os.path.join(ROOT, "configs", "listops.py") + ":s4d"
OVERRIDES = [(None, "seed", "3"), (None, "model.dropout_rate", "0.2"),
             (None, "model.attention.state_size", "32")]


def test_each_value_names_the_layer_that_set_it_on_a_published_config():
  found = config_sources.sources(cli.load_config(S4D, OVERRIDES))
  layer = {key: where for key, (_, where) in found.items()}
  value = {key: v for key, (v, _) in found.items()}
  published = "published recipe (configs/published/s4d.py)"
  # The paper's recipe: S4's ListOps run (configs/published/s4d.py).
  assert (value["learning_rate"], layer["learning_rate"]) == (0.01, published)
  assert layer["model.norm"] == layer["weight_decay"] == layer["num_train_steps"] == published
  # The command line wins over the recipe, and says so.
  assert (value["seed"], layer["seed"]) == (3, "command line")
  assert (value["model.dropout_rate"], layer["model.dropout_rate"]) == (0.2, "command line")
  assert (value["model.attention.state_size"], layer["model.attention.state_size"]) == (
      32, "command line")
  # Untouched by every layer: the base; each other layer where it set something.
  assert layer["adam_b1"] == layer["eval_every"] == layer["model.dtype"] == config_sources.BASE
  assert layer["data.max_len"] == "the task's config (configs/listops.py)"
  assert layer["mask_rate"] == config_sources.TASK_TABLE
  assert layer["model.qkv_dim"] == config_sources.TASK_TABLE  # set, if to base's own value
  assert layer["model.positions"] == config_sources.MIXER  # S4D's ENCODER_SETTINGS
  assert layer["model.attention.bidirectional"] == config_sources.MIXER  # its default


def test_the_presets_and_the_task_model_table_are_named():
  layer = {k: w for k, (_, w) in config_sources.sources(
      cli.load_config(os.path.join(ROOT, "configs", "image.py") + ":transformer,paper", [])
  ).items()}
  assert layer["learning_rate"] == "paper preset (configs/image.py)"
  assert layer["model.num_layers"] == "paper preset (configs/table.py)"
  assert layer["model.positions"] == layer["model.emb_dim"] == config_sources.TASK_MODEL_TABLE
  cpu = {k: w for k, (_, w) in config_sources.sources(
      cli.load_config(os.path.join(ROOT, "configs", "listops.py") + ":transformer,cpu", [])
  ).items()}
  assert cpu["num_train_steps"] == cpu["data.max_len"] == "cpu preset (configs/listops.py)"
  assert cpu["model.emb_dim"] == "cpu preset (configs/table.py)"


@pytest.mark.parametrize("key, value, words", [
    ("model.num_layer", "2", "config.model has no key 'num_layer' (did you mean 'num_layers'?)"),
    ("modle.num_layers", "2", "config has no key 'modle' (did you mean 'model'?)"),
    ("seed.x", "2", "config.seed is a value, not a section"),
    ("num_train_steps", "2.5", "config.num_train_steps takes an integer (it is 5000), not '2.5'"),
    ("learning_rate", "fast", "config.learning_rate takes a number (it is 0.05), not 'fast'"),
    ("progress", "yes", "config.progress takes True or False (it is True), not 'yes'"),
    ("model", "3", "config.model is a section; set its keys (--config.model.NAME=VALUE)"),
])
def test_an_override_the_config_cannot_take_is_one_line(key, value, words):
  with pytest.raises(UserError) as e:
    cli.load_config(os.path.join(ROOT, "configs", "listops.py") + ":transformer",
                    [(None, key, value)])
  assert words in str(e.value) and "\n" not in str(e.value), e.value


def test_an_override_is_read_as_its_fields_type():
  config = cli.load_config(os.path.join(ROOT, "configs", "listops.py") + ":transformer", [
      (None, "progress", "false"), (None, "learning_rate", "1e-3"), (None, "batch_size", "8"),
      (None, "init_from", "123"), (None, "model.attention.implementation", "auto")])
  assert config.progress is False and config.learning_rate == 0.001
  assert config.batch_size == 8 and config.init_from == "123"  # a str field keeps the text
  assert config.model.attention.implementation == "auto"


@pytest.mark.commands
def test_train_py_explain_config_prints_every_value_and_its_layer_then_exits(tmp_path):
  proc = commands.run(os.path.join(ROOT, "train.py"), f"--config={S4D}", "--config.seed=3",
                      "--config.model.dropout_rate", "0.2", "--explain_config", cwd=tmp_path)
  lines = proc.stdout.splitlines()
  assert any(l.startswith("config.learning_rate = 0.01 ") and
             l.endswith("<- published recipe (configs/published/s4d.py)") for l in lines), lines
  assert any(l.startswith("config.seed = 3 ") and l.endswith("<- command line")
             for l in lines), lines
  assert any(l.startswith("config.model.dropout_rate = 0.2 ") for l in lines), lines
  assert all(" = " in l and " <- " in l for l in lines), lines  # one line per leaf value
  assert os.listdir(tmp_path) == []  # no workdir, no data


def test_the_config_argument_is_credited_with_the_model_name():
  """configs/base.py copies model.name from --config=FILE:MODEL's argument: that argument is
  its source, not base."""
  found = config_sources.sources(cli.load_config(S4D, []))
  assert found["model.name"] == ("s4d", "the --config argument (:s4d)")
  cpu = config_sources.sources(cli.load_config(S4D + ",cpu", [(None, "model.name", "s4d")]))
  assert cpu["model.name"] == ("s4d", "the --config argument (:s4d,cpu)")  # given again: same


@pytest.mark.commands
@pytest.mark.parametrize("model, setting, words", [
    # a mixer setting's rule, met as the model is built
    ("gla", "model.attention.form=chunk",
     "config.model.attention.form='chunk' is not valid: one of 'chunked', 'recurrent'"),
    # a rule met only as the parameters are made for the task's width (Mamba-2's heads)
    ("mamba2", "model.attention.head_dim=48",
     "config.model.attention.head_dim=48 is not valid: a divisor of the inner width"),
])
def test_explain_config_checks_as_a_run_and_names_the_check_that_fails(tmp_path, model, setting,
                                                                       words):
  proc = commands.run(os.path.join(ROOT, "train.py"),
                      f"--config={os.path.join(ROOT, 'configs', 'listops.py')}:{model},cpu",
                      f"--config.{setting}", "--explain_config", cwd=tmp_path,
                      expect=commands.NONZERO)
  assert commands.error_line(proc).startswith(f"error: a run of this config is refused: {words}")
  key, value = setting.split("=")
  listed = [l for l in proc.stdout.splitlines() if l.startswith(f"config.{key} = ")]
  assert len(listed) == 1 and listed[0].split(" = ")[1].split()[0].strip("'") == value, listed
  assert listed[0].endswith("<- command line") and proc.returncode == 1
  assert os.listdir(tmp_path) == []  # no workdir, no data
