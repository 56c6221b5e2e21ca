"""Published hyperparameters of the state-space models and Mega (configs/published) reach the
configs."""
import dataclasses
import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.configs import listops, pathx, published, task_config
from lra.data import tasks
from lra.errors import UserError
from lra.models import registry, settings
from lra.models.settings import EncoderConfig
from tests import helpers

TASKS = {name: task_config(name) for name in tasks.NAMES}


def _with_table():
  """The models of configs/published that have a table and a registered mixer."""
  found = []
  for name in published.MODELS:
    try:
      importlib.import_module(f"lra.models.mixers.{name}")  # registers it (the s5/lru files may not exist)
    except ModuleNotFoundError:
      continue
    if published.has_table(name):
      found.append(name)
  return found


MODELS = _with_table()
CASES = [(m, t) for m in MODELS for t in TASKS]


def test_s4d_has_a_table_and_other_models_none():
  assert "s4d" in MODELS
  assert not published.has_table("transformer") and not published.has_table("linformer")
  c = listops.get_config("transformer")
  assert c.ssm_learning_rate == 0.0 and c.model.get("norm", "layer") == "layer"
  assert c.model.use_cls and c.model.pooling == "CLS"  # untouched by any table


def _build(model_config, task):
  """Builds and initialises (shapes only) the classifier of a config at a tiny length."""
  model = model_config.to_dict()
  encoder_fields = {f.name for f in dataclasses.fields(EncoderConfig)}
  # Every architectural key is an encoder setting (feedforward, norm and prenorm came with
  # the SSM blocks), so nothing is dropped before building.
  assert set(published.ARCHITECTURE) <= encoder_fields
  pair = task == "retrieval"
  net = models.build(model, vocab_size=12, num_classes=3, max_len=16, pair=pair)
  tokens = jnp.ones((2, 16), jnp.int32)
  inputs = (tokens, tokens) if pair else (tokens,)
  return jax.eval_shape(net.init, jax.random.PRNGKey(0), *inputs)


@pytest.mark.parametrize("name,task", CASES)
def test_full_size_config_has_the_table_values(name, task):
  entry = dict(published.table(name).HYPERPARAMETERS[task])
  c = TASKS[task].get_config(name)
  model = dict(entry.pop("model"))
  mixer = model.pop("attention")
  for key, value in model.items():
    assert c.model[key] == value, key
  for key, value in mixer.items():
    assert c.model.attention[key] == value, key
  # The SSMs' one dropout also inside the layer, unless the table gives it apart (Mega); a
  # mixer without inner dropout (Mamba) keeps attention dropout at 0 (it refuses more).
  inner_dropout = c.model.dropout_rate if registry.takes_attention_dropout(name) else 0.0
  assert c.model.attention_dropout_rate == model.get("attention_dropout_rate", inner_dropout)
  epochs = entry.pop("epochs")
  for key, value in entry.items():
    assert c[key] == value, key
  assert c.eval_batch_size == c.batch_size
  assert c.num_train_steps == math.ceil(epochs * tasks.FACTS[task].train_size / c.batch_size)


# Slow: 72 full-size models traced, over a minute on 2 cores (the default suite builds S5's,
# Mamba's and Mega's full-size models in the parity tests below).
@pytest.mark.slow
@pytest.mark.parametrize("name,task", CASES)
def test_full_size_config_builds_its_layers_and_input_encoder(name, task):
  c = TASKS[task].get_config(name)
  encoder = _build(c.model, task)["params"]["encoder"]
  layers = c.model.num_layers
  assert f"block_{layers - 1}" in encoder and f"block_{layers}" not in encoder
  if c.model.input_encoder == "linear":  # the authors' pixel encoder: Dense(1 -> D)
    assert task in ("image", "pathfinder", "pathx") and "embed" not in encoder
    assert encoder["embed_linear"]["kernel"].shape == (1, c.model.emb_dim)
  else:
    assert encoder["embed"]["embedding"].shape == (12, c.model.emb_dim)


