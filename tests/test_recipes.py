"""The published configs train as their authors' code does: for every family and task, each
parameter's optimizer group and the encoder switches around the layer (final norm, input
encoder, head, BatchNorm momentum). The expectations are written here from the authors'
scripts, independently of configs/published/."""
import jax
import jax.numpy as jnp
import pytest

from lra import models
from lra.configs import task_config
from lra.data import tasks
from lra.training import optim

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
IMAGE_TASKS = ("image", "pathfinder", "pathx")
# Our group of each of the authors' optimizer entries.
SSM, SSM_DECAY, NO_DECAY, OTHER = optim.SSM, optim.SSM_DECAY, optim.NO_DECAY, optim.OTHER


def _labels(config, task):
  """{leaf name: group} of the full-size published model (shapes only), each name once."""
  facts = tasks.FACTS[task]
  net = models.build(config.model.to_dict(), vocab_size=facts.vocab_size,
                     num_classes=facts.num_classes, max_len=16, pair=facts.pair)
  tokens = jnp.ones((1, 16), jnp.int32)
  variables = jax.eval_shape(net.init, jax.random.PRNGKey(0),
                             *((tokens, tokens) if facts.pair else (tokens,)))
  labels = optim.param_labels(variables["params"], optim.groups(config),
                              optim.explicit_names(config))
  found = {}
  for path, label in jax.tree_util.tree_flatten_with_path(labels)[0]:
    name = path[-1].key
    assert found.setdefault(name, label) == label, f"{name} is in two groups"
  return found


def _assert_pixel_encoder(model, task, pixels):
  """The linear pixel encoder with the authors' (mean, std) on the image tasks, else the table."""
  if task in IMAGE_TASKS:
    assert (model.input_encoder, model.input_mean, model.input_std) == ("linear", *pixels[task])
  else:
    assert model.input_encoder == "embedding"


# --- S5: lindermanlab/S5 bin/run_experiments/run_lra_*.sh and s5/train_helpers.py -----------

S5_RUNS = {"listops": ("BfastandCdecay", False), "text": ("standard", True),
           "retrieval": ("standard", True), "image": ("BfastandCdecay", False),
           "pathfinder": ("standard", False), "pathx": ("BandCdecay", False)}


def s5_official_group(name: str, opt_config: str, dt_global: bool) -> str:
  """create_train_state's map_nested_fn for one leaf (their log_step is our log_dt), as ours:
  "ssm" (Adam at ssm_lr) -> SSM, "none" under BandCdecay (AdamW at ssm_lr) -> SSM_DECAY,
  "regular" (AdamW at lr) -> OTHER."""
  name = {"log_dt": "log_step"}.get(name, name)
  ssm = ["Lambda_re", "Lambda_im"] + ([] if dt_global else ["log_step"])
  if opt_config == "standard":
    ssm.append("B")
  if name in ssm:
    return SSM
  if opt_config == "BandCdecay" and name == "B":
    return SSM_DECAY
  return OTHER


@pytest.mark.parametrize("task", TASKS)
def test_s5_groups_and_switches_are_the_official_ones(task):
  c = task_config(task).get_config("s5")
  opt_config, dt_global = S5_RUNS[task]
  labels = _labels(c, task)
  assert {"Lambda_re", "B", "log_dt", "C", "D"} <= set(labels)
  for name, label in labels.items():
    assert label == s5_official_group(name, opt_config, dt_global), name
  m = c.model
  assert (m.final_norm, m.input_dropout, m.norm, m.prenorm) == (False, False, "batch", True)
  assert m.head == ("gelu_mlp" if task == "retrieval" else "linear")
  assert m.mlp_dim == m.emb_dim  # the retrieval decoder's hidden width is H
  assert m.batch_norm_momentum == (0.9 if task in ("pathfinder", "pathx") else 0.95)
  # Normalize(122.6/255, 61/255) and Normalize(0.5, 0.5) of p/255.
  _assert_pixel_encoder(m, task, {"image": (122.6, 61.0), "pathfinder": (127.5, 127.5),
                                  "pathx": (127.5, 127.5)})


# --- S4D: state-spaces/s4 configs (lr dicts, `register`, add_optimizer_hooks) --------------

@pytest.mark.parametrize("task", TASKS)
def test_s4d_groups_and_switches_are_the_official_ones(task):
  c = task_config(task).get_config("s4d")
  labels = _labels(c, task)
  one_rate = task in ("pathfinder", "pathx")  # `lr: 0.001`: dt, A and B alike
  expected = {"log_A_re": SSM, "A_im": SSM, "B": SSM, "log_dt": SSM if one_rate else NO_DECAY,
              "C": OTHER, "D": OTHER, "kernel": OTHER, "bias": NO_DECAY, "scale": NO_DECAY,
              "embedding": OTHER}  # S4 hooks the backbone only: its embedding decays
  assert labels == {name: expected[name] for name in labels}
  assert set(expected) - set(labels) <= {"embedding"}  # pixels have no table
  m = c.model
  assert m.final_norm and not m.input_dropout and m.batch_norm_momentum == 0.9
  assert m.head == ("gelu_mlp" if task == "retrieval" else "linear")
  # Image normalised, the path tasks in [0, 1] (center=False).
  _assert_pixel_encoder(m, task, {"image": (122.6, 61.0), "pathfinder": (0.0, 255.0),
                                  "pathx": (0.0, 255.0)})


