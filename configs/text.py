"""Text: IMDb reviews as UTF-8 bytes (id = byte + 1, 0 = padding), 2 classes.

Usage: --config=configs/text.py:MODEL[,cpu][,paper]
  default: the original repository's base config (4 layers, 256/1024, 4 heads, batch 32,
           lr 0.05 rsqrt, 20K steps, warmup 8000) at the paper's 4,000 tokens; the repository's
           own config used 1,000: --config.data.max_len=1000.
  paper:   the paper's appendix (6 layers, 512/2048, 8 heads).
  cpu:     512 tokens, a small model, 200 steps (still needs the real data, prepared once).
Data: python -m lra.data text --data_dir=data/text --imdb_tar=PATH/aclImdb_v1.tar.gz
"""
from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "text"
  # Prepared by `python -m lra.data text`; IMDb has no validation split: a fixed random 10% of
  # train is held out (data.validation="test" validates on test, as the original did).
  data_settings.fill(c.data, c.task)  # each declared in lra/data/settings.py
  c.num_train_steps, c.warmup_steps = 20000, 8000
  sources.note(c, sources.task_config("configs/text.py"))
  if "cpu" in options:
    c.data.max_len = 512
    base.shrink(c, steps=200, batch=16)
    sources.note(c, sources.preset("cpu", "configs/text.py"))
  return base.finish(c, options)
