"""The formal-language and state-tracking tasks (beyond LRA; lra/data/formal/): what every
one of their configs shares. configs/<task>.py (parity.py, even_pairs.py, ..., word_s5.py) is
`get_config(arg)` of its task here; the model is chosen by arg, as for every task.

Usage: --config=configs/TASK.py:MODEL[,cpu]
  default: the published setting of the task's source (RECIPES below: each names the file
           and lines it follows). Grazzi et al. (adankow/unlocking_state_tracking, commit
           dd420c5): parity from xlstm/experiments/parity_mamba_single_layer.yaml (1 layer,
           d_model 16; batch_size 256, lr 0.001, lr_warmup_steps 2000, num_steps 20000,
           weight_decay 0.0; min_sequence_length 3, max_sequence_length 40, validation and
           test 40..256), modular arithmetic from mod_arithmetic_mamba.yaml and with brackets
           from mod_arithmetic_with_brackets_mamba.yaml (2 layers, d_model 128; batch 256,
           lr 0.001, warmup 10000, 100000 steps, weight decay 0.1; lengths as parity's):
           AdamW with torch's betas (0.9, 0.999) and eps 1e-8 (experiments/main.py),
           warmup then cosine decay (experiments/lr_scheduler.py; theirs ends at lr x 1e-3,
           ours at 0), blocks of a mixer alone (their Mamba blocks have no MLP). Deletang et
           al. (google-deepmind/neural_networks_chomsky_hierarchy, commit 2b8eb4b): their
           Transformer encoder (models/transformer.py: 5 layers, embedding 64, 8 heads, MLP
           4 x 64, dropout 0.1, sin/cos positions, not causal) and experiments/example.py's
           training (batch 128, Adam lr 1e-3 constant, 10,000 steps; gradient clipping at
           norm 1, training.py's max_grad_norm), lengths 1..40 to train and 41..500 to test.
           The word problems (ours: Merrill et al. train and test at one length) take Grazzi's
           modular-arithmetic recipe.
  cpu:     a small model and run, a few minutes a model on 2 cores (PRESET_CPU below): fewer
           examples, shorter test lengths, its own data folder.
Positions: none for the recurrent mixers (their own ENCODER_SETTINGS); sinusoidal for the
mixers with queries and keys (Deletang's Transformer's sin/cos; a learned table would hold no
position past the training lengths). The recurrences read causally (bidirectional=False,
configs/table.py), as the sources' recurrent models do; attention reads both ways, as
Deletang's Transformer encoder. The head: this encoder's per-token head Dense(mlp_dim)-GELU-
Dense(classes) (theirs: a linear read-out).
The length axis, the label's place and the output slots: lra/data/formal/specs.py and
docs/data.md. Accuracy: per scored position; the task's chance (lra.data.tasks.Task.chance)
gives the scaled accuracy (acc - chance) / (1 - chance).
"""
from __future__ import annotations

import ml_collections

from lra import config_sources as sources
from lra.configs import base
from lra.data import settings as data_settings

# name -> trainer settings of the recipe (the docstring names the files).
RECIPES = {
    "grazzi_parity": dict(num_train_steps=20_000, batch_size=256, learning_rate=1e-3,
                          warmup_steps=2_000, weight_decay=0.0, schedule="cosine",
                          grad_clip_norm=0.0),
    "grazzi_arithmetic": dict(num_train_steps=100_000, batch_size=256, learning_rate=1e-3,
                              warmup_steps=10_000, weight_decay=0.1, schedule="cosine",
                              grad_clip_norm=0.0),
    "deletang": dict(num_train_steps=10_000, batch_size=128, learning_rate=1e-3,
                     warmup_steps=0, weight_decay=0.0, schedule="constant",
                     grad_clip_norm=1.0),
}
RECIPE_OF = {"parity": "grazzi_parity", "modular_arithmetic": "grazzi_arithmetic",
             "modular_arithmetic_brackets": "grazzi_arithmetic", "word_s3": "grazzi_arithmetic",
             "word_z60": "grazzi_arithmetic", "word_a5": "grazzi_arithmetic",
             "word_s5": "grazzi_arithmetic"}
# The cpu preset's data: 50,000 training strings, 1,000 to validate and test, test lengths to
# 100 (so evaluating stays a small share of a short run).
PRESET_CPU = dict(num_train=50_000, num_val=1_000, num_test=1_000, test_max_length=100)


def recipe(task: str) -> str:
  return RECIPE_OF.get(task, "deletang")


def get_config(task: str, arg=None) -> ml_collections.ConfigDict:
  model, options = base.parse_arg(arg)
  c = base.base_config(model)
  c.task = task
  # {train,val,test}.{inputs,labels,lengths}.npy in data_dir, generated there if missing; the
  # generator's settings (lra/data/formal/specs.py) declared in lra/data/settings.py.
  data_settings.fill(c.data, task)
  c.update(RECIPES[recipe(task)])
  c.eval_batch_size = c.batch_size
  c.model.dropout_rate = 0.1 if recipe(task) == "deletang" else 0.0
  c.adam_b2, c.adam_eps = 0.999, 1e-8
  c.eval_every = c.checkpoint_every = 1000
  sources.note(c, sources.task_config(f"configs/{task}.py"))
  if "cpu" in options:
    c.data.data_dir = f"data/{task}_cpu"
    c.data.update({k: v for k, v in PRESET_CPU.items()
                   if k != "test_max_length" or v >= c.data.test_min_length})
    c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
    base.shrink(c, steps=2000, batch=64)
    c.learning_rate = 3e-3
    sources.note(c, sources.preset("cpu", "configs/formal.py"))
  return base.finish(c, options)
