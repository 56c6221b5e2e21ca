"""config.eval_max_examples (validation and test on a fixed sample), the time evaluation takes
(results.json's "evaluation"), a long pass's progress lines and an ETA that a validation does
not inflate."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.configs import image, listops, mqar, pathfinder, retrieval, text
from lra.data import tasks
from lra.reporting import accuracy, comparable, markdown
from lra.training import evaluation, progress, steps, trainer
from tests.tiny import tiny_config


def test_a_capped_evaluation_reads_a_fixed_sample_each_example_once(listops_dir):
  config = tiny_config(listops_dir, eval_max_examples=25)
  task = tasks.load(config)
  split = task.splits["test"]
  n = len(split["labels"])
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  _, eval_step, sharding = steps.make_steps(model, False, mesh)
  state = trainer.create_state(model, task, config, mesh)
  result = trainer.evaluate(eval_step, state, split, config.eval_batch_size, sharding,
                            config=config)
  rows = evaluation.rows(n, 25)
  assert len(set(rows.tolist())) == 25 and list(rows) == sorted(rows)  # the last batch padded
  np.testing.assert_array_equal(rows, evaluation.rows(n, 25))  # the same sample every time
  logits = model.apply(jax.device_get(state.params), split["inputs"][rows])
  expected = np.mean(np.argmax(logits, -1) == split["labels"][rows])
  assert (result["count"], result["examples"], result["available"]) == (25, 25, n)
  np.testing.assert_allclose(result["accuracy"], expected, rtol=1e-6)
  assert evaluation.rows(n, 0) is None and evaluation.rows(n, n) is None  # every example


def test_a_capped_run_records_its_evaluation_and_says_its_share_of_the_time(
    listops_dir, tmp_path, capsys):
  config = tiny_config(listops_dir, eval_max_examples=25)  # val 60, test 70 examples
  results = trainer.train_and_evaluate(config, str(tmp_path / "run"))
  with open(tmp_path / "run" / "results.json") as f:
    assert json.load(f)["evaluation"] == results["evaluation"]
  found = results["evaluation"]
  passes = 1 if results["best_step"] == 8 else 2  # the final state is tested apart
  assert {k: found["validation"][k] for k in ("split", "examples", "available", "passes")} == {
      "split": "val", "examples": 25, "available": 60, "passes": 2}  # steps 4 and 8
  assert {k: found["final"][k] for k in ("split", "examples", "available", "passes")} == {
      "split": "test", "examples": 25, "available": 70, "passes": passes}
  assert results["test_count"] == 25
  seconds = found["validation"]["time_s"] + found["final"]["time_s"]
  compiling = found["validation"]["compile_s"] + found["final"]["compile_s"]
  assert found["time_s"] == pytest.approx(seconds) and seconds > 0
  assert found["compile_s"] == pytest.approx(compiling) and 0 <= compiling < seconds
  train = results["train_time_s"] - found["validation"]["time_s"]  # the steps and saves
  assert found["train_s"] == pytest.approx(train) and train > 0
  evaluating = seconds - compiling
  assert found["share"] == pytest.approx(evaluating / (train + evaluating))
  assert f"evaluation took {evaluating:.1f} s, {100 * found['share']:.0f}% of training and " \
         f"evaluating: validation" in capsys.readouterr().out
  labels = evaluation.labels(tasks.load(config).splits["test"], 25)
  assert results["test_majority_rate"] == np.bincount(labels).max() / 25  # of the sample


def _result(validation, final, test_count):
  """A finished run's results.json as the tables read it."""
  return {"task": "image", "model": "transformer", "test_accuracy": 0.3,
          "best_val_accuracy": 0.3, "test_count": test_count, "train_count": 45000,
          "val_count": 5000, "config": {},
          "evaluation": {"validation": {"split": "val", **validation},
                         "final": {"split": "test", **final}}}


