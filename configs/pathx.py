"""Path-X: Pathfinder at 128x128, 16,384 pixel tokens (every LRA model failed it).

Usage: --config=configs/pathx.py:MODEL[,cpu][,paper]
  default: the original repository's base config: 1 layer, emb 32, mlp 32, 2 heads, batch 64,
           lr 1e-3 cosine, 500K steps, gradient clipping 1.0, MEAN pooling; hard level.
  paper:   as for Pathfinder (4 layers, 8 heads, FFN 128, qkv 128, lr 0.01).
  cpu:     40 generated images, a tiny model, batch 1, 3 steps: a smoke run (full attention
           over 16K tokens is 1 GB of scores per head and example).
"""
from lra import config_sources as sources
from lra.configs import base
from lra.configs.pathfinder import pathfinder_config


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = pathfinder_config(model, options, 128)
  c.batch_size = c.eval_batch_size = 64
  c.num_train_steps, c.warmup_steps, c.grad_clip_norm = 500000, 312, 1.0
  sources.note(c, sources.task_config("configs/pathx.py"))
  if "cpu" in options:
    c.data.data_dir, c.data.num_images = "data/pathfinder128_cpu", 40
    base.shrink(c, steps=3, batch=1)
    c.eval_every = c.checkpoint_every = 3  # evaluating 16K-token images is the slow part
    sources.note(c, sources.preset("cpu", "configs/pathx.py"))
  return base.finish(c, options)
