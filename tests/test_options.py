"""The trainer's settings (lra/training/options.py TrainerConfig) and the data settings of each
task (lra/data/settings.py), declared as every setting is (lra.rules.setting fields), are what
the configs hold, what the config checks refuse, what a resume may change and what the paper
comparison ignores; a setting that does nothing without another (`only_with`) is refused in a
model's settings and warned of in the run's."""
import dataclasses

import ml_collections
import pytest

from lra.configs import base, listops, task_config
from lra.data import settings as data_settings
from lra.data.tasks import FACTS
from lra.errors import UserError
from lra.reporting import comparable
from lra.training import config_checks, optim, options, workdir
from lra import rules

TRAINER = rules.declared(options.TrainerConfig)

NOT_TRAINER = ("task", "data", "model")  # the other top-level fields of configs/base.py
# The flags as they were before the table (workdir.OBSERVING, comparable._IGNORED), written
# out so that a flag lost from the table fails here.
OBSERVING = {"num_train_steps", "max_train_time_s", "eval_every", "log_every",
             "checkpoint_every", "keep_checkpoints", "progress", "log_all_processes",
             "compilation_cache_dir", "profile_steps", "data.workers",
             "data.generate_if_missing",
             "writers"}  # added since: where metrics go
IGNORED = {"seed", "data.seed", "data.split_seed", "data.data_dir", "data.workers",
           "data.generate_if_missing", "model.dtype", "eval_batch_size", "log_every",
           "eval_every", "checkpoint_every", "keep_checkpoints", "progress",
           "log_all_processes", "compilation_cache_dir", "profile_steps", "max_train_time_s",
           # Added since: the same mean gradient, by micro-batches (float rounding apart);
           # the protocol (SPT runs get rows of their own in the tables).
           "grad_accum_steps", "objective", "mask_rate", "init_from",
           "writers",  # where metrics go
           "eval_max_examples"}  # its sample shows in the counts (comparable._data_differences)


def test_base_config_holds_the_table_in_its_order_with_its_defaults():
  c = base.base_config("transformer")
  fields = list(c._fields)  # the order of assignment (keys() and to_dict() sort)
  assert fields[:2] == ["task", "seed"]  # the seed first, the rest after the model's
  assert [k for k in fields if k not in NOT_TRAINER] == list(TRAINER)
  for name in TRAINER:
    assert c[name] == options.default(name), name
    assert type(c[name]) is type(options.default(name)), name  # ConfigDict keeps the type


