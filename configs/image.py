"""Image: CIFAR-10 in grayscale, 1,024 pixel tokens (values 0..255), 10 classes.

Black pixels (value 0) are NOT padding here: every pixel is a real token. The original's
padding mask `inputs > 0` dropped black pixels by accident; `--config.data.black_is_padding=True`
restores that behaviour.
Usage: --config=configs/image.py:MODEL[,cpu][,paper]
  default: the original repository's base config: 1 layer, 32/64, 1 head (for the Transformer:
           1 layer, emb 128, qkv 64, mlp 128, 8 heads), batch 256, lr 5e-4 warmup + cosine,
           35K steps (200 epochs), warmup 175, no weight decay, CLS pooling.
  paper:   the paper's appendix (3 layers, 4 heads, FFN 128, qkv 64, lr 0.01).
  cpu:     a 1-layer model, batch 8, 60 steps: a smoke run (needs the prepared data).
Data: python -m lra.data image --data_dir=data/image --cifar=PATH/cifar-10-binary.tar.gz
"""
from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "image"
  data_settings.fill(c.data, c.task)  # prepared: train[:90%] / train[90%:] / test
  c.batch_size = c.eval_batch_size = 256
  c.schedule, c.learning_rate, c.warmup_steps, c.num_train_steps = "cosine", 5e-4, 175, 35000
  c.weight_decay = 0.0
  c.eval_every = c.checkpoint_every = 1000
  sources.note(c, sources.task_config("configs/image.py"))
  if "paper" in options:
    c.learning_rate = 0.01
    sources.note(c, sources.preset("paper", "configs/image.py"))
  if "cpu" in options:
    base.shrink(c, steps=60, batch=8)
    sources.note(c, sources.preset("cpu", "configs/image.py"))
  return base.finish(c, options)
