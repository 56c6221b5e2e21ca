"""The one lookup table of per-task and per-model settings, and the step that applies it.

Every task config calls `apply` (through base.finish) last, so the choices below are the
only place where a model's size, pooling, positions or a mixer setting depends on the task or
on the model. What a mixer needs on every task is a fact of the mixer, kept on its class
(ENCODER_SETTINGS, SETTINGS_WHEN; models/common.py) and read here through the registry.
Trainer settings (steps, batch, learning rate) stay in the task's own config, but for the
`cpu` option's evaluation size and the denoise mask rate, per task below; a mixer's
defaults stay in its module; the state-space papers' and Mega's own tables are in
configs/published/ (applied here, after this table).
"""
from __future__ import annotations

from lra import config_sources as sources
from lra.configs import published
from lra.data.formal import loader as formal_loader
from lra.data.formal import specs as formal_specs
from lra.models import registry

_SIZE_KEYS = ("num_layers", "emb_dim", "qkv_dim", "mlp_dim", "num_heads")


def _sizes(num_layers, emb_dim, qkv_dim, mlp_dim, num_heads) -> dict[str, int]:
  """Encoder blocks; token embedding width; total width of queries, keys and values (all
  heads); hidden width of the block MLP and of the classifier head; attention heads."""
  return dict(zip(_SIZE_KEYS, (num_layers, emb_dim, qkv_dim, mlp_dim, num_heads)))


# Encoder sizes: the original repository's base config per task ("base"), what the paper's
# appendix changes ("paper", on top of base) and the small CPU model ("cpu", the `cpu` option).
# A (task, model) entry replaces the task's base sizes for that model.
SIZES = {
    "listops": dict(base=_sizes(4, 512, 512, 1024, 8), paper=dict(num_layers=6, mlp_dim=2048),
                    cpu=_sizes(2, 64, 64, 128, 4)),
    "text": dict(base=_sizes(4, 256, 256, 1024, 4), paper=_sizes(6, 512, 512, 2048, 8),
                 cpu=_sizes(2, 64, 64, 128, 4)),
    # The appendix lists no other values for Retrieval.
    "retrieval": dict(base=_sizes(4, 128, 128, 512, 4), paper={},
                      cpu=_sizes(2, 64, 64, 128, 4)),
    "image": dict(base=_sizes(1, 32, 32, 64, 1),
                  paper=dict(num_layers=3, num_heads=4, mlp_dim=128, qkv_dim=64),
                  cpu=_sizes(1, 32, 32, 64, 2)),
    ("image", "transformer"): dict(base=_sizes(1, 128, 64, 128, 8)),
    "pathfinder": dict(base=_sizes(1, 32, 16, 32, 2),
                       paper=dict(num_layers=4, num_heads=8, mlp_dim=128, qkv_dim=128),
                       cpu=_sizes(1, 32, 32, 64, 2)),
    ("pathfinder", "transformer"): dict(base=_sizes(4, 32, 16, 32, 4)),
    "pathx": dict(base=_sizes(1, 32, 32, 32, 2),
                  paper=dict(num_layers=4, num_heads=8, mlp_dim=128, qkv_dim=128),
                  cpu=_sizes(1, 16, 16, 32, 1)),
    # Beyond LRA. MQAR: Zoology's Figure 2 model, 2 layers, one attention head
    # (iclr24_zoology_figure2/configs.py lines 55-60, 140), d_model 128 (its default,
    # zoology/config.py line 99; the figure sweeps 64..512); mlp_dim = D is only the width of
    # the per-token head's hidden layer (the blocks have no MLP: TASK below). `paper` is base.
    "mqar": dict(base=_sizes(2, 128, 128, 128, 1), paper={}, cpu=_sizes(2, 64, 64, 64, 1)),
    # Beyond LRA. Path-256: the original repository's base config for it
    # (lra_benchmarks/image/configs/pathfinder256/base_pathfinder256_config.py); `paper` as
    # for Pathfinder (LRA's appendix has no Path-256).
    "path256": dict(base=_sizes(2, 32, 32, 32, 4),
                    paper=dict(num_layers=4, num_heads=8, mlp_dim=128, qkv_dim=128),
                    cpu=_sizes(1, 16, 16, 32, 1)),
    # Beyond LRA, the formal-language tasks (configs/formal.py names the sources): Grazzi et
    # al.'s parity (1 layer, d_model 16) and modular arithmetic (2 layers, d_model 128; the
    # word problems take it too), one head, mlp_dim = D the per-token head's hidden width
    # only (no MLP in the blocks: TASK); Deletang et al.'s Transformer encoder (5 layers,
    # embedding 64, 8 heads, MLP 4 x 64) for their other tasks. `paper` is base.
    **{task: dict(base=_sizes(1, 16, 16, 16, 1), paper={}, cpu=_sizes(1, 16, 16, 16, 1))
       if task == "parity" else
       dict(base=_sizes(2, 128, 128, 128, 1), paper={}, cpu=_sizes(2, 32, 32, 32, 1))
       if task.startswith(("modular_arithmetic", "word_")) else
       dict(base=_sizes(5, 64, 64, 256, 8), paper={}, cpu=_sizes(2, 32, 32, 64, 4))
       for task in formal_specs.SPECS},
}

