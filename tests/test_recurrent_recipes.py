"""The recurrent family's LRA tables (configs/published): HGRN2's from its authors' run script,
checked against values transcribed here from OpenNLPLab/HGRN2 run_lra.py (commit b154c396),
and the ten at S5's size (our choice, configs/published/recurrent.py): parameter parity with
S5's published models, S5's training, bidirectional mixers, the authors' no-decay groups; MQAR
reads each recurrence in its LRA direction. That every task's config of each loads, with and
without `cpu`, and builds is tests/test_published_configs.py's (its models are the folder's)."""
import math
import pathlib

import jax
import jax.numpy as jnp
import pytest

from lra import models
from lra.configs import mqar, published, task_config
from lra.configs.published import mamba, recurrent
from lra.data import tasks
from lra.models import registry
from lra.training import optim
from tests import helpers

LRA = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
AT_S5_SIZE = ("mamba2", "retnet", "gla", "deltanet", "gated_deltanet", "deltaproduct",
              "rwkv7", "kda", "comba", "mlstm")
FAMILY = (*AT_S5_SIZE, "hgrn2")


def _variables(model_config, task):
  """The shapes of the whole classifier's variables, with the task's vocabulary and classes."""
  facts = tasks.FACTS[task]
  net = models.build(model_config.to_dict(), vocab_size=facts.vocab_size,
                     num_classes=facts.num_classes, max_len=16, pair=facts.pair)
  tokens = jnp.ones((1, 16), jnp.int32)
  return jax.eval_shape(net.init, jax.random.PRNGKey(0),
                        *((tokens, tokens) if facts.pair else (tokens,)))


def _count(tree) -> int:
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(tree))


def test_every_module_of_the_folder_is_a_models_table_or_a_builder():
  """published.MODELS is derived from the files: a new table needs no edit there."""
  folder = pathlib.Path(published.__file__).parent
  modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
  assert set(published.MODELS) == modules - set(published.BUILDERS)
  assert set(FAMILY) | {"s4d", "s5", "lru", "mamba", "mega"} <= set(published.MODELS)
  assert all(published.has_table(name) for name in FAMILY)
  assert not published.has_table("recurrent") and not published.has_table("transformer")


def test_s5_counts_are_the_ones_mambas_table_checks():
  """recurrent.S5_PARAMETERS is S5's count (test_published_configs checks mamba.py's)."""
  assert recurrent.S5_PARAMETERS == {t: s5 for t, (s5, _) in mamba.PARAMETERS.items()}


# ListOps by default; the other tasks' 30 full-size models (a minute on 2 cores) `-m slow`.
@pytest.mark.parametrize("name", helpers.slow_if_same_kind(AT_S5_SIZE))
@pytest.mark.parametrize("task", [t if t == "listops" else pytest.param(t, marks=pytest.mark.slow)
                                  for t in LRA])
def test_our_choices_are_at_parameter_parity_with_s5_and_train_as_s5(name, task):
  """The counts a table states are the real ones, within 5% of S5's published model's; S5's
  depth, dropout and training; the mixer bidirectional, nothing dropped inside it."""
  c = task_config(task).get_config(name)
  count = _count(_variables(c.model, task)["params"])
  assert count == published.table(name).PARAMETERS[task]
  assert abs(count / recurrent.S5_PARAMETERS[task] - 1) < 0.05
  s5 = published.table("s5").HYPERPARAMETERS[task]
  assert (c.model.num_layers, c.model.dropout_rate) == (s5["model"]["num_layers"],
                                                        s5["model"]["dropout_rate"])
  for key in ("batch_size", "learning_rate", "weight_decay", "warmup_steps", "schedule",
              "adam_b2", "adam_eps", "grad_clip_norm"):
    assert c[key] == s5[key], key
  assert c.ssm_learning_rate == c.learning_rate and c.ssm_params == ""
  assert c.num_train_steps == math.ceil(s5["epochs"] * tasks.FACTS[task].train_size
                                        / s5["batch_size"])
  assert c.model.attention.bidirectional and c.model.attention_dropout_rate == 0.0
  assert (c.model.norm, c.model.prenorm, c.model.final_norm) == ("layer", True, True)
  assert c.model.emb_dim % 2 == 0


@pytest.mark.parametrize("name", helpers.slow_if_same_kind(AT_S5_SIZE))
def test_only_the_authors_no_decay_leaves_skip_weight_decay(name):
  """The mixer's OPTIMIZER_GROUP (Mamba-2: A_log, D, dt_bias; Gated DeltaNet, KDA: A_log,
  dt_bias; Comba: A_log, dt_bias, D) trains without weight decay, at the global rate; every
  other leaf decays."""
  c = task_config("listops").get_config(name)
  params = _variables(c.model, "listops")["params"]
  labels = optim.param_labels(params, optim.groups(c), optim.explicit_names(c))
  no_decay = {"mamba2": {"A_log", "D", "dt_bias"},
              "gated_deltanet": {"A_log", "dt_bias"},
              "deltaproduct": {"A_log", "dt_bias"}, "kda": {"A_log", "dt_bias"},
              "comba": {"A_log", "dt_bias", "D"}}.get(name, set())
  for path, label in jax.tree_util.tree_flatten_with_path(labels)[0]:
    leaf = path[-1].key
    assert label == (optim.SSM if leaf in no_decay else optim.OTHER), leaf