@pytest.mark.parametrize("name,task", helpers.slow_if_same_kind(CASES, lambda case: case[0]))
def test_cpu_option_keeps_small_sizes_and_takes_the_architecture(name, task):
  module = published.table(name)
  entry = module.HYPERPARAMETERS[task]
  mixer = entry["model"]["attention"]
  sizes = published.size_settings(module, mixer)
  c = TASKS[task].get_config(f"{name},cpu")
  small = TASKS[task].get_config("transformer,cpu")
  for key in ("emb_dim", "num_layers", "dropout_rate"):
    assert c.model[key] == small.model[key], key
  for key in ("batch_size", "num_train_steps", "learning_rate", "weight_decay", "schedule",
              "warmup_steps", "ssm_learning_rate"):
    assert c[key] == small[key], key
  defaults = settings.encoder_defaults()
  for key in published.ARCHITECTURE:
    assert c.model[key] == entry["model"].get(key, defaults[key]), key
  for key in published.RECIPE:  # the parameter groups are the recipe at any size
    assert c[key] == entry.get(key, ""), key
  defaults = registry.default_settings(name)
  for key, value in mixer.items():
    assert c.model.attention[key] == (defaults[key] if key in sizes else value), key
  _build(c.model, task)


def test_cpu_option_keeps_the_mixer_sizes_small():
  c = pathx.get_config("s4d,cpu")
  assert published.size_settings(published.table("s4d"),
                                 published.table("s4d").HYPERPARAMETERS["pathx"]["model"]
                                 ["attention"]) == {"state_size"}
  assert c.model.attention.dt_min == 0.0001  # an initialisation choice, taken
  c.model.attention.state_size = 4  # still overridable from the command line
  _build(c.model, "pathx")


def _parameter_count(model_config, task):
  """Parameters of the whole classifier of a config, with the task's vocabulary and classes."""
  facts = tasks.FACTS[task]
  net = models.build(model_config.to_dict(), vocab_size=facts.vocab_size,
                     num_classes=facts.num_classes, max_len=16, pair=facts.pair)
  tokens = jnp.ones((1, 16), jnp.int32)
  shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0),
                          *((tokens, tokens) if facts.pair else (tokens,)))
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes["params"]))


# ListOps and Retrieval (a pair) by default; the other four tasks' models `-m slow`.
@pytest.mark.parametrize("task", [t if t in ("listops", "retrieval") else
                                  pytest.param(t, marks=pytest.mark.slow) for t in TASKS])
def test_mamba_is_at_parameter_parity_with_s5(task):
  """Mamba published no LRA setup: configs/published/mamba.py matches S5's published model
  size per task; the counts its docstring states are the real ones, within 5% of each other."""
  s5_count, mamba_count = published.table("mamba").PARAMETERS[task]
  assert _parameter_count(TASKS[task].get_config("s5").model, task) == s5_count
  c = TASKS[task].get_config("mamba")
  assert _parameter_count(c.model, task) == mamba_count
  assert abs(mamba_count / s5_count - 1) < 0.05
  s5 = published.table("s5").HYPERPARAMETERS[task]
  assert c.model.num_layers == s5["model"]["num_layers"]  # S5's depth, a narrower width
  assert c.model.attention.bidirectional and c.model.attention_dropout_rate == 0.0
  assert c.ssm_learning_rate == c.learning_rate == s5["learning_rate"]


# --- Mega: sizes and parameter counts against the official modules ----------------------------

def _count(tree) -> int:
  return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(tree))


def _official_mega_block(d, z, v, ffn, h, span, norm) -> int:
  """Parameters of one official MegaSentenceEncoderLayer (facebookresearch/mega, fairseq/
  modules): MultiHeadEMA (delta, alpha, beta, gamma over 2d channels: bidirectional; omega),
  MovingAverageGatedAttention (v_proj, mx_proj to [u, z, r, hx], h_proj, gamma and beta 2 x z,
  the simple relative bias 2 span - 1), NormalizedFeedForwardNetwork (fc1, fc2) and the two
  norms (layernorm and batchnorm 2 d each, scalenorm 1)."""
  ema = 4 * 2 * d * h + d
  attention = (d * v + v) + (d * (z + v + 2 * d) + z + v + 2 * d) + (v * d + d) + 4 * z
  feedforward = (d * ffn + ffn) + (ffn * d + d)
  return ema + attention + (2 * span - 1) + feedforward + 2 * {"scale": 1}.get(norm, 2 * d)