def test_the_tables_mark_a_run_evaluated_on_samples():
  capped = _result({"examples": 64, "available": 5000}, {"examples": 64, "available": 10000},
                   64)
  full = _result({"examples": 5000, "available": 5000},
                 {"examples": 10000, "available": 10000}, 10000)
  refs = lambda task, model: (("base", {}),)
  why = comparable.differences(capped, refs)
  assert why == ["tested on 64 of 10000 examples (a sample: config.eval_max_examples)",
                 "validated on 64 of 5000 examples (a sample: config.eval_max_examples)"]
  assert comparable.differences(full, refs) == []
  assert comparable.data_key(capped) != comparable.data_key(full)
  full.pop("evaluation")  # a run from before the setting: the same data as one uncapped
  assert comparable.data_key(full) == comparable.data_key(
      _result({"examples": 5000, "available": 5000}, {"examples": 10000, "available": 10000},
              10000))
  table = accuracy.accuracy_table([capped], references=refs)
  text_md = markdown.accuracy_markdown(table)
  assert "validated on 64 of 5000 examples (a sample" in text_md  # the cell's note
  assert "evaluated on samples (config.eval_max_examples): val 64 of 5,000, test 64 of " \
         "10,000" in text_md  # the run's line


def test_the_eta_after_a_validation_is_not_inflated_by_it():
  """The CPU run of the report: a log line every 3 steps of 0.5 s, an 82 s validation every
  15. Measured over wall time, the rate after a validation was 3 / 84 steps/s and the ETA
  ~0:19:36; of training alone it stays 2 steps/s, and the ETA falls by the time that passed."""
  clock = progress.TrainClock(now=0.0, step=12, eval_every=15)
  train = {"train_loss": 1.0, "train_accuracy": 0.5}
  rate = clock.lap(15, 1.5)
  clock.validated(82.0)
  before = clock.eta(15, 60, rate)
  assert before == pytest.approx(45 / 2 + 3 * 82)  # validations at 30, 45 and 60 to come
  clock.resume(1.5 + 82 + 0.5)  # after the validation and the checkpoint's save
  rate = clock.lap(18, 84 + 1.5)
  assert rate == pytest.approx(2.0)
  assert clock.eta(18, 60, rate) == pytest.approx(before - 1.5)
  line = progress.record(18, 60, {**train, "steps_per_s": rate}, None, clock)
  assert "2.00 steps/s, ETA 0:04:27" in line


def test_the_eta_counts_the_validation_at_the_last_step():
  clock = progress.TrainClock(now=0.0, step=0, eval_every=4)
  clock.validated(10.0)
  assert clock.eta(5, 10, 1.0) == pytest.approx(5 + 2 * 10)  # at 8 and at 10 (the last)
  assert clock.eta(10, 10, 1.0) == 0


def test_a_long_evaluation_says_how_far_it_is(monkeypatch):
  """Each batch takes 5 fake seconds: a line every PROGRESS_EVERY_S (15 s), none at the end."""
  now = [0.0]
  monkeypatch.setattr(evaluation, "_clock", lambda: now[0])

  def eval_step(state, batch):
    now[0] += 5.0
    w = jnp.asarray(batch["weights"])
    return {"loss_sum": w.sum(), "correct": w.sum(), "count": w.sum()}

  split = {"inputs": np.zeros((40, 3), np.int32), "labels": np.zeros(40, np.int32)}
  lines = []
  result = evaluation.evaluate(eval_step, None, split, 4, lambda b: b, name="test",
                               say=lines.append)
  assert lines == ["test: 12/40 examples in 0:00:15, about 0:00:35 left",
                   "test: 24/40 examples in 0:00:30, about 0:00:20 left",
                   "test: 36/40 examples in 0:00:45, about 0:00:05 left"]
  assert result["seconds"] == 50.0 and result["count"] == 40
  assert result["compile_s"] == 5.0  # the first call's (here the first batch's 5 s)


# Examples in the splits of the `cpu` presets that evaluate all of them: ListOps' and MQAR's
# generated (num_val, num_test).
_CPU_SPLITS = {"listops": (1000, 2000), "mqar": (1000, 1000)}


@pytest.mark.parametrize("module", [image, pathfinder, text, retrieval, listops, mqar])
def test_a_cpu_preset_evaluates_at_most_half_the_examples_it_trains(module):
  """configs/table.py's CPU_EVAL_EXAMPLES rule: the validations and two test passes read at
  most half as many examples as training does (Path-X's and Path-256's smoke runs of a few
  steps are left out: compiling is all of them)."""
  c = module.get_config("s5,cpu")
  val, test = ((c.eval_max_examples,) * 2 if c.eval_max_examples else _CPU_SPLITS[c.task])
  validations = c.num_train_steps // c.eval_every
  assert validations * val + 2 * test <= c.num_train_steps * c.batch_size / 2
  assert not module.get_config("s5").eval_max_examples  # the full presets: every example
