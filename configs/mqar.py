"""MQAR, multi-query associative recall (Arora et al. 2023, Zoology): a task beside LRA's six,
the probe of what linear-cost mixers lose against attention. Per-position: the value of every
queried key is predicted at its position (lra/data/mqar.py says why).

Usage: --config=configs/mqar.py:MODEL[,cpu]
  default: the paper's Figure 2 at its (256 tokens, 16 pairs) point, vocabulary 8,192, 100,000
           train examples, and its training (HazyResearch/zoology, read at commit d88d6f5):
           AdamW lr 1e-3 (zoology/config.py line 136; Figure 2 sweeps 1e-4..1e-2 and keeps
           each model's best, configs.py line 52), weight decay 0.1 (config.py line 137),
           torch's betas (0.9, 0.999) and eps 1e-8, cosine decay to 0 without warmup, 64
           epochs (configs.py line 151) at batch 256 (the batch of its 256-token runs, lines
           25-26): 25,000 steps. Blocks: a mixer and no MLP, 2 layers, D 128, one head,
           learned positions for the mixers with queries and keys, none for the
           recurrences (configs/table.py). Other Figure 2 points: --config.data.max_len=64
           --config.data.num_kv_pairs=4 (or 128 and 8).
  paper:   the same as the default (which is the paper's setting).
  cpu:     a small model (2 layers, D 64) and task (64 tokens as Figure 2's smallest point,
           but 2 pairs, not 4, and a vocabulary of 128; 50,000 train examples), 3,000 steps at
           lr 2e-3: a few minutes a model on 2 cores. Why 2 pairs: at 4 the Transformer here
           stayed near guessing among the values in context (25-31%) for 4,000-5,000 steps
           (its plateau before it learns to recall outlasts a CPU budget); at 2 it leaves it
           near step 2,000 (docs/results.md).
Data: generated on first use (python -m lra.data mqar --data_dir=data/mqar ...).

Deviations from Zoology: no dropout on the embedded input (its embed_dropout 0.1: this
encoder ties it to the residual dropout, which Zoology has at 0); the per-token head is
Dense(D)-GELU-Dense(V) (Zoology: a linear LM head tied to the embedding); the cosine steps
every step (Zoology: every epoch); no early stop at 99% validation accuracy; checkpoints are
chosen on a validation split of their own (Zoology validates on the test set); the encoders are
non-causal (every mixer reads as it does on LRA here; lra/data/mqar.py says why that keeps the
task a recall test).
"""
import math

from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings

EPOCHS = 64  # zoology configs.py line 151 (max_epochs)


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = "mqar"
  # {train,val,test}.{inputs,labels}.npy in data_dir, generated there if missing; the
  # generator's settings (lra/data/mqar.py SETTINGS) declared in lra/data/settings.py.
  data_settings.fill(c.data, c.task)
  d = c.data
  c.model.dropout_rate = 0.0     # Zoology's resid_dropout; attention dropout stays 0.1 (its MHA's)
  c.batch_size = c.eval_batch_size = 256
  c.num_train_steps = math.ceil(EPOCHS * d.num_train / c.batch_size)
  c.schedule, c.warmup_steps, c.learning_rate, c.weight_decay = "cosine", 0, 1e-3, 0.1
  c.adam_b2, c.adam_eps = 0.999, 1e-8
  c.eval_every = c.checkpoint_every = 1000
  sources.note(c, sources.task_config("configs/mqar.py"))
  if "cpu" in options:
    d.data_dir = "data/mqar_cpu"
    d.vocab_size, d.max_len, d.num_kv_pairs = 128, 64, 2
    d.num_train, d.num_val, d.num_test = 50_000, 1_000, 1_000
    c.model.attention_dropout_rate = 0.0
    base.shrink(c, steps=3000, batch=64)  # warmup 300, validated every 750
    c.learning_rate = 2e-3
    sources.note(c, sources.preset("cpu", "configs/mqar.py"))
  return base.finish(c, options)
