"""A tiny ListOps config for tests: seconds per run on a CPU."""
from configs import listops


def tiny_config(data_dir: str, **overrides):
  c = listops.get_config("transformer,cpu")
  c.data.data_dir = data_dir
  c.data.generate_if_missing = False
  c.data.max_len = 40
  m = c.model
  m.emb_dim, m.qkv_dim, m.mlp_dim, m.num_heads, m.num_layers = 16, 16, 32, 2, 1
  m.dropout_rate = m.attention_dropout_rate = 0.1  # exercise the dropout streams
  c.batch_size = c.eval_batch_size = 16
  c.num_train_steps, c.warmup_steps, c.learning_rate = 8, 2, 0.05
  c.log_every, c.eval_every, c.checkpoint_every = 2, 4, 2
  c.progress = False
  for key, value in overrides.items():
    node = c
    *path, last = key.split(".")
    for part in path:
      node = node[part]
    node[last] = value
  return c