# Encoder settings of a task, for every model.
TASK = {
    # The original's Pathfinder configs pool by the mean of all tokens, without a CLS token.
    "pathfinder": dict(pooling="MEAN", use_cls=False),
    "pathx": dict(pooling="MEAN", use_cls=False),
    "retrieval": dict(pair_features="uvpd"),  # [u, v, u*v, u-v]; "uv" = the shipped code's
    # Zoology's Figure 2 blocks: a mixer and no MLP (state_mixer Identity, configs.py line 145),
    # learned positions for attention (line 142, max_position_embeddings = the length; its
    # model.py line 245 re-initialises every nn.Embedding N(0, 0.02), as our learned table
    # starts), here for every mixer with queries and keys; the mixers whose ENCODER_SETTINGS
    # say "none", the recurrences, get none, as Zoology's others.
    # No CLS token (every position is read by the per-token head; pooling, unused, says MEAN).
    "mqar": dict(feedforward=False, use_cls=False, pooling="MEAN", positions="learned"),
    # Path-256's original base config: CLS pooling (the default; the 32 and 128 ones pool by
    # the mean) and learned positions (classifier_pool 'CLS', learn_pos_emb True).
    "path256": dict(positions="learned"),
    # The formal tasks: per position, no CLS token (pooling, unused, MEAN); sin/cos positions
    # for the mixers that take them (the recurrences' own "none" wins); blocks of a mixer
    # alone for Grazzi's recipes, with the MLP for Deletang's Transformer encoder.
    **{task: dict(use_cls=False, pooling="MEAN", positions="sinusoidal",
                  feedforward=not task.startswith(("parity", "modular_arithmetic", "word_")))
       for task in formal_specs.SPECS},
}

# Encoder settings of the original repository's full configs for one (task, model), not taken
# by the `cpu` option (dropout goes with the size there, as for the published tables):
# lra_benchmarks/image/configs/cifar10/base_cifar10_config.py (dropout 0.3, attention dropout
# 0.2, learned positions) and pathfinder32/transformer_base.py (dropout 0.2).
TASK_MODEL = {
    ("image", "transformer"): dict(dropout_rate=0.3, attention_dropout_rate=0.2,
                                   positions="learned"),
    ("pathfinder", "transformer"): dict(dropout_rate=0.2),
}

# Encoder settings a model needs on every task: each mixer's ENCODER_SETTINGS (its class
# comment says why), gathered for reading; `apply` asks the registry, for any mixer.
MODEL = {name: settings for name in registry.names()
         if (settings := registry.encoder_settings(name))}

# Mixer settings (config.model.attention) per (task, model).
ATTENTION = {
    ("text", "linformer"): dict(k=32),  # LRA's Text setting (the original never passed it on)
    # The LRA setting of local attention for the image tasks (its default 50 elsewhere).
    ("image", "local"): dict(block_size=64),
    ("pathfinder", "local"): dict(block_size=64),
    ("pathx", "local"): dict(block_size=64),
    ("path256", "local"): dict(block_size=64),
    # Exact attention in O(L) memory (cuDNN's fused kernel where it applies, else chunked):
    # dense scores at 65,536 tokens are 16 GiB per head and example in float32.
    ("path256", "transformer"): dict(implementation="auto"),
}


