"""The generic trainer: sharding, resume, evaluation coverage, divergence, learning."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models

from lra.data import batches, tasks
from lra.training import optim, steps, trainer
from lra.errors import UserError
from tests.tiny import tiny_config


def _one_step(config, devices):
  task = tasks.load(config)
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh(devices)
  train_step, _, sharding = steps.make_steps(model, task.pair, mesh)
  state = trainer.create_state(model, task, config, mesh)
  batch = batches.train_batch(task.splits["train"], config.batch_size, 0, config.seed)
  state, metrics = train_step(state, trainer.to_global(batch, sharding), jax.random.PRNGKey(3))
  return jax.device_get(state.params), jax.device_get(metrics)


@pytest.mark.sharding
def test_step_on_8_devices_equals_1_device(listops_dir):
  assert jax.device_count() == 8
  config = tiny_config(listops_dir)
  params8, metrics8 = _one_step(config, jax.devices())
  params1, metrics1 = _one_step(config, jax.devices()[:1])
  np.testing.assert_allclose(metrics8["loss_sum"], metrics1["loss_sum"], rtol=1e-5)
  for a, b in zip(jax.tree_util.tree_leaves(params8), jax.tree_util.tree_leaves(params1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _final_params(workdir, config):
  """Parameters of the newest checkpoint, through the trainer's own restore."""
  from lra.training.checkpoint import Checkpoints
  task = tasks.load(config)
  model = trainer.build_model(config, task)
  like = trainer.create_state(model, task, config, trainer.make_mesh())
  ckpts = Checkpoints(workdir, 2)
  state, meta = ckpts.restore_latest(like)
  ckpts.close()
  return jax.device_get(state), meta


def test_killed_and_resumed_run_equals_uninterrupted(listops_dir, tmp_path, monkeypatch):
  config = tiny_config(listops_dir, num_train_steps=7, checkpoint_every=2, eval_every=3)
  straight = trainer.train_and_evaluate(config, str(tmp_path / "straight"))

  real_batch = batches.train_batch

  def dies_at_step_5(split, batch_size, step, seed):
    if step == 5:  # after the checkpoint at step 4, in the middle of the run
      raise KeyboardInterrupt
    return real_batch(split, batch_size, step, seed)

  monkeypatch.setattr(batches, "train_batch", dies_at_step_5)
  with pytest.raises(KeyboardInterrupt):
    trainer.train_and_evaluate(config, str(tmp_path / "resumed"))
  monkeypatch.setattr(batches, "train_batch", real_batch)
  resumed = trainer.train_and_evaluate(config, str(tmp_path / "resumed"))

  for key in ("test_accuracy", "test_loss", "best_step", "best_val_accuracy",
              "last_step_test_accuracy"):
    assert resumed[key] == straight[key], key
  a, _ = _final_params(str(tmp_path / "straight"), config)
  b, _ = _final_params(str(tmp_path / "resumed"), config)
  assert int(a.step) == int(b.step) == 7
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(x, y)
  with open(tmp_path / "resumed" / "results.json") as f:
    assert json.load(f)["test_accuracy"] == straight["test_accuracy"]


def test_every_test_example_counted_once(listops_dir):
  config = tiny_config(listops_dir)
  task = tasks.load(config)
  n = len(task.splits["test"]["labels"])
  assert n % config.eval_batch_size  # the last batch really is padded
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  _, eval_step, sharding = steps.make_steps(model, False, mesh)
  state = trainer.create_state(model, task, config, mesh)
  result = trainer.evaluate(eval_step, state, task.splits["test"], config.eval_batch_size,
                            sharding)
  logits = model.apply(jax.device_get(state.params), task.splits["test"]["inputs"])
  expected = np.mean(np.argmax(logits, -1) == task.splits["test"]["labels"])
  assert result["count"] == n
  np.testing.assert_allclose(result["accuracy"], expected, rtol=1e-6)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(listops_dir, tmp_path,
                                                              monkeypatch):
  real = optim.learning_rate_schedule

  def explodes_at_step_3(config):
    base = real(config)
    return lambda step: jnp.where(step >= 3, jnp.inf, base(step))

  monkeypatch.setattr(optim, "learning_rate_schedule", explodes_at_step_3)
  config = tiny_config(listops_dir, num_train_steps=8, log_every=1, checkpoint_every=2)
  workdir = str(tmp_path / "run")
  with pytest.raises(trainer.NonFiniteLossError, match="the checkpoint saved before it \\(step 2\\) is kept"):
    trainer.train_and_evaluate(config, workdir)
  monkeypatch.setattr(optim, "learning_rate_schedule", real)
  state, _ = _final_params(workdir, config)
  assert int(state.step) == 2
  assert all(np.all(np.isfinite(x)) for x in jax.tree_util.tree_leaves(state.params))
  assert not os.path.exists(os.path.join(workdir, "results.json"))


