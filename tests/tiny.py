"""A tiny ListOps run for tests, for any mixer: seconds per run on a CPU."""
from lra.configs import listops
from lra.models import registry
from tests import helpers


def tiny_config(data_dir: str, model: str = "transformer", **overrides):
  """The ListOps CPU config of `model` (so every per-model setting of configs/table.py holds),
  shrunk to seconds, with the mixer's tiny settings (tests/helpers.py); `overrides` are
  dotted config keys, e.g. **{"model.num_layers": 2}."""
  c = listops.get_config(f"{model},cpu")
  c.data.data_dir = data_dir
  c.data.generate_if_missing = False
  c.data.max_len = 40
  m = c.model
  m.emb_dim, m.qkv_dim, m.mlp_dim, m.num_heads, m.num_layers = 16, 16, 32, 2, 1
  m.dropout_rate = 0.1  # exercise the dropout streams (attention dropout where there is one)
  m.attention_dropout_rate = 0.1 if registry.get(model).ATTENTION_DROPOUT else 0.0
  m.attention.update(helpers.tiny_settings(model))
  c.batch_size = c.eval_batch_size = 16
  c.num_train_steps, c.warmup_steps, c.learning_rate = 8, 2, 0.05
  c.log_every, c.eval_every, c.checkpoint_every = 2, 4, 2
  c.progress = False
  c.compilation_cache_dir = ""  # tests write nothing under the user's home
  for key, value in overrides.items():
    node = c
    *path, last = key.split(".")
    for part in path:
      node = node[part]
    node[last] = value
  return c