# --- LRU (minimal-LRU), Mamba (mamba_ssm / Vim), Mega (fairseq) ----------------------------

@pytest.mark.parametrize("task", TASKS)
def test_lru_groups_and_switches_follow_minimal_lru(task):
  c = task_config(task).get_config("lru")
  labels = _labels(c, task)
  ssm = {"nu_log", "theta_log", "gamma_log", "B"}  # minimal-LRU's "ssm" (B_re, B_im: our B)
  assert labels == {name: SSM if name in ssm else OTHER for name in labels}
  assert ssm <= set(labels)
  m = c.model
  assert (m.final_norm, m.input_dropout) == (False, False)
  assert m.head == ("gelu_mlp" if task == "retrieval" else "linear")
  assert m.input_encoder == ("linear" if task in IMAGE_TASKS else "embedding")


@pytest.mark.parametrize("task", TASKS)
def test_mamba_groups_and_switches_follow_its_peers(task):
  c = task_config(task).get_config("mamba")
  labels = _labels(c, task)
  no_decay = {"A_log", "D", "dt_bias"}  # _no_weight_decay (Mamba-2: dt_bias too)
  assert labels == {name: SSM if name in no_decay else OTHER for name in labels}
  assert c.ssm_learning_rate == c.learning_rate  # at the global rate
  m = c.model
  assert m.final_norm and not m.input_dropout  # norm_f; no embedding dropout
  assert m.head == ("gelu_mlp" if task == "retrieval" else "linear")
  assert m.input_encoder == ("linear" if task in IMAGE_TASKS else "embedding")


@pytest.mark.parametrize("task", TASKS)
def test_mega_trains_every_parameter_alike_with_its_head_and_encoder(task):
  c = task_config(task).get_config("mega")
  assert set(_labels(c, task).values()) == {OTHER}  # one flat Adam parameter list
  m = c.model
  assert m.head == "gelu_mlp" and m.mlp_dim == 2 * m.emb_dim  # Linear(d, 2d)-GELU-Linear
  assert m.input_dropout  # dropout on the embedded input, as fairseq applies it
  # RealNumberEmbedding of (p/255 - mean) / std.
  _assert_pixel_encoder(m, task, {"image": (0.48 * 255, 0.24 * 255),
                                  "pathfinder": (127.5, 127.5), "pathx": (127.5, 127.5)})
  if task in IMAGE_TASKS:
    assert m.prenorm and m.final_norm  # --encoder-normalize-before: final BatchNorm
  else:
    assert not m.prenorm  # post-norm: no final norm


@pytest.mark.parametrize("name", ("s5", "s4d", "lru", "mamba", "mega"))
def test_the_cpu_option_keeps_the_recipe(name):
  """The small CPU run of a published model uses its authors' groups and switches too."""
  for task in ("listops", "pathfinder"):
    full, small = (task_config(task).get_config(f"{name}{o}") for o in ("", ",cpu"))
    for key in ("ssm_params", "ssm_decay_params", "no_decay_params"):
      assert small[key] == full[key], key
    for key in ("final_norm", "input_encoder", "input_mean", "input_std", "head",
                "input_dropout", "batch_norm_momentum"):
      assert small.model[key] == full.model[key], key
    _labels(small, task)  # every named group finds its parameters at the small size too


def test_the_lra_2020_configs_keep_lra_s_encoder_and_head():
  for task in TASKS:
    m = task_config(task).get_config("transformer").model
    assert (m.final_norm, m.input_encoder, m.head, m.input_dropout) == (
        True, "embedding", "mlp", True), task


def test_the_lra_2020_transformer_takes_the_original_full_configs_dropout_and_positions():
  """base_cifar10_config.py and pathfinder32/transformer_base.py of the original repository;
  the `cpu` option keeps the small run's defaults."""
  image = task_config("image").get_config("transformer").model
  assert (image.dropout_rate, image.attention_dropout_rate, image.positions) == (
      0.3, 0.2, "learned")
  assert task_config("pathfinder").get_config("transformer").model.dropout_rate == 0.2
  small = task_config("image").get_config("transformer,cpu").model
  assert (small.dropout_rate, small.positions) == (0.1, "sinusoidal")
  assert task_config("image").get_config("performer").model.dropout_rate == 0.1