# OpenNLPLab/HGRN2 run_lra.py at b154c396, per task (their keys: aan, imdb, listops, cifar,
# pathfinder, pathfinderx): total batch, n_layers, d_model, norm, lr, wd, dropout, prenorm,
# warmup steps, GLU expand ratio, expand_ratio, epochs, use_lower_bound, encoder,
# gradient clip (Image's script passes none: the trainer's default 0).
RUN_LRA = {
    "listops": (128, 5, 64, "synbatch", 0.0005, 0, 0, True, 5000, 1, 4, 50, True,
                "position", 0),
    "text": (64, 4, 128, "layer", 0.005, 0, 0.1, True, 10000, 1, 8, 40, True, "id", 0),
    "retrieval": (128, 2, 256, "synbatch", 0.005, 0, 0, True, 312, 2, 2, 20, True,
                  "position", 1),
    "image": (64, 6, 512, "synbatch", 3e-3, 0, 0, True, 30000, 1, 2, 75, True, "position",
              0),
    "pathfinder": (128, 6, 128, "batch", 2e-3, 0, 0, True, 50000, 1, 2, 100, True, "id", 0),
    "pathx": (256, 6, 32, "batch", 0.00075, 0, 0, True, 150000, 1, 1, 200, True, "position",
              1),
}


@pytest.mark.parametrize("task", LRA)
def test_hgrn2_takes_its_authors_run_script(task):
  (batch, layers, width, norm, lr, wd, dropout, prenorm, warmup, glu, expand, epochs, bound,
   encoder, clip) = RUN_LRA[task]
  c = task_config(task).get_config("hgrn2")
  m, a = c.model, c.model.attention
  assert (c.batch_size, m.num_layers, m.emb_dim, c.learning_rate, c.weight_decay) == (
      batch, layers, width, lr, wd)
  assert m.norm == {"synbatch": "batch", "batch": "batch", "layer": "layer"}[norm]
  assert (m.dropout_rate, m.prenorm, m.final_norm, c.warmup_steps) == (dropout, prenorm,
                                                                       prenorm, warmup)
  assert (m.feedforward, m.mlp_dim) == (True, glu * width)  # the GLU's hidden width
  assert (a.variant, a.expand_ratio, a.bidirectional) == ("lra", expand, True)
  assert (m.num_heads, m.qkv_dim) == (width // expand, width)  # K = V = expand_ratio
  assert a.lower_bound == ("learned" if bound else "none")
  assert m.positions == {"position": "sinusoidal", "id": "none"}[encoder]
  assert (c.grad_clip_norm, c.schedule, c.adam_b2, c.adam_eps) == (clip, "cosine", 0.999, 1e-8)
  assert c.num_train_steps == math.ceil(epochs * tasks.FACTS[task].train_size / batch)
  assert (m.pooling, m.use_cls, m.input_dropout) == ("MEAN", False, False)
  assert m.head == ("gelu_mlp" if task == "retrieval" else "linear")


def test_hgrn2_listops_model_has_the_authors_heads_and_lower_bounds():
  """ListOps at full size: 16 heads of K = V = 4 channels, one lower-bound table of 5 layers x
  64 channels, a GLU-wide MLP per block."""
  c = task_config("listops").get_config("hgrn2")
  params = _variables(c.model, "listops")["params"]["encoder"]
  mixer = params["block_0"]["mixer"]
  assert mixer["q_proj"]["kernel"].shape == (64, 16, 4)
  assert mixer["i_proj"]["kernel"].shape == (64, 16, 4)
  assert mixer["o_proj"]["kernel"].shape == (16, 4, 64)
  assert params["hgrn2_lower_bounds"]["logits"].shape == (5, 64)
  assert "block_4" in params and "block_5" not in params


@pytest.mark.parametrize("option", ["", ",cpu"])
def test_mqar_reads_each_recurrence_in_its_lra_direction(option):
  """Every model with a published table takes its table's direction on MQAR (the rows are
  derived: configs/table.py): the family and Mamba, causal by default, read both ways."""
  for name in (*FAMILY, "mamba"):
    assert not registry.default_settings(name)["bidirectional"], name
    assert mqar.get_config(name + option).model.attention.bidirectional, name
  for name in ("s5", "s4d", "mega"):
    assert mqar.get_config(name + option).model.attention.bidirectional, name
  assert not mqar.get_config("lru" + option).model.attention.bidirectional


def test_the_recipes_start_token_embeddings_as_fla_does_on_lra_and_mqar():
  """fla's N(0, 0.02) embedding (configs/published/recurrent.py) with `cpu` too, on a token
  task and on MQAR (configs/table.py); the pixel encoder has none; other models keep 1.0."""
  from lra.configs import image, listops
  assert listops.get_config("gla,cpu").model.embed_init == 0.02
  assert mqar.get_config("retnet,cpu").model.embed_init == 0.02
  assert image.get_config("gla,cpu").model.input_encoder == "linear"
  assert image.get_config("gla,cpu").model.embed_init == 1.0
  assert mqar.get_config("transformer,cpu").model.embed_init == 1.0