def _lra_recipes() -> tuple[dict, dict]:
  """MQAR's rows taken from the models' LRA recipes (configs/published), as (mixer rows,
  encoder rows). Each recurrence reads in the directions it has on LRA here, the
  `bidirectional` of its table on every task (Mamba and the recurrent family both, as S5, S4D
  and Mega; LRU one): the query part holds no values, so a backward scan sees none of the
  pairs a query needs (lra/data/mqar.py). A recipe that starts the token embedding its
  authors' way (the fla layers' N(0, 0.02): configs/published/recurrent.py) keeps it."""
  attention, model = {}, {}
  for name in sorted(set(published.MODELS) & set(registry.names())):
    entries = published.table(name).HYPERPARAMETERS.values()
    directions = {e["model"].get("attention", {}).get("bidirectional") for e in entries}
    if len(directions) == 1 and None not in directions:
      attention[("mqar", name)] = dict(bidirectional=directions.pop())
    inits = {e["model"]["embed_init"] for e in entries if "embed_init" in e["model"]}
    if len(inits) == 1:
      model[("mqar", name)] = dict(embed_init=inits.pop())
  return attention, model


# Encoder settings per (task, model) from a recipe, taken with the `cpu` option too.
_attention_rows, RECIPE_MODEL = _lra_recipes()
ATTENTION.update(_attention_rows)
# The formal tasks: every recurrence with a direction reads causally, as the sources'
# recurrent models (Grazzi's Mamba, DeltaNet, mLSTM; Deletang's RNNs and LSTMs) do.
ATTENTION.update({(task, name): dict(bidirectional=False) for task in formal_specs.SPECS
                  for name in registry.names()
                  if "bidirectional" in registry.default_settings(name)})
# Grazzi et al.'s DeltaNet has 4 heads on parity (xlstm/experiments/
# parity_delta_net_single_layer.yaml: n_heads 4, d_model 16) and on modular arithmetic with and
# without brackets (mod_arithmetic_delta_net.yaml, mod_arithmetic_with_brackets_delta_net.yaml:
# n_heads 4, d_model 128); their Mamba has none to set.
for _task in ("parity", "modular_arithmetic", "modular_arithmetic_brackets"):
  RECIPE_MODEL[(_task, "deltanet")] = dict(num_heads=4)


# Self-pretraining (config.objective="denoise"): the fraction of a task's real tokens that are
# masked. Amos, Berant & Gupta, "Never Train from Scratch" (ICLR 2024), Section 2 ("Self
# Pretraining (SPT)"): 50% for the visual tasks (following He et al. 2022), 15% for the
# language tasks Text and Retrieval (following Liu et al. 2019), 10% for ListOps. Their code
# (IdoAmos/not-from-scratch) agrees where it fixes the rate: mlm_prob 0.5 in
# configs/experiment/lra/transformer-lra-cifar-mlm.yaml, transformer-lra-pathx-mlm-small.yaml
# and configs/dataset/pathfinder-lm.yaml (the other tasks set dataset.mlm_prob on the command
# line). Each chosen token, independently, becomes the mask token (no random or kept tokens:
# src/dataloaders/base.py, MaskedSequenceDatasetWrapper.mask).
SPT_MASK_RATE = {"listops": 0.10, "text": 0.15, "retrieval": 0.15, "image": 0.50,
                 "pathfinder": 0.50, "pathx": 0.50,
                 # Path-256: their transformer-lra-pathx256-mlm.yaml, mlm_prob 0.5.
                 "path256": 0.50}


# The `cpu` option's evaluation size (config.eval_max_examples: validation and test each read a
# fixed random sample of this many examples) where a short CPU run would spend most of its time
# evaluating: Image's 60 steps of batch 8 train on 480 images, and its four validations of
# 5,000 and two test passes of 10,000 took 93% of a run. The rule: the run's evaluations (its
# validations, num_train_steps / eval_every, and two test passes) read at most half as many
# examples as its training. An evaluated example costs 1/2 to 1/5 of a trained one (one
# evaluation batch against one train step on the 2-core CPU: the Performer 1/2.2, S5 1/2.4,
# the Transformer 1/5), so evaluation takes at most about a fifth of training and evaluating
# (compiling its step, 1-9 s, apart). Image and Pathfinder (60 steps of 8): 6 x 40 = 240 of 480
# examples; Text and Retrieval (200 steps of 16): 6 x 256 = 1,536 of 3,200. ListOps (2,000
# steps of 64; 8 validations of 1,000, tests of 2,000) and MQAR evaluate every example; Path-X's
# and Path-256's smoke runs (a few steps and images) are all compiling.
CPU_EVAL_EXAMPLES = {"image": 40, "pathfinder": 40, "text": 256, "retrieval": 256}


