"""Configs (options, the paper's values) and the learning-rate schedules."""

import numpy as np
import pytest

from lra.configs import base, listops, table, task_config
from lra.training import optim
from lra.data import tasks
from lra.errors import UserError
from lra.models import registry

TASKS = {name: task_config(name) for name in tasks.FACTS}  # LRA's six and those beyond


def test_listops_defaults_are_the_repository_base_values():
  c = listops.get_config("transformer")
  m = c.model
  assert (m.num_layers, m.emb_dim, m.mlp_dim, m.num_heads) == (4, 512, 1024, 8)
  assert (c.batch_size, c.learning_rate, c.num_train_steps, c.warmup_steps) == (32, 0.05, 5000, 1000)
  assert (c.weight_decay, m.pooling, c.schedule, c.data.max_len) == (0.1, "CLS", "rsqrt", 2000)
  assert (c.data.num_train, c.data.min_length, c.data.max_length) == (96000, 500, 2000)


def test_paper_and_cpu_options():
  paper = listops.get_config("transformer,paper")
  assert (paper.model.num_layers, paper.model.mlp_dim) == (6, 2048)
  cpu = listops.get_config("transformer,cpu")
  assert cpu.data.max_len < 2000 and cpu.model.emb_dim < 512
  assert cpu.data.data_dir != listops.get_config("transformer").data.data_dir
  with pytest.raises(UserError, match="MODEL\\[,cpu\\]\\[,paper\\]"):
    base.parse_arg("transformer,tpu")


def test_rsqrt_schedule_follows_the_original_formula():
  c = listops.get_config("transformer")  # lr 0.05, warmup 1000
  lr = optim.learning_rate_schedule(c)
  np.testing.assert_allclose(lr(0), 0.0)
  np.testing.assert_allclose(lr(500), 0.05 * 0.5 / np.sqrt(1000), rtol=1e-6)
  np.testing.assert_allclose(lr(1000), 0.05 / np.sqrt(1000), rtol=1e-6)
  np.testing.assert_allclose(lr(4000), 0.05 / np.sqrt(4000), rtol=1e-6)
  c.warmup_steps = 0  # allowed (Int(0)): no warmup, and no 0 / 0 at the first step
  lr = optim.learning_rate_schedule(c)
  assert np.isfinite(lr(0)) and np.isclose(lr(4), 0.05 / 2, rtol=1e-6)


def test_cosine_schedule_warms_up_then_decays_to_zero():
  c = listops.get_config("transformer")
  c.schedule, c.learning_rate, c.warmup_steps, c.num_train_steps = "cosine", 1e-3, 10, 110
  lr = optim.learning_rate_schedule(c)
  np.testing.assert_allclose([lr(0), lr(5), lr(10), lr(60), lr(110)],
                             [0.0, 5e-4, 1e-3, 5e-4, 0.0], atol=1e-9)


def test_linear_schedule_warms_up_then_decays_linearly_to_zero():
  c = listops.get_config("transformer")
  c.schedule, c.learning_rate, c.warmup_steps, c.num_train_steps = "linear", 1e-3, 10, 110
  lr = optim.learning_rate_schedule(c)
  np.testing.assert_allclose([lr(0), lr(5), lr(10), lr(60), lr(110), lr(200)],
                             [0.0, 5e-4, 1e-3, 5e-4, 0.0, 0.0], atol=1e-9)


def test_table_names_real_tasks_models_and_settings():
  """A typo in configs/table.py (a task, a model, a mixer setting) fails here, not silently."""
  models = set(registry.names())
  for key in [*table.SIZES, *table.ATTENTION]:
    task, model = key if isinstance(key, tuple) else (key, None)
    assert task in TASKS, key
    assert model is None or model in models, key
  assert set(table.TASK) <= set(TASKS) and set(table.MODEL) <= models
  for (task, model), settings in table.ATTENTION.items():
    assert set(settings) <= set(registry.user_settings(model)), (task, model)
    c = TASKS[task].get_config(model)
    assert all(c.model.attention[k] == v for k, v in settings.items())


@pytest.mark.parametrize("task", TASKS)
def test_every_model_setting_of_the_table_reaches_every_task(task):
  for model, settings in table.MODEL.items():
    c = TASKS[task].get_config(model + ",cpu")
    assert all(c.model[k] == v for k, v in settings.items()), (task, model)


def test_transformer_xl_pools_without_a_cls_token():
  """MEAN pooling with a CLS token would average the CLS vector in (the drift this fixed)."""
  import jax
  from lra import models
  c = listops.get_config("transformer_xl,cpu")
  assert (c.model.pooling, c.model.use_cls, c.model.positions) == ("MEAN", False, "none")
  net = models.build(c.model.to_dict(), vocab_size=20, num_classes=10, max_len=16, pair=False)
  params = jax.eval_shape(net.init, jax.random.PRNGKey(0), jax.numpy.ones((2, 16), "int32"))
  assert "cls" not in params["params"]["encoder"]
