"""mLSTM (xLSTM, Beck et al. 2024): the layer against a reference written from the paper's
stabilised recurrence, position by position (tests/naive.py: m_t = max(log f_t + m_{t-1}, i_t),
C, n and the normalised read), outputs and gradients of parameters and input, causal and
bidirectional; huge input gates (pre-activation 50) stay finite and exact; the gradient follows
the stabiliser as xLSTM's; xLSTM's initialisation; its defaults and its own errors. What the
family shares is tests/test_recurrent_family.py's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.mlstm import MLSTM
from lra.rules import SettingError
from lra.testing import finite
from tests import helpers, naive
from tests.helpers import run_once as _run

WIDTH, HEADS, LENGTH = 4, 2, 7  # E = 8 inner channels, K = 4 per head, blocks of 2


def _inputs(seed, length=LENGTH):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = jnp.asarray(helpers.trailing_mask([length, 4, 1], length))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  return x, mask, cotangent


def _mixer(**settings):
  return MLSTM(**dict(dict(num_heads=HEADS, qkv_blocksize=2, chunk_size=3), **settings))


def _check_against_reference(mixer, seed, igate_bias=None, bidirectional=False):
  x, mask, cotangent = _inputs(seed)

  def make(x):
    p = helpers.perturb(mixer.init(jax.random.PRNGKey(seed), x, mask,
                                   deterministic=True)["params"], seed)
    if igate_bias is not None:  # pre-activations near igate_bias
      p["igate_bias"] = jnp.asarray(igate_bias, jnp.float32)
    return {"params": p}

  ref = lambda v, x: naive.mlstm(v["params"], x, mask, HEADS, bidirectional)
  (out, expected), (grads, expected_grads) = helpers.mixer_against_reference(
      mixer, make, ref, x, mask, cotangent * mask[..., None])
  assert finite(expected) and finite(expected_grads)
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(expected)).max() > 0.01
  # atol on the gradients' scale: with huge gates some cancel to float32 noise of it
  wants = jax.tree_util.tree_leaves(expected_grads)
  scale = max(float(np.abs(np.asarray(w)).max()) for w in wants)
  for got, want in zip(jax.tree_util.tree_leaves(grads), wants):
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5 * max(scale, 1.0))
  assert np.abs(np.asarray(expected_grads[1])).max() > 1e-3  # input gradients that matter


# Huge gates, both passes, chunked by default; the causal recurrent form `-m slow` (the family's
# chunked == recurrent test compares the two forms).
@pytest.mark.parametrize("bidirectional, form, igate_bias", [
    pytest.param(False, "recurrent", None, marks=pytest.mark.slow),
    (True, "chunked", [50.0, -50.0])], ids=["causal", "huge_gates"])
def test_layer_matches_the_stabilised_recurrence(bidirectional, form, igate_bias):
  """Outputs and gradients (parameters and input) equal the reference's, on rows with trailing
  padding. Bidirectional: the two directions' normalised outputs averaged. huge_gates: igate
  pre-activations near +50 in one head and -50 in the other (exp(50) overflows after a few
  sums in float32 unless stabilised): still finite, and still the reference's."""
  _check_against_reference(_mixer(bidirectional=bidirectional, form=form), seed=1,
                           igate_bias=igate_bias, bidirectional=bidirectional)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_the_gradient_follows_the_stabiliser_as_xlstms_does(form):
  """Input gates near 14 and queries of size 1e-6 make xLSTM's eps and exp(-m) terms of the
  denominator (all three near 1e-6, in units of exp(-m)): its gradient then reaches the gates
  through m too, as xLSTM differentiates its max_log_D. The core's cell (matrix_recurrence +
  mlstm.normalised) has the paper's stabilised recurrence's gradient with respect to the input
  and forget gates (with m held constant, the input gates' gradient differs by about 1)."""
  from lra.models.mixers.mlstm import normalised
  from lra.models.ops.matrix_recurrence import recurrence
  rng = np.random.default_rng(5)
  shape = (2, LENGTH, HEADS)
  q, k, v = (jnp.asarray(rng.normal(size=shape + (4,)), jnp.float32) for _ in range(3))
  q = q * 1e-6
  i = jnp.asarray(14 + rng.normal(size=shape), jnp.float32)
  f = jnp.asarray(rng.normal(size=shape) + 2, jnp.float32)
  mask = helpers.trailing_mask([LENGTH, 5], LENGTH)
  cot = jnp.asarray(rng.normal(size=shape + (4,)), jnp.float32)
  ones = jnp.ones(shape + (1,), jnp.float32)

  def core(i, f):
    o, m = recurrence(q, k / 2.0, jnp.concatenate([v, ones], -1), mask, form=form,
                      chunk_size=3, log_decay=jax.nn.log_sigmoid(f), log_write=i)
    return jnp.sum(normalised(o, m) * cot)

  paper = lambda i, f: jnp.sum(naive.mlstm_cell(q, k, v, i, f, mask) * cot)
  got, want = _run(lambda: (jax.grad(core, (0, 1))(i, f), jax.grad(paper, (0, 1))(i, f)))
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-5)
  assert float(jnp.abs(want[0]).max()) > 0.05  # the gates' gradient matters here


