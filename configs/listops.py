"""ListOps (Nangia & Bowman 2018 as set by LRA): nested MIN/MAX/MED/SM, 10 classes.

Usage: --config=configs/listops.py:MODEL[,cpu][,paper]
  default: the original repository's base config (4 layers, 512/1024, 8 heads, 5K steps).
  paper:   the paper's appendix (6 layers, FFN 2048).
  cpu:     smaller generated data (10 < length < 100, depth <= 5) and a small model; a few
           minutes on a 2-core CPU.
"""
from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "listops"
  # basic_{train,val,test}.tsv in data_dir, generated there if missing; the generator's
  # settings are the LRA release's (each declared in lra/data/settings.py).
  data_settings.fill(c.data, c.task)
  d = c.data
  sources.note(c, sources.task_config("configs/listops.py"))

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
    sources.note(c, sources.preset("cpu", "configs/listops.py"))
  return base.finish(c, options)
