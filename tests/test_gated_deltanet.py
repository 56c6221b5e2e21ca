"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025): the layer against an independent reference
written from the paper's equations (tests/naive.py: projections, short causal convs, l2 norms,
the decay -exp(A_log) softplus(a_proj(x) + dt_bias), a step loop of
S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, gated RMS norm, o_proj),
outputs and the gradients of the parameters and the input, causal and bidirectional (the two
directions' average), on rows with trailing padding; the core's chunked (UT) form against its
recurrent one and the loop under strong and mixed decays with beta near 1; the
initialisation, the optimiser group, its defaults and its own errors. What the family shares
is tests/test_recurrent_family.py's."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers.gated_deltanet import GatedDeltaNet
from lra.models.ops.matrix_recurrence import recurrence
from lra.rules import SettingError
from lra.training import optim
from lra.testing import cheap_compiles
from tests import helpers, naive
from tests.helpers import run_once

WIDTH, HEADS = 8, 2
K = WIDTH // HEADS


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


def _params(mixer, x, mask, seed=3):
  """The mixer's initial parameters, perturbed, with decays that matter: alpha between about
  0.05 and 0.9 (A from 0.3 to 3, dt_bias -0.5 and 0.5)."""
  variables = mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask), deterministic=True)
  variables = helpers.perturb(variables, seed=seed, scale=0.2)
  p = variables["params"]
  p["A_log"] = jnp.log(jnp.linspace(0.3, 3.0, HEADS))
  p["dt_bias"] = jnp.linspace(-0.5, 0.5, HEADS)
  return variables


# The second (both passes, beta to 2, V = K, another kernel) runs the default's code and more;
# the default's own settings and no gate `-m slow`.
SETTINGS = [pytest.param(dict(), marks=pytest.mark.slow),
            dict(bidirectional=True, allow_neg_eigval=True, expand_v=1, conv_kernel=2),
            pytest.param(dict(use_gate=False), marks=pytest.mark.slow)]


@pytest.mark.parametrize("settings", SETTINGS)
def test_layer_matches_the_reference(settings):
  """Outputs and the gradients of every parameter and of the input, rows with trailing
  padding (LRA's), chunks of 3 over 7 positions."""
  rng = np.random.default_rng(0)
  length = 7
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([length, 4, 1], length)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = GatedDeltaNet(num_heads=HEADS, chunk_size=3, **settings)
  reference = lambda v, x: naive.delta_net(v["params"], x, mask, HEADS, gated=True, **{
      "use_gate": True, **{k: v for k, v in settings.items()
                           if k not in ("conv_kernel", "expand_v")}})
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _params(mixer, x, mask), reference, x, mask, cotangent)
  np.testing.assert_allclose(out, np.where(mask[..., None], ref, 0.0), rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(r).max()))
  x_grad = np.asarray(grads[1])
  assert np.abs(x_grad[mask]).max() > 1e-2 and not np.any(x_grad[~mask])
  assert np.abs(np.asarray(grads[0]["params"]["A_log"])).max() > 1e-3  # the decay counts


# --- the chunked (UT) form against the recurrent one ---

DECAYS = {"strong": (-30.0, -5.0), "weak": (-1e-4, 0.0), "mixed": (-40.0, 0.0)}


@pytest.mark.parametrize("decay", list(DECAYS))
def test_chunked_gated_delta_rule_equals_the_recurrent_one_and_the_loop(decay):
  """The core's UT form with a scalar decay (chunks of 4 over 13 positions, a hole and
  trailing padding), beta near 1, equals its recurrent form and the matrix loop: outputs and
  the gradients of q, k, v, beta and the log decay."""
  rng = np.random.default_rng(1)
  batch, length, key, value = 2, 13, 3, 4
  q = rng.normal(size=(batch, length, HEADS, key))
  k = rng.normal(size=(batch, length, HEADS, key))
  k /= np.linalg.norm(k, axis=-1, keepdims=True)
  v = rng.normal(size=(batch, length, HEADS, value))
  beta = rng.uniform(0.999, 1.0, size=(batch, length, HEADS))
  log_decay = rng.uniform(*DECAYS[decay], size=(batch, length, HEADS))
  args = [jnp.asarray(a, jnp.float32) for a in (q, k, v, beta, log_decay)]
  mask = np.ones((batch, length), bool)
  mask[1, 9:] = False
  mask[1, 5] = False
  cotangent = jnp.asarray(rng.normal(size=v.shape), jnp.float32)

  def everything(*args):
    forms = [functools.partial(recurrence, form="recurrent"),
             functools.partial(recurrence, form="chunked", chunk_size=4)]
    fns = [lambda q, k, v, b, g, f=f: f(q, k, v, jnp.asarray(mask), beta=b, log_decay=g)[0]
           for f in forms]
    fns.append(lambda q, k, v, b, g: naive.delta_loop(q, k, v, b, mask, alpha=jnp.exp(g)))
    return [jax.value_and_grad(lambda *a, f=f: jnp.sum(f(*a) * cotangent), range(5))(*args)
            for f in fns] + [fns[1](*args), fns[2](*args)]

  *results, chunked, looped = run_once(everything, *args)
  np.testing.assert_allclose(chunked, looped, rtol=1e-4, atol=1e-4)
  (_, expected), (_, got), (_, loop) = results
  for g, e, l in zip(got, expected, loop):
    assert np.all(np.isfinite(g))
    scale = max(1.0, np.abs(e).max())
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(e, l, rtol=1e-3, atol=1e-4 * scale)


# --- initialisation, optimiser, settings ---

def test_initialisation_and_optimizer_group():
  """fla's layer: A uniform in (0, 16), dt = softplus(dt_bias) log-uniform in [1e-3, 0.1];
  A_log and dt_bias (and nothing else) trained apart, without weight decay."""
  heads = 512
  mixer = GatedDeltaNet(num_heads=heads)
  p = run_once(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, heads)),
                                  jnp.ones((1, 2), bool), deterministic=True)["params"])
  A = np.exp(np.float64(p["A_log"]))
  assert A.shape == (heads,) and np.all((A > 0) & (A <= 16 * (1 + 1e-6)))
  np.testing.assert_allclose(np.quantile(A, [0.25, 0.5, 0.75]), [4, 8, 12], atol=1.2)
  dt = np.log1p(np.exp(np.float64(p["dt_bias"])))
  assert np.all((dt > 1e-3 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  np.testing.assert_allclose(np.median(np.log10(dt)), -2, atol=0.2)
  model = models.build(helpers.tiny_model("gated_deltanet"), vocab_size=10, num_classes=2,
                       max_len=6, pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, GatedDeltaNet.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  assert len(group) == 4 and {k.rsplit("'", 2)[-2] for k in group} == {"A_log", "dt_bias"}


def test_defaults_head_sizes_and_errors():
  """fla's defaults; V = expand_v K; no use_beta setting (beta always). The settings' own
  rules: tests/test_models.py; the heads' division, DeltaNet's: tests/test_deltanet.py."""
  assert registry.default_settings("gated_deltanet") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=False, use_gate=True, expand_v=2)
  assert GatedDeltaNet(num_heads=2).head_sizes(8) == (2, 4, 8)
  assert GatedDeltaNet(num_heads=4, expand_v=1).head_sizes(8) == (4, 2, 2)
  with pytest.raises(SettingError, match="use_beta"):
    registry.make("gated_deltanet", dict(use_beta=False))
