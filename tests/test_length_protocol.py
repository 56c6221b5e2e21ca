"""The length-generalisation protocol: per-length accuracy in the evaluation step and in
results.json (train short, test long), scaled accuracy, and eval.py length's table and chart."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.data import batches, tasks
from lra.errors import UserError
from lra.models import registry
from lra.reporting import length_chart, lengths, results
from lra.training import per_length, steps, trainer
from tests import length_task
from tests.reporting import run_eval
from tests.tiny import tiny_config


@pytest.fixture
def toy(monkeypatch):
  """The made-up running-parity task (tests/length_task.py) as tasks.load gives it, and its
  tiny config: trains on rows of 8 tokens, validates and tests on rows of 16."""
  monkeypatch.setitem(tasks.FACTS, length_task.NAME, length_task.FACTS)
  monkeypatch.setattr(tasks, "load", length_task.load)
  return tiny_config("unused", task=length_task.NAME,
                     **{"data.max_len": length_task.TEST_WIDTH})


def test_length_sums_and_record_equal_a_hand_count():
  # Five rows: right/scored positions 1/2, 2/2, 0/4, 3/3, and a padded row (nothing scored).
  sums = steps.length_sums(jnp.array([1.0, 2, 0, 3, 0]), jnp.array([2.0, 2, 4, 3, 0]),
                           jnp.array([3, 3, 5, 2, 4]), 6)
  np.testing.assert_allclose(sums["length_accuracy_sum"], [0, 0, 1.0, 1.5, 0, 0])
  np.testing.assert_allclose(sums["length_examples"], [0, 0, 1, 2, 0, 1])
  rows = per_length.rows(jax.device_get(sums))
  assert rows == [{"length": 2, "accuracy": 1.0, "examples": 1},
                  {"length": 3, "accuracy": 0.75, "examples": 2},
                  {"length": 5, "accuracy": 0.0, "examples": 1}]
  found = per_length.record(rows, 0.5, np.array([1, 4, 2]))
  assert found["mean_accuracy"] == pytest.approx((1.0 + 0.75 + 0.0) / 3)  # lengths equal
  assert found["scaled_mean_accuracy"] == pytest.approx((found["mean_accuracy"] - 0.5) / 0.5)
  assert [r["scaled_accuracy"] for r in found["per_length"]] == [1.0, 0.5, -1.0]
  assert (found["test_lengths"], found["train_lengths"]) == ({"min": 2, "max": 5},
                                                             {"min": 1, "max": 4})


def test_scaled_accuracy_is_zero_at_chance_and_one_when_perfect():
  assert per_length.scaled(0.5, 0.5) == 0.0 and per_length.scaled(1.0, 0.2) == 1.0
  assert per_length.scaled(0.6, 0.2) == pytest.approx(0.5)
  assert per_length.scaled(0.1, 0.2) == pytest.approx(-0.125)  # below chance: negative
  assert per_length.scaled(0.7, None) is None and per_length.scaled(None, 0.5) is None


def _numpy_per_length(model, state, split) -> dict[int, float]:
  """{length: mean over its examples of each one's share of labelled positions right}, from
  the model's logits row by row, no evaluation step, no batching."""
  logits = model.apply(state.params, jnp.asarray(split["inputs"]), deterministic=True)
  right = np.asarray(jnp.argmax(logits, -1)) == split["labels"]
  scored = split["labels"] != tasks.NO_TARGET
  share = (right & scored).sum(1) / scored.sum(1)
  return {int(n): float(share[split["lengths"] == n].mean())
          for n in np.unique(split["lengths"])}


@pytest.mark.sharding
def test_per_length_accuracy_on_8_devices_equals_a_numpy_count(toy):
  task = tasks.load(toy)
  model = trainer.build_model(toy, task)
  mesh = trainer.make_mesh(jax.devices())
  assert mesh.devices.size == 8
  _, eval_step, sharding = steps.make_steps(model, False, mesh,
                                            objective=steps.position_loss(model))
  state = trainer.create_state(model, task, toy, mesh)
  test = task.splits["test"]  # 40 rows in batches of 16: the last one has 8 padded rows
  found = trainer.evaluate(eval_step, state, test, 16, sharding, config=toy)
  expected = _numpy_per_length(model, state, test)
  assert [r["length"] for r in found["per_length"]] == sorted(expected)
  for row in found["per_length"]:
    assert row["accuracy"] == pytest.approx(expected[row["length"]], abs=1e-6)
  assert sum(r["examples"] for r in found["per_length"]) == len(test["labels"])


def test_a_run_trains_short_tests_long_and_records_each_length(toy, tmp_path, monkeypatch):
  widths = []
  real = trainer.train_batch

  def seen(task, config, step):
    batch = real(task, config, step)
    widths.append((batch["inputs"].shape[1], "lengths" in batch))
    return batch

  monkeypatch.setattr(trainer, "train_batch", seen)
  toy.num_train_steps, toy.eval_every, toy.checkpoint_every = 4, 4, 4  # one validation
  found = trainer.train_and_evaluate(toy, str(tmp_path / "run"))
  assert set(widths) == {(length_task.TRAIN_WIDTH, False)}  # never padded to the test width
  saved = json.loads((tmp_path / "run" / "results.json").read_text())[per_length.KEY]
  assert saved == json.loads(json.dumps(found[per_length.KEY]))
  test = length_task.load(toy).splits["test"]
  lengths_seen, counts = np.unique(test["lengths"], return_counts=True)
  assert [(r["length"], r["examples"]) for r in saved["per_length"]] == list(
      zip(lengths_seen.tolist(), counts.tolist()))
  assert saved["mean_accuracy"] == pytest.approx(
      np.mean([r["accuracy"] for r in saved["per_length"]]))
  assert saved["scaled_mean_accuracy"] == pytest.approx(2 * saved["mean_accuracy"] - 1)
  assert (saved["chance"], saved["train_lengths"], saved["test_lengths"]) == (
      0.5, {"min": 2, "max": 8}, {"min": 9, "max": 16})
  lines = per_length.table_lines(saved)
  assert lines[0].startswith("per-length test accuracy (trained on lengths 2-8, tested on 9-16")
  assert len(lines) == 2 + -(-len(saved["per_length"]) // per_length.PER_LINE)


@pytest.mark.parametrize("change, words", [
    ({"lengths": np.full(40, 18)}, "lengths outside 0..17"),
    ({"lengths": np.full((40, 1), 9)}, "one whole number per example"),
    ({"lengths": np.full(40, 9.0)}, "one whole number per example")])
def test_malformed_lengths_are_one_line(toy, change, words):
  task = tasks.load(toy)
  task.splits["test"].update(change)
  with pytest.raises(UserError, match=words):
    per_length.check(task)
  task = tasks.load(toy)
  task.chance = 1.0
  with pytest.raises(UserError, match=r"chance=1.0; a chance accuracy is a number in \[0, 1\)"):
    per_length.check(task)


def _result(root, name: str, model: str, seed: int, accuracies: dict[int, float],
            **attention) -> None:
  """A finished run of the toy task whose test accuracy per length is `accuracies`."""
  rows = [{"length": n, "accuracy": a, "examples": 4} for n, a in accuracies.items()]
  config = {"seed": seed, "num_train_steps": 10,
            "model": {"name": model, "attention": attention}}
  result = {"task": length_task.NAME, "model": model, "test_accuracy": 0.6,
            "best_val_accuracy": 0.6, "num_train_steps": 10, "config": config,
            per_length.KEY: per_length.record(rows, 0.5, [2, 8])}
  (root / name).mkdir(parents=True)
  (root / name / "results.json").write_text(json.dumps(result))


def test_eval_length_table_and_chart_pool_seeds_and_tell_settings_apart(capsys, tmp_path,
                                                                        monkeypatch):
  monkeypatch.setattr(results, "EXTRA_TASKS", (*results.EXTRA_TASKS, length_task.NAME))
  runs = tmp_path / "runs"
  _result(runs, "tf_0", "transformer", 0, {10: 0.75, 20: 0.5})   # scaled 0.5, 0: score 0.25
  _result(runs, "tf_1", "transformer", 1, {10: 1.0, 20: 0.75})   # 1.0, 0.5: score 0.75
  _result(runs, "mamba_plain", "mamba", 0, {10: 0.5, 20: 0.5}, signed=False)
  _result(runs, "mamba_signed", "mamba", 0, {10: 1.0, 20: 1.0}, signed=True)
  (runs / "listops_run").mkdir()  # a run without per-length figures is passed over
  (runs / "listops_run" / "results.json").write_text(json.dumps(
      {"task": "listops", "model": "transformer", "test_accuracy": 0.4}))
  drawn = {}
  real = length_chart.length_chart
  monkeypatch.setattr(length_chart, "length_chart",
                      lambda path, lines: drawn.update(real(path, lines)) or drawn)
  code, out, err = run_eval(capsys, "length", str(runs), f"--out={tmp_path / 'out'}")
  assert code == 0, err
  table = (tmp_path / "out" / "length.md").read_text()
  assert table in out and "trained on lengths 2-8, tested on 10-20; chance 0.5" in table
  assert "| Transformer | 2 | 0.500 ± 0.354 | 0.750 (seed 1) | 75.0 | 10 | tf_0, tf_1 |" in table
  assert "| Mamba (signed=False) | 1 | 0.000 | 0.000 (seed 0) |" in table
  assert "| Mamba (signed=True) | 1 | 1.000 | 1.000 (seed 0) |" in table
  assert (tmp_path / "out" / "length.png").stat().st_size > 0
  panel = drawn["panels"][length_task.NAME]
  assert panel["lines"]["Transformer"]["mean"] == [(10, 0.75), (20, 0.25)]  # over the seeds
  assert panel["lines"]["Transformer"]["best"] == [(10, 1.0), (20, 0.5)]  # seed 1's
  assert panel["trained"] == 8 and panel["ylabel"].startswith("scaled accuracy")
  assert len({line["colour"] for line in panel["lines"].values()}) == 3  # Mamba's two apart
  plain = lengths.length_markdown(lengths.length_lines(lengths.read_runs([str(runs)], []),
                                                       lengths.ACCURACY))
  assert "| Transformer | 2 | 75.0 ± 17.7 | 87.5 (seed 1) |" in plain


def test_a_mixer_built_for_one_length_trains_on_rows_padded_to_it(toy, monkeypatch):
  task = tasks.load(toy)
  plain = trainer.train_batch(task, toy, 0)
  monkeypatch.setattr(registry.get(toy.model.name), "FIXED_LENGTH", True)
  wide = trainer.train_batch(task, toy, 0)
  short, long = length_task.TRAIN_WIDTH, length_task.TEST_WIDTH
  assert plain["inputs"].shape[1] == short and wide["inputs"].shape[1] == long
  np.testing.assert_array_equal(wide["inputs"][:, :short], plain["inputs"])
  np.testing.assert_array_equal(wide["labels"][:, :short], plain["labels"])
  assert (wide["inputs"][:, short:] == 0).all()  # padding tokens,
  assert (wide["labels"][:, short:] == tasks.NO_TARGET).all()  # never scored


@pytest.mark.slow  # every mixer compiles a train and an evaluation step: minutes on 2 cores
@pytest.mark.parametrize("mixer", registry.names())
def test_every_mixer_trains_short_and_tests_long(monkeypatch, mixer):
  monkeypatch.setitem(tasks.FACTS, length_task.NAME, length_task.FACTS)
  config = tiny_config("unused", mixer, task=length_task.NAME,
                       **{"data.max_len": length_task.TEST_WIDTH})
  task = length_task.load(config)
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  train_step, eval_step, sharding = steps.make_steps(model, False, mesh,
                                                     objective=steps.position_loss(model))
  state = trainer.create_state(model, task, config, mesh)
  batch = trainer.to_global(trainer.train_batch(task, config, 0), sharding)
  state, metrics = train_step(state, batch, jax.random.PRNGKey(0))
  assert bool(metrics["finite"])
  found = trainer.evaluate(eval_step, state, task.splits["test"], 16, sharding, config=config)
  assert sum(r["examples"] for r in found["per_length"]) == len(task.splits["test"]["labels"])