def test_xlstm_initialisation():
  width, heads = 32, 4
  x, mask = jnp.zeros((1, 3, width)), jnp.ones((1, 3), bool)
  p = _run(lambda: MLSTM(num_heads=heads, num_layers=3).init(
      jax.random.PRNGKey(0), x, mask, deterministic=True)["params"])
  inner = 2 * width
  np.testing.assert_allclose(p["fgate_bias"], np.linspace(3.0, 6.0, heads), rtol=1e-6)
  for name in ("igate_kernel", "fgate_kernel"):
    assert p[name].shape == (3, inner, heads) and np.all(np.asarray(p[name]) == 0)
  assert np.all(np.abs(np.asarray(p["igate_bias"])) < 0.5)
  np.testing.assert_array_equal(p["learnable_skip"], 1.0)
  np.testing.assert_array_equal(p["outnorm"], 1.0)
  assert p["q_proj"]["kernel"].shape == (inner // 4, 4, 4)
  std = lambda a: float(np.std(np.asarray(a)))
  assert abs(std(p["proj_up"]["kernel"]) / np.sqrt(2 / (5 * width)) - 1) < 0.1
  assert abs(std(p["proj_down"]["kernel"]) / (2 / 3 / np.sqrt(width)) - 1) < 0.1
  assert np.abs(np.asarray(p["conv"]["weight"])).max() <= 0.5  # 1 / sqrt(kernel 4)


def test_defaults_state_size_and_errors():
  """xLSTM's defaults; the state: C (K x K), n (K) and m per head and direction; a width whose
  inner channels the heads or qkv_blocksize do not divide is one line (the settings' own rules:
  tests/test_models.py)."""
  assert registry.default_settings("mlstm") == dict(
      proj_factor=2, conv_kernel=4, qkv_blocksize=4, allow_neg_eigval=False, form="chunked",
      chunk_size=64, bidirectional=False, combine="mean")
  key = 2 * WIDTH // HEADS
  assert _mixer().carried_state(WIDTH, 64) == HEADS * (key * key + key + 1)
  assert _mixer(bidirectional=True).carried_state(WIDTH, 64) == 2 * HEADS * (key * key + key + 1)
  x, mask, _ = _inputs(0)
  for bad, match in ((dict(qkv_blocksize=3), "qkv_blocksize=3 .* divisor of .* 8"),
                     (dict(num_heads=3), "num_heads=3 .* divisor of .* 8")):
    with pytest.raises(SettingError, match=match):
      _mixer(**bad).init(jax.random.PRNGKey(0), x, mask, deterministic=True)
