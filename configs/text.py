"""Text: IMDb reviews as UTF-8 bytes (id = byte + 1, 0 = padding), 2 classes.

Usage: --config=configs/text.py:MODEL[,cpu][,paper]
  default: the original repository's base config (4 layers, 256/1024, 4 heads, batch 32,
           lr 0.05 rsqrt, 20K steps, warmup 8000) at the paper's 4,000 tokens; the repository's
           own config used 1,000: --config.data.max_len=1000.
  paper:   the paper's appendix (6 layers, 512/2048, 8 heads).
  cpu:     512 tokens, a small model, 200 steps (still needs the real data, prepared once).
Data: python -m lra.data text --data_dir=data/text --imdb_tar=PATH/aclImdb_v1.tar.gz
"""
from lra.configs import base


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "text"
  c.data.data_dir = "data/text"    # prepared by `python -m lra.data text`
  c.data.max_len = 4000            # byte tokens per review (prepared at 4,000; cut here)
  # IMDb has no validation split. "heldout": a fixed random 10% of train (our fix);
  # "test": validate on the test split, as the original did (it chose checkpoints on test).
  c.data.validation = "heldout"
  c.data.val_fraction = 0.1        # share of train held out for validation
  c.data.split_seed = 0            # which 10%
  c.num_train_steps, c.warmup_steps = 20000, 8000
  if "cpu" in options:
    c.data.max_len = 512
    base.shrink(c, steps=200, batch=16)
  return base.finish(c, options)
