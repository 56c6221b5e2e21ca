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
from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "retrieval"
  data_settings.fill(c.data, c.task)  # prepared by `python -m lra.data retrieval`; 4,000 bytes
  c.num_train_steps, c.warmup_steps = 5000, 8000
  sources.note(c, sources.task_config("configs/retrieval.py"))
  if "cpu" in options:
    c.data.max_len = 512
    base.shrink(c, steps=200, batch=16)
    sources.note(c, sources.preset("cpu", "configs/retrieval.py"))
  return base.finish(c, options)