def _model(table: dict, under: str = "model.") -> list[str]:
  """The dotted keys a table of encoder (or, `under` model.attention., mixer) settings sets."""
  return [under + key for key in table]


def apply(c, options: set[str]):
  """Sets config `c` (task c.task, model c.model.name) from the tables above, then from the
  model's published table (configs/published), if it has one. Each step notes what it set
  (lra.config_sources, for `train.py --explain_config`)."""
  task, model = c.task, c.model.name
  sizes, attention = SIZES[task], "model.attention."
  base_sizes = SIZES.get((task, model), sizes)["base"]
  c.model.update(base_sizes)
  sources.note(c, sources.TASK_MODEL_TABLE if (task, model) in SIZES else sources.TASK_TABLE,
               _model(base_sizes))
  if "paper" in options:
    c.model.update(sizes["paper"])
    sources.note(c, sources.preset("paper", "configs/table.py"), _model(sizes["paper"]))
  if "cpu" in options:
    c.model.update(sizes["cpu"])
    c.eval_max_examples = CPU_EVAL_EXAMPLES.get(task, c.eval_max_examples)
    sources.note(c, sources.preset("cpu", "configs/table.py"), _model(sizes["cpu"]))
  c.model.update(TASK.get(task, {}))
  c.mask_rate = SPT_MASK_RATE.get(task, c.mask_rate)  # beyond Amos et al.'s tasks: the default
  sources.note(c, sources.TASK_TABLE, _model(TASK.get(task, {})))
  task_model = TASK_MODEL.get((task, model), {}) if "cpu" not in options else {}
  task_model = {**task_model, **RECIPE_MODEL.get((task, model), {})}
  c.model.update(task_model)
  c.model.attention.update(ATTENTION.get((task, model), {}))
  sources.note(c, sources.TASK_MODEL_TABLE,
               _model(task_model) + _model(ATTENTION.get((task, model), {}), attention))
  c.model.update(registry.encoder_settings(model))
  sources.note(c, sources.MIXER, _model(registry.encoder_settings(model)))
  published.apply(c, options)
  sources.note(c, sources.published(model))
  # Mixer settings that follow from the encoder's (e.g. one-head Sparse Transformers merge).
  when = registry.settings_when(model, c.model)
  c.model.attention.update(when)
  sources.note(c, sources.MIXER, _model(when, attention))
  _follow_the_task(c)
  return c


def _length(c) -> int:
  """The task's longest input: its max_len, else its images' pixels (Image: CIFAR-10's 32 x 32;
  Pathfinder, Path-X, Path-256: size x size)."""
  if "max_len" in c.data:
    return c.data.max_len
  if c.task in formal_specs.SPECS:  # the widest split (the test lengths')
    return formal_loader.max_len(c.task, c.data)
  return c.data.size ** 2 if "size" in c.data else 32 * 32


def _follow_the_task(c) -> None:
  """Settings that follow the task's sequence: Hyena's `l_max` (its filter's time scale and
  table, Zoology's Figure 2: the input length) is the longest sequence, CLS token included;
  and a mixer gets at least its MIN_LAYERS blocks (Based, whose kinds cycle by layer, two on the
  one-layer tasks Image, Pathfinder and Path-X: Figure 2's conv and linear attention, not a
  convolution alone)."""
  keys = []
  if "l_max" in registry.default_settings(c.model.name):
    c.model.attention.l_max = _length(c) + int(c.model.use_cls)
    keys.append("model.attention.l_max")
  fewest = registry.get(c.model.name).MIN_LAYERS
  if c.model.num_layers < fewest:
    c.model.num_layers = fewest
    keys.append("model.num_layers")
  sources.note(c, sources.TASK_TABLE, keys)