def test_the_run_refuses_its_steps_out_of_order(listops_dir, tmp_path):
  """lra.training.run_dir: no data before the memory check, no Orbax write before the data
  and the disk's room are checked, no step before the restore; the workdir's lock is released
  however the run ends."""
  from lra.training import memory_check, run_dir
  from lra.training.periodic import OutOfOrder
  config, workdir, mesh = tiny_config(listops_dir), str(tmp_path / "run"), trainer.make_mesh()
  shapes = memory_check.task_shapes(config)
  with pytest.raises(OutOfOrder, match="run.load_task after run.open"):
    with run_dir.open(config, workdir, mesh) as run:
      run.load_task(shapes)
  with run_dir.open(config, workdir, mesh) as run:  # the lock was released
    run.note_model(trainer.build_model(config, shapes))
    with pytest.raises(OutOfOrder, match="run.restore after run.note_model"):
      run.restore(None)
    with pytest.raises(OutOfOrder, match="run.steps after run.note_model"):
      next(run.steps(None, None))
    with pytest.raises(OutOfOrder, match="run.after_step before run.steps"):
      run.after_step(None, None)
  # No checkpoint folder, no config.json: the run made the workdir and saved nothing there,
  # so it left none behind (not even one holding only .lock).
  assert not os.path.exists(workdir)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_quick_config_loss_goes_down(listops_dir, tmp_path):
  """The README's CPU config (its model and optimiser) on the tiny data."""
  from lra.configs import listops
  config = listops.get_config("transformer,cpu")
  config.data.data_dir, config.data.generate_if_missing, config.data.max_len = listops_dir, False, 40
  config.num_train_steps, config.log_every, config.progress = 120, 20, False
  config.eval_every = config.checkpoint_every = 120
  results = trainer.train_and_evaluate(config, str(tmp_path))
  with open(tmp_path / "metrics.jsonl") as f:
    losses = [r["train_loss"] for r in map(json.loads, f) if "train_loss" in r]
  assert len(losses) == 6
  assert np.mean(losses[-2:]) < losses[0] - 0.2, losses
  assert results["test_count"] == 70
  assert os.listdir(tmp_path / "tensorboard")


def test_train_order_is_a_fresh_permutation_each_epoch():
  seen = [batches.train_indices(10, 3, step, seed=1) for step in range(6)]
  epoch0, epoch1 = np.concatenate(seen[:3]), np.concatenate(seen[3:])
  assert len(set(epoch0)) == len(set(epoch1)) == 9
  assert not np.array_equal(epoch0, epoch1)
  np.testing.assert_array_equal(batches.train_indices(10, 3, 4, seed=1), seen[4])


@pytest.mark.sharding  # a batch of 12 does not split over 8 devices
def test_bad_batch_size_is_a_user_error(listops_dir, tmp_path):
  with pytest.raises(UserError, match="multiple of the device count"):
    trainer.train_and_evaluate(tiny_config(listops_dir, batch_size=12), str(tmp_path))


def test_tiny_config_of_another_mixer_pools_without_cls(listops_dir):
  """tiny_config serves any mixer; Transformer-XL pools by MEAN with no CLS token (a CLS
  vector averaged into MEAN pooling was the drift configs/table.py fixed)."""
  model = tiny_config(listops_dir, "transformer_xl").model.to_dict()
  assert (model["pooling"], model["use_cls"], model["positions"]) == ("MEAN", False, "none")
  net = models.build(model, vocab_size=20, num_classes=10, max_len=40, pair=False)
  params = jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.ones((2, 40), jnp.int32))
  assert "cls" not in params["params"]["encoder"]


