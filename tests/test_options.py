"""The trainer's settings table (lra/training/options.py) and the data settings of each task
(lra/data/settings.py), declared as every setting is (lra.rules.Setting), are what the configs
hold, what the config checks refuse, what a resume may change and what the paper comparison
ignores."""
import ml_collections
import pytest

from lra.configs import base, listops, task_config
from lra.data import settings as data_settings
from lra.data.tasks import FACTS
from lra.errors import UserError
from lra.reporting import comparable
from lra.training import config_checks, optim, options, workdir
from lra import rules

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
  assert [k for k in fields if k not in NOT_TRAINER] == list(options.TABLE)
  for name in options.TABLE:
    assert c[name] == options.default(name), name
    assert type(c[name]) is type(options.default(name)), name  # ConfigDict keeps the type


def test_the_cache_dir_default_follows_xdg_cache_home_when_the_config_loads(monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
  assert base.base_config("transformer").compilation_cache_dir == "/somewhere/lra/jax_cache"
  monkeypatch.delenv("XDG_CACHE_HOME")
  assert base.base_config("transformer").compilation_cache_dir == "~/.cache/lra/jax_cache"


def test_every_setting_has_a_one_line_doc_and_a_models_settings_rule():
  for name, option in options.TABLE.items():
    assert option.doc and "\n" not in option.doc, name
    assert option.rule is None or isinstance(
        option.rule, (rules.Int, rules.Float, rules.Choice)), name
  assert options.TABLE["schedule"].rule.values == optim.SCHEDULES


def _with(config, name, value):
  """`config` with `name` set to `value` whatever its type (a ConfigDict field keeps its type)."""
  return ml_collections.ConfigDict({**config.to_dict(), name: value})


@pytest.mark.parametrize("name", [n for n, o in options.TABLE.items() if o.rule is not None])
def test_each_rule_refuses_its_bad_values_in_one_line(name):
  config = listops.get_config("transformer,cpu")
  config_checks.check_config(config, 1)  # the defaults pass
  rule = options.TABLE[name].rule
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
  for key in {*options.TABLE, *OBSERVING, *others}:
    assert workdir.changes_result(key, schedule) == (key not in observing), (key, schedule)


def test_what_the_paper_comparison_ignores_is_what_it_was():
  assert comparable._IGNORED == IGNORED
  assert options.IGNORED_BY_COMPARISON == IGNORED & set(options.TABLE)


def test_the_trainer_and_data_settings_are_declared_the_one_way():
  """Trainer settings and every task's data settings are lra.rules.Setting (the encoder's and
  the mixers' too: models/), not a table type of their own."""
  assert not hasattr(options, "Option")
  assert all(isinstance(o, rules.Setting) for o in options.TABLE.values())
  for task, declared in data_settings.DECLARED.items():
    for name, setting in declared.items():
      assert isinstance(setting, rules.Setting), (task, name)
      assert setting.doc and "\n" not in setting.doc, (task, name)


@pytest.mark.parametrize("task", list(FACTS))
def test_each_task_config_holds_its_declared_data_settings_in_order(task):
  """config.data is the declaration: its keys in their order, the declared defaults (a
  `cpu` preset changes values, never keys)."""
  declared = data_settings.DECLARED[task]
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
