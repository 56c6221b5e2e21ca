"""Retrieval: do two ACL Anthology papers (bytes, 4,000 tokens each) cite each other? 2 classes.

One encoder shared by both documents (no cross attention), then features [u, v, u*v, u-v]
(the paper; `--config.model.pair_features=uv` is the [u, v] of the code the original shipped).
Usage: --config=configs/retrieval.py:MODEL[,cpu][,paper]
  default: the original repository's base config (4 layers, 128/512, 4 heads, batch 32,
           lr 0.05 rsqrt, 5K steps, warmup 8000).
  paper:   accepted; the appendix lists no other values for this task.
  cpu:     512 tokens per document, a small model, 200 steps (needs the prepared release).
Data: python -m lra.data retrieval --data_dir=data/retrieval --release_dir=PATH/tsv_data
"""
from lra.configs import base


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "retrieval"
  c.data.data_dir = "data/retrieval"  # prepared by `python -m lra.data retrieval`
  c.data.max_len = 4000               # byte tokens per document
  c.num_train_steps, c.warmup_steps = 5000, 8000
  if "cpu" in options:
    c.data.max_len = 512
    base.shrink(c, steps=200, batch=16)
  return base.finish(c, options)