# Table 8's norms (SN: ScaleNorm, which the encoder does not have: LayerNorm here).
_MEGA_NORMS = {"listops": "layer", "text": "scale", "retrieval": "scale", "image": "batch",
               "pathfinder": "batch", "pathx": "batch"}


def test_mega_sizes_and_parameter_counts_match_the_official_modules():
  """Prints each task's Mega (the paper gives no LRA parameter counts) and checks every block
  against the official count: ours has no key offset under softmax (z fewer) and LayerNorm
  where the official has ScaleNorm (2 d - 1 more per norm)."""
  from lra.configs.published import mega
  print("\ntask        layers  d   FFN  z   v   h  attention  norm   prenorm  block (official)"
        "  total (ours)")
  for task in TASKS:
    c = TASKS[task].get_config("mega")
    m, a = c.model, c.model.attention
    facts = tasks.FACTS[task]
    net = models.build(m.to_dict(), vocab_size=facts.vocab_size, num_classes=facts.num_classes,
                       max_len=16, pair=facts.pair)
    tokens = jnp.ones((2, 16), jnp.int32)
    params = jax.eval_shape(net.init, jax.random.PRNGKey(0),
                            *((tokens, tokens) if facts.pair else (tokens,)))["params"]
    block = _count(params["encoder"]["block_0"])
    official = _official_mega_block(m.emb_dim, a.z_dim, a.v_dim, m.mlp_dim, a.ema_dim,
                                    a.max_positions, _MEGA_NORMS[task])
    expected = official - a.z_dim * (a.attention_fn == "softmax") + 2 * (
        2 * m.emb_dim - 1) * (_MEGA_NORMS[task] == "scale")
    print(f"{task:11} {m.num_layers:6} {m.emb_dim:3} {m.mlp_dim:4} {a.z_dim:3} {a.v_dim:3} "
          f"{a.ema_dim:2}  {a.attention_fn:9}  {_MEGA_NORMS[task]:5}  {m.prenorm!s:7}  "
          f"{block:6} ({official:6})  {_count(params):8}")
    assert block == expected, (task, block, expected)
    assert (m.mlp_dim, a.v_dim) == (2 * m.emb_dim, 2 * m.emb_dim) and a.chunk_size == 0
  assert set(mega.CHUNK_SIZES) == set(TASKS)
  assert {size for task, size in mega.CHUNK_SIZES.items() if task != "pathx"} == {128}
  assert mega.CHUNK_SIZES["pathx"] == 4096


def test_a_wrong_published_table_is_a_user_error(monkeypatch):
  """A table without the task, or with a key the trainer lacks, is one line naming the file."""
  module = published.table("s4d")
  table = {task: dict(entry) for task, entry in module.HYPERPARAMETERS.items()}
  del table["image"]
  monkeypatch.setattr(module, "HYPERPARAMETERS", table)
  with pytest.raises(UserError, match=r"configs/published/s4d.py has no hyperparameters for "
                                      r"task 'image'; it has: listops"):
    task_config("image").get_config("s4d")
  table["listops"]["learning_rat"] = 0.1
  with pytest.raises(UserError, match=r"s4d.py sets 'learning_rat', which is not a trainer"):
    task_config("listops").get_config("s4d")


@pytest.mark.parametrize("name", MODELS)
def test_path256_takes_the_path_x_entry(name):
  """Path-256 (beyond LRA) trains with each table's Path-X recipe (published.ENTRY_OF), as the
  codes that train it do; only the data differs."""
  assert published.ENTRY_OF == {"path256": "pathx"}
  c, x = task_config("path256").get_config(name), pathx.get_config(name)
  assert (c.task, c.data.size, x.data.size) == ("path256", 256, 128)
  model, model_x = c.model.to_dict(), x.model.to_dict()
  for m in (model, model_x):  # the task table's head count, which these mixers do not read
    m.pop("num_heads")
  assert model == model_x
  for key in ("batch_size", "num_train_steps", "learning_rate", "ssm_learning_rate",
              "weight_decay", "warmup_steps", "schedule", *published.RECIPE):
    assert c[key] == x[key], key