def test_the_cache_dir_default_follows_xdg_cache_home_when_the_config_loads(monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
  assert base.base_config("transformer").compilation_cache_dir == "/somewhere/lra/jax_cache"
  monkeypatch.delenv("XDG_CACHE_HOME")
  assert base.base_config("transformer").compilation_cache_dir == "~/.cache/lra/jax_cache"


def test_every_setting_has_a_one_line_doc_and_a_models_settings_rule():
  for name, option in TRAINER.items():
    assert option.doc and "\n" not in option.doc, name
    assert option.rule is None or isinstance(
        option.rule, (rules.Int, rules.Float, rules.Choice)), name
  assert TRAINER["schedule"].rule.values == optim.SCHEDULES


def _with(config, name, value):
  """`config` with `name` set to `value` whatever its type (a ConfigDict field keeps its type)."""
  return ml_collections.ConfigDict({**config.to_dict(), name: value})


@pytest.mark.parametrize("name", [n for n, o in TRAINER.items() if o.rule is not None])
def test_each_rule_refuses_its_bad_values_in_one_line(name):
  config = listops.get_config("transformer,cpu")
  config_checks.check_config(config, 1)  # the defaults pass
  rule = TRAINER[name].rule
  for bad in rule.bad_values():
    with pytest.raises(UserError) as e:
      config_checks.check_config(_with(config, name, bad), 1)
    assert str(e.value) == f"config.{name}={bad!r} is not valid: {rule.allowed()}"
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("schedule", ["rsqrt", "cosine", "constant", "linear"])
def test_what_a_resume_may_change_is_what_it_was(schedule):
  spans = schedule in ("cosine", "linear")  # the schedule ends at num_train_steps
  observing = OBSERVING - ({"num_train_steps"} if spans else set())
  others = {"task", "model.dtype", "model.attention.implementation", "data.max_len"}
  for key in {*TRAINER, *OBSERVING, *others}:
    assert workdir.changes_result(key, schedule) == (key not in observing), (key, schedule)


def test_what_the_paper_comparison_ignores_is_what_it_was():
  assert comparable._IGNORED == IGNORED
  assert options.IGNORED_BY_COMPARISON == IGNORED & set(TRAINER)


def test_the_trainer_and_data_settings_are_declared_the_one_way():
  """Trainer settings and every task's data settings are dataclass fields declared with
  lra.rules.setting (the encoder's and the mixers' too: models/), not a table of their own."""
  assert not hasattr(options, "Option") and not hasattr(options, "TABLE")
  assert not hasattr(data_settings, "DECLARED")
  assert all(isinstance(o, rules.Setting) for o in TRAINER.values())
  assert list(TRAINER) == [f.name for f in dataclasses.fields(options.TrainerConfig)]
  for task in FACTS:
    declared = rules.declared(data_settings.BY_TASK[task])
    assert declared and declared == data_settings.of(task), task
    for name, setting in declared.items():
      assert isinstance(setting, rules.Setting), (task, name)
      assert setting.doc and "\n" not in setting.doc, (task, name)


@pytest.mark.parametrize("task", list(FACTS))
def test_each_task_config_holds_its_declared_data_settings_in_order(task):
  """config.data is the declaration: its keys in their order, the declared defaults (a
  `cpu` preset changes values, never keys)."""
  declared = data_settings.of(task)
  config = task_config(task).get_config("transformer")
  assert list(config.data._fields) == list(declared), task
  assert {k: config.data[k] for k in declared} == {k: s.default for k, s in declared.items()}
  assert list(task_config(task).get_config("transformer,cpu").data._fields) == list(declared)


@pytest.mark.parametrize("task, key, bad, allowed", [
    ("pathfinder", "level", "medium", "one of 'easy', 'intermediate', 'hard'"),
    ("text", "val_fraction", 1.0, "a number > 0.0 and < 1.0"),
    ("listops", "max_len", 0, "an integer >= 1"),
])
def test_a_data_setting_is_refused_by_its_declared_rule(task, key, bad, allowed):
  config = task_config(task).get_config("transformer,cpu")
  config.data[key] = bad
  with pytest.raises(UserError) as e:
    config_checks.check_settings(config)
  assert str(e.value) == f"config.data.{key}={bad!r} is not valid: {allowed}"


# ----------------------------------------------------------------------------- only_with

def _layers():
  """(config key prefix, {name: Setting}) of every layer declared with rules.setting but the
  mixers (tested on a mixer of their own below)."""
  from lra.models.settings import EncoderConfig
  return [("model.", rules.declared(EncoderConfig)), ("", TRAINER),
          *((f"data.{task}:", data_settings.of(task)) for task in FACTS)]


def _another(setting: rules.Setting):
  """A value of `setting` other than its default that its rule allows."""
  default = setting.default
  if isinstance(setting.rule, rules.Choice):
    return next(v for v in setting.rule.values if v != default)
  if isinstance(default, bool):
    return not default
  return default + 1 if isinstance(default, int) else (default / 2 if default else 0.5)


def _missing(setting: rules.Setting, wanted):
  """A value of `setting` (a Bool or a Choice) other than `wanted`."""
  if isinstance(wanted, bool):
    return not wanted
  return next(v for v in setting.rule.values if v != wanted)


def _unmet_rows():
  return [(prefix, name, layer) for prefix, layer in _layers()
          for name, setting in layer.items() if setting.only_with]


def test_only_with_names_a_setting_of_its_layer_and_a_value_it_allows():
  rows = _unmet_rows()
  assert {(p, n) for p, n, _ in rows} >= {
      ("model.", "final_norm"), ("model.", "input_mean"), ("model.", "input_std"),
      ("model.", "embed_init"), ("model.", "batch_norm_momentum"), ("", "mask_rate"),
      ("data.text:", "val_fraction"), ("data.text:", "split_seed")}
  for prefix, name, layer in rows:
    other, wanted, *why = layer[name].only_with
    assert other in layer and other != name, (prefix, name)
    rule = layer[other].rule
    assert rule is None or rule.ok(wanted), (prefix, name)
    assert len(why) <= 1 and "\n" not in "".join(why), (prefix, name)


@pytest.mark.parametrize("name", [n for p, n, _ in _unmet_rows() if p == "model."])
def test_an_encoder_setting_that_does_nothing_is_refused_unless_its_default(name):
  from lra.models.settings import EncoderConfig, check_encoder
  setting = rules.declared(EncoderConfig)[name]
  other, wanted, *why = setting.only_with
  unmet = _missing(rules.declared(EncoderConfig)[other], wanted)
  value = _another(setting)
  with pytest.raises(rules.SettingError) as e:
    check_encoder({name: value, other: unmet})
  assert str(e.value) == (f"config.model.{name}={value!r} is not valid: its default "
                          f"{setting.default!r} unless config.model.{other}={wanted!r}"
                          + (f" ({why[0]})" if why else ""))
  check_encoder({name: setting.default, other: unmet})  # its default: nothing to refuse
  check_encoder({name: value, other: wanted})  # the setting it needs: it does something


@pytest.mark.parametrize("prefix, name", [(p, n) for p, n, _ in _unmet_rows()
                                          if p != "model."])
def test_a_run_setting_that_does_nothing_is_warned_of_where_given(prefix, name):
  """A trainer or data setting given on the command line where its only_with is unmet: one
  warning line; not given (a table's value), or with its condition met: none."""
  task = prefix[len("data."):-1] if prefix else "listops"
  config = task_config(task).get_config("transformer,cpu")
  values, key = (config.data, f"data.{name}") if prefix else (config, name)
  layer = data_settings.of(task) if prefix else TRAINER
  other, wanted = layer[name].only_with[:2]
  unmet = _missing(layer[other], wanted)
  values[other], values[name] = unmet, _another(layer[name])
  other_key = f"data.{other}" if prefix else other
  assert config_checks.idle_overrides(config, [key]) == [
      f"config.{key}={values[name]!r} does nothing here: only a run with "
      f"config.{other_key}={wanted!r} uses it (this one has {unmet!r})"]
  assert config_checks.idle_overrides(config, []) == []
  values[other] = wanted
  assert config_checks.idle_overrides(config, [key]) == []


def test_a_mixer_setting_that_does_nothing_is_refused_as_the_encoders_are():
  from lra.models.common import Mixer

  class Gated(Mixer):
    gate: bool = rules.setting(False, rules.Bool(), "gate the output")
    bias: float = rules.setting(0.0, rules.Float(), "the gate's bias",
                                only_with=("gate", True))

    def __call__(self, x, mask, deterministic=True):
      return x

  Gated(bias=0.0), Gated(gate=True, bias=0.5)  # its default, or the setting it needs
  with pytest.raises(rules.SettingError) as e:
    Gated(bias=0.5)
  assert str(e.value) == ("config.model.attention.bias=0.5 is not valid: its default 0.0 "
                          "unless config.model.attention.gate=True")
