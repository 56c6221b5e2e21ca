"""Configs (options, the paper's values) and the learning-rate schedules."""
import numpy as np
import pytest

from configs import base, listops
from lra import optim


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
  with pytest.raises(ValueError, match="MODEL\\[,cpu\\]\\[,paper\\]"):
    base.parse_arg("transformer,tpu")


def test_rsqrt_schedule_follows_the_original_formula():
  c = listops.get_config("transformer")  # lr 0.05, warmup 1000
  lr = optim.learning_rate_schedule(c)
  np.testing.assert_allclose(lr(0), 0.0)
  np.testing.assert_allclose(lr(500), 0.05 * 0.5 / np.sqrt(1000), rtol=1e-6)
  np.testing.assert_allclose(lr(1000), 0.05 / np.sqrt(1000), rtol=1e-6)
  np.testing.assert_allclose(lr(4000), 0.05 / np.sqrt(4000), rtol=1e-6)


def test_cosine_schedule_warms_up_then_decays_to_zero():
  c = listops.get_config("transformer")
  c.schedule, c.learning_rate, c.warmup_steps, c.num_train_steps = "cosine", 1e-3, 10, 110
  lr = optim.learning_rate_schedule(c)
  np.testing.assert_allclose([lr(0), lr(5), lr(10), lr(60), lr(110)],
                             [0.0, 5e-4, 1e-3, 5e-4, 0.0], atol=1e-9)
