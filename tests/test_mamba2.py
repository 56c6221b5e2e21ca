"""Mamba-2 (Dao & Gu 2024): the layer against an independent implementation written from the
paper's equations (tests/naive.py: the SSM recurrence position by position per head, the
causal conv, the gated group RMS norm), outputs and input gradients, causal and bidirectional,
with trailing padding; the official initialisation; the optimiser group; its defaults and its
own one-line errors. What the family shares (chunked equals recurrent, causality, the state
count) is tests/test_recurrent_family.py's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers.mamba2 import Mamba2
from lra.rules import SettingError
from lra.training import optim
from tests import helpers, naive
from tests.helpers import run_once as _run

# E = 2 x 4 = 8 inner channels, H = 4 heads of P = 2, G = 2 groups of B and C (2 heads each).
WIDTH, LENGTH = 4, 7
SMALL = dict(d_state=3, head_dim=2, groups=2, conv_kernel=3, chunk_size=4)


def _init(mixer, x, mask, seed=1):
  return mixer.init(jax.random.PRNGKey(seed), jnp.asarray(x, jnp.float32), jnp.asarray(mask),
                    deterministic=True)["params"]


def _spread(params, seed):
  """Move dt, A, D and the norm away from their init and scale the projections up, so that
  the recurrence (and every parameter) matters in an output of order 1."""
  rng = np.random.default_rng(seed)
  p = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params)
  heads = p["D"].shape[0]
  dt = rng.uniform(0.2, 1.0, heads)
  p["dt_bias"] = dt + np.log(-np.expm1(-dt))
  p["A_log"] = np.log(rng.uniform(0.3, 2.0, heads))
  p["D"] = rng.normal(size=heads)
  p["norm"] = rng.uniform(0.5, 1.5, p["norm"].shape)
  p["in_proj"]["kernel"] = 2 * p["in_proj"]["kernel"]
  p["conv"]["bias"] = 0.5 * rng.normal(size=p["conv"]["bias"].shape)
  return p


def _f32(p):
  return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), p)


# Both passes by default (the forward one among them); one pass alone `-m slow`.
@pytest.mark.parametrize("bidirectional", [pytest.param(False, marks=pytest.mark.slow), True])
def test_layer_matches_the_reference_outputs_and_input_gradients(bidirectional):
  """Rows with trailing padding equal the reference on their real tokens alone, and so do
  the gradients of <real outputs, cotangent> with respect to the input."""
  rng = np.random.default_rng(2)
  x = rng.normal(size=(3, LENGTH, WIDTH))
  mask = helpers.trailing_mask([LENGTH, 4, 1], LENGTH)
  cotangent = rng.normal(size=x.shape) * mask[..., None]
  mixer = Mamba2(bidirectional=bidirectional, **SMALL)
  p = _spread(_run(lambda: _init(mixer, x[:1], mask[:1])), seed=3)

  def program(p, x):
    loss = lambda x: jnp.sum(mixer.apply({"params": p}, x, jnp.asarray(mask),
                                         deterministic=True) * cotangent)
    out = mixer.apply({"params": p}, x, jnp.asarray(mask), deterministic=True)
    ref_grads = [jax.grad(lambda r: jnp.sum(naive.mamba2_row(p, r, SMALL, bidirectional, jnp)
                                            * cotangent[row, :real]))(x[row, :real])
                 for row, real in enumerate(mask.sum(1))]
    return out, jax.grad(loss)(x), ref_grads

  got, grads, ref_grads = _run(program, _f32(p), jnp.asarray(x, jnp.float32))
  for row, real in enumerate(mask.sum(1)):
    expected = naive.mamba2_row(p, x[row, :real], SMALL, bidirectional)
    np.testing.assert_allclose(got[row, :real], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[row, :real], ref_grads[row], rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(got[0])).max() > 0.1 and np.abs(np.asarray(grads[0])).max() > 0.1
  # The recurrence matters: without it (D skip only) the output is another.
  p0 = dict(p, dt_bias=np.full_like(p["dt_bias"], -30.0))
  without = naive.mamba2_row(p0, x[0], SMALL, bidirectional)
  assert np.abs(without - np.asarray(got[0])).max() > 0.05


def test_official_initialisation():
  width, num_layers = 64, 4
  mixer = Mamba2(d_state=16, head_dim=8, num_layers=num_layers)  # E = 128, H = 16
  x, mask = jnp.zeros((1, 3, width)), jnp.ones((1, 3), bool)
  p = _run(lambda: _init(mixer, x, mask, seed=0))
  inner, heads, n = 128, 16, 16
  assert sorted(p) == ["A_log", "D", "conv", "dt_bias", "in_proj", "norm", "out_proj"]
  assert p["in_proj"]["kernel"].shape == (width, 2 * inner + 2 * n + heads)
  assert p["conv"]["weight"].shape == (4, inner + 2 * n) and p["conv"]["bias"].shape == (
      inner + 2 * n,)
  a = np.exp(np.float64(p["A_log"]))  # uniform in [1, 16]
  assert a.shape == (heads,) and np.all((a >= 1) & (a <= 16)) and np.ptp(a) > 5
  dt = np.log1p(np.exp(np.float64(p["dt_bias"])))  # log-uniform in [0.001, 0.1]
  assert np.all((dt > 0.001 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  np.testing.assert_array_equal(p["D"], 1.0)
  np.testing.assert_array_equal(p["norm"], 1.0)
  for kernel, fan_in in ((p["in_proj"]["kernel"], width), (p["conv"]["weight"], 4),
                         (p["conv"]["bias"], 4)):  # PyTorch's defaults, +-1/sqrt(fan_in)
    bound = fan_in ** -0.5
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound
  out = np.asarray(p["out_proj"]["kernel"])  # / sqrt(num_layers): _init_weights
  assert np.abs(out).max() <= inner ** -0.5 / 2 and abs(np.var(out) * 3 * inner * 4 - 1) < 0.1
  assert mixer.head_sizes(width) == (heads, n, 8)


def test_optimizer_group_takes_a_log_d_and_dt_bias():
  model = models.build(helpers.tiny_model("mamba2"), vocab_size=10, num_classes=2, max_len=6,
                       pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, Mamba2.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  assert len(group) == 6 and all("['mixer']" in k for k in group)  # 2 layers x 3
  assert {k.rsplit("'", 2)[-2] for k in group} == {"A_log", "D", "dt_bias"}


def test_defaults_and_errors():
  """The official defaults (the core's chunk size); dt_min above dt_max, a head_dim that does
  not divide E and groups that do not divide the heads are one line each (the settings' own
  rules: tests/test_models.py)."""
  assert registry.default_settings("mamba2") == dict(
      form="chunked", chunk_size=64, bidirectional=False, combine="mean", d_state=128,
      head_dim=64, expand=2, conv_kernel=4, groups=1, dt_min=0.001, dt_max=0.1,
      allow_neg_eigval=False)
  with pytest.raises(SettingError, match="<= config.model.attention.dt_max"):
    Mamba2(dt_min=0.1, dt_max=0.01)
  x, mask = jnp.zeros((1, 3, 6)), jnp.ones((1, 3), bool)  # E = 12
  for bad, match in ((dict(head_dim=8), r"head_dim=8 is not valid: a divisor of the inner "
                      r"width expand x width = 12"),
                     (dict(head_dim=4, groups=2), r"groups=2 is not valid: a divisor of the "
                      r"number of heads expand x width / head_dim = 3")):
    with pytest.raises(SettingError, match=match) as error:
      Mamba2(**bad).init(jax.random.PRNGKey(0), x, mask, deterministic=True)  # before any op
    # One line (JAX may append its own note on the frames it filtered, after a newline).
    assert str(error.value).splitlines()[0].startswith("config.model.attention.")


def test_head_dim_zero_takes_the_widest_heads_up_to_64():
  """head_dim 0 (the LRA tables'): any width splits, into heads as wide as 64 allows."""
  mixer = Mamba2(head_dim=0)
  assert mixer.check_width(128) == (256, 4)  # the official 64-wide heads
  assert mixer.check_width(42) == (84, 2)  # 42-wide heads (64 divides no 84)
  assert mixer.check_width(116) == (232, 4)  # 58-wide
