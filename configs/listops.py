"""ListOps (Nangia & Bowman 2018 as set by LRA): nested MIN/MAX/MED/SM, 10 classes.

Usage: --config=configs/listops.py:MODEL[,cpu][,paper]
  default: the original repository's base config (4 layers, 512/1024, 8 heads, 5K steps).
  paper:   the paper's appendix (6 layers, FFN 2048).
  cpu:     smaller generated data (10 < length < 100, depth <= 5) and a small model; a few
           minutes on a 2-core CPU.
"""
from lra.configs import base
from lra.data import listops as listops_data


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "listops"
  d = c.data
  d.data_dir = "data/listops"    # basic_{train,val,test}.tsv; generated here if missing
  d.generate_if_missing = True   # ListOps is synthetic: make the data on first use
  d.max_len = 2000               # tokens per example (padded / truncated)
  # Generator settings (used only when generating), the LRA release values: num_train,
  # num_val, num_test; trees with min_length < length < max_length; max_depth, max_args.
  d.update(listops_data.RELEASE_SETTINGS)
  d.seed = 0                     # generator seed (the trainer's seed is c.seed)
  d.workers = 0                  # generator processes; 0 = all cores

  if "cpu" in options:
    d.data_dir = "data/listops_cpu"
    d.max_len = 100
    d.num_train, d.num_val, d.num_test = 20000, 1000, 2000
    d.min_length, d.max_length = 10, 100
    d.max_depth, d.max_args = 5, 5
    c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
    # Validated and logged twice as often as the other CPU presets: the README's first command
    # and its stored result (results/, docs/results.md) were made with 250 / 50.
    base.shrink(c, steps=2000, batch=64,
                shares=dict(eval_every=8, checkpoint_every=8, log_every=40))
    c.learning_rate = 0.05
  return base.finish(c, options)