@pytest.mark.parametrize("steps", ["3", "5,2", "a,b", "1,2,3"])
def test_malformed_profile_steps_is_a_user_error(listops_dir, tmp_path, steps):
  with pytest.raises(UserError, match="'START,STOP'"):
    trainer.train_and_evaluate(tiny_config(listops_dir, profile_steps=steps), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")  # refused before anything ran


def test_time_limit_ends_the_run_tested_and_a_rerun_goes_on(listops_dir, tmp_path, capsys):
  """config.max_train_time_s ends a run as its last step would (validated, saved, the best
  checkpoint tested), results.json and the comparability check say so, and running again
  without the limit ends where an uninterrupted run does."""
  from lra.commands.references import paper_configs
  from lra.reporting import comparable
  settings = dict(num_train_steps=6, eval_every=4, checkpoint_every=4)
  limited = str(tmp_path / "limited")
  # Any limit is used up by the first step: the run stops after it, whatever the machine.
  first = trainer.train_and_evaluate(tiny_config(listops_dir, **settings,
                                                 max_train_time_s=1e-9), limited)
  assert first["num_train_steps"] == 1 and first["planned_num_train_steps"] == 6
  assert first["stopped_early"] == {"by": "max_train_time_s", "max_train_time_s": 1e-9,
                                    "step": 1, "planned_num_train_steps": 6}
  assert first["best_step"] == first["tested_step"] == 1
  assert 0.0 <= first["test_accuracy"] <= 1.0 and first["test_count"] == 70
  with open(os.path.join(limited, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert [(r["kind"], r["step"]) for r in rows if r["kind"] != "train"] == [("val", 1),
                                                                            ("test", 1)]
  assert "stopped by max_train_time_s after 1 of 6 steps" in comparable.differences(
      first, paper_configs)

  # The same command again trains no further step (before, each rerun added
  # one), says why in one line, tests again and leaves the record as it was.
  results_json = open(os.path.join(limited, "results.json")).read()
  rows_of = lambda: [{k: v for k, v in json.loads(l).items() if k != "time"}
                     for l in open(os.path.join(limited, "metrics.jsonl"))]
  metrics = rows_of()
  for _ in range(2):
    again = trainer.train_and_evaluate(tiny_config(listops_dir, **settings,
                                                   max_train_time_s=1e-9), limited)
    assert again["num_train_steps"] == 1 and again["stopped_early"] == first["stopped_early"]
    assert again["test_accuracy"] == first["test_accuracy"]
    assert again["train_time_s"] == first["train_time_s"]
  assert "config.max_train_time_s=1e-09 s is used up" in capsys.readouterr().out
  untimed = lambda text: {k: v for k, v in json.loads(text).items()
                         if k != "evaluation"}  # the test passes' own timings
  assert untimed(open(os.path.join(limited, "results.json")).read()) == untimed(results_json)
  assert rows_of() == metrics  # one test row, as before

  second = trainer.train_and_evaluate(tiny_config(listops_dir, **settings), limited)
  straight = str(tmp_path / "straight")
  trainer.train_and_evaluate(tiny_config(listops_dir, **settings), straight)
  assert second["num_train_steps"] == 6 and second["stopped_early"] is None
  resumed, _ = _final_params(limited, tiny_config(listops_dir, **settings))
  uninterrupted, _ = _final_params(straight, tiny_config(listops_dir, **settings))
  for a, b in zip(jax.tree_util.tree_leaves(resumed.params),
                  jax.tree_util.tree_leaves(uninterrupted.params)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.sharding
def test_accumulated_gradient_equals_the_big_batch(listops_dir):
  """config.grad_accum_steps: K micro-batches of B/K give the big batch's mean gradient, loss
  and metric sums (dropout off; float32 sums in another order: relative 1e-4), sharded over
  the 8 devices; through the train step too."""
  from jax.sharding import NamedSharding, PartitionSpec as P
  config = tiny_config(listops_dir, batch_size=32, **{"model.dropout_rate": 0.0,
                                                      "model.attention_dropout_rate": 0.0})
  task = tasks.load(config)
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  assert mesh.devices.size == 8  # tests/conftest.py's fake devices: the batch really is split
  state = trainer.create_state(model, task, config, mesh)
  batch = trainer.to_global(batches.train_batch(task.splits["train"], 32, 0, 0),
                            NamedSharding(mesh, P("data")))
  rng = jax.random.PRNGKey(0)
  big = jax.jit(lambda p, b: steps.gradients(model, False, p, {}, b, rng))(state.params, batch)
  for k in (2, 4):
    acc = jax.jit(lambda p, b: steps.accumulated_gradients(model, False, p, {}, b, rng, k, mesh))(
        state.params, batch)
    for a, b in zip(jax.tree_util.tree_leaves(acc[0]), jax.tree_util.tree_leaves(big[0])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    assert float(acc[2]["count"]) == 32 and float(acc[2]["correct"]) == float(big[2]["correct"])
    np.testing.assert_allclose(acc[2]["loss_sum"], big[2]["loss_sum"], rtol=1e-5)
    np.testing.assert_allclose(acc[3], big[3], rtol=1e-5)
  train_step, _, _ = steps.make_steps(model, False, mesh, accum_steps=4)
  _, metrics = train_step(state, batch, rng)
  assert float(metrics["count"]) == 32 and float(metrics["finite"]) == 1.0


def test_accumulation_that_does_not_divide_the_batch_is_one_line(listops_dir):
  from lra.training import config_checks
  config = tiny_config(listops_dir, batch_size=16, grad_accum_steps=4)
  with pytest.raises(UserError) as e:
    config_checks.check_config(config, 8)
  assert str(e.value) == ("config.batch_size=16 must be a multiple of config.grad_accum_steps=4 "
                          "x the device count (8): every device takes an equal share of every "
                          "micro-batch")
  config_checks.check_config(tiny_config(listops_dir, batch_size=32, grad_accum_steps=4), 8)
  with pytest.raises(UserError, match="grad_accum_steps=0 is not valid"):
    config_checks.check_config(tiny_config(listops_dir, grad_accum_steps=0), 8)
