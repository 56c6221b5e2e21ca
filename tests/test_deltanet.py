"""DeltaNet (Schlag et al. 2021; Yang et al. 2024): the layer against an independent reference
written from the paper's equations (tests/naive.py: projections, short causal convs, l2 norms,
a step loop of S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, RMS norm, o_proj),
outputs and the gradients of the parameters and the input, causal and bidirectional (the two
directions' average), on rows with trailing padding; the core's chunked (UT) form against its
recurrent one and the loop with beta near 0, 1 and 2 and repeated keys; its defaults and its
own errors. What the family shares (the layer's chunked form equal to its recurrent one, the
heads, the state count) is tests/test_recurrent_family.py's."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.deltanet import DeltaNet
from lra.models.ops.matrix_recurrence import recurrence
from lra.rules import SettingError
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
  """The mixer's initial parameters, perturbed (norm weights not all 1)."""
  variables = mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask), deterministic=True)
  return helpers.perturb(variables, seed=seed, scale=0.2)


# The second (both passes, the gate, beta to 2, another kernel) runs the default's code and more;
# the default's own settings and no beta `-m slow`.
SETTINGS = [pytest.param(dict(), marks=pytest.mark.slow),
            dict(bidirectional=True, use_gate=True, allow_neg_eigval=True, conv_kernel=2),
            pytest.param(dict(use_beta=False), marks=pytest.mark.slow)]


@pytest.mark.parametrize("settings", SETTINGS)
def test_layer_matches_the_reference(settings):
  """Outputs and the gradients of every parameter and of the input, rows with trailing
  padding (LRA's), chunks of 3 over 7 positions."""
  rng = np.random.default_rng(0)
  length = 7
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([length, 4, 1], length)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = DeltaNet(num_heads=HEADS, chunk_size=3, **settings)
  reference = lambda v, x: naive.delta_net(v["params"], x, mask, HEADS, **{
      k: v for k, v in settings.items() if k != "conv_kernel"})
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _params(mixer, x, mask), reference, x, mask, cotangent)
  real = mask[..., None]
  np.testing.assert_allclose(out, np.where(real, ref, 0.0), rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(r).max()))
  x_grad = np.asarray(grads[1])
  assert np.abs(x_grad[mask]).max() > 1e-2 and not np.any(x_grad[~mask])


# --- the chunked (UT) form against the recurrent one ---

def _extreme_gates(rng, batch, length, heads, key, value, case):
  """q, k (unit), v, beta of a case that stresses the UT form's triangular solve."""
  q, v = rng.normal(size=(batch, length, heads, key)), rng.normal(size=(batch, length, heads,
                                                                         value))
  k = rng.normal(size=(batch, length, heads, key))
  if case == "repeated_keys":  # the same key over and over: exact overwrites
    k[:, 1::2] = k[:, :-1:2]
  k /= np.linalg.norm(k, axis=-1, keepdims=True)
  low, high = {"near_one": (1 - 1e-4, 1.0), "near_zero": (0.0, 1e-4),
               "repeated_keys": (0.999, 1.0), "near_two": (1.999, 2.0),
               "mixed": (0.0, 2.0)}[case]
  beta = rng.uniform(low, high, size=(batch, length, heads))
  return [jnp.asarray(a, jnp.float32) for a in (q, k, v, beta)]


@pytest.mark.parametrize("case", ["near_one", "near_zero", "repeated_keys", "near_two",
                                  "mixed"])
def test_chunked_delta_rule_equals_the_recurrent_one_and_the_loop(case):
  """The core's UT form (chunks of 4 over 13 positions, a hole and trailing padding) equals
  its recurrent form and the matrix loop: outputs and the gradients of q, k, v and beta."""
  rng = np.random.default_rng(1)
  batch, length = 2, 13
  q, k, v, beta = _extreme_gates(rng, batch, length, HEADS, 3, 4, case)
  mask = np.ones((batch, length), bool)
  mask[1, 9:] = False
  mask[1, 5] = False
  cotangent = jnp.asarray(rng.normal(size=v.shape), jnp.float32)

  def everything(q, k, v, beta):
    forms = [functools.partial(recurrence, form="recurrent"),
             functools.partial(recurrence, form="chunked", chunk_size=4)]
    fns = [lambda *a, f=f: f(*a[:3], jnp.asarray(mask), beta=a[3])[0] for f in forms]
    fns.append(lambda *a: naive.delta_loop(*a, mask))
    return [jax.value_and_grad(lambda *a, f=f: jnp.sum(f(*a) * cotangent), (0, 1, 2, 3))(
        q, k, v, beta) for f in fns] + [fns[1](q, k, v, beta), fns[2](q, k, v, beta)]

  *results, chunked, looped = run_once(everything, q, k, v, beta)
  np.testing.assert_allclose(chunked, looped, rtol=1e-4, atol=1e-4)
  (_, expected), (_, got), (_, loop) = results
  for g, e, l in zip(got, expected, loop):
    scale = max(1.0, np.abs(e).max())
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(e, l, rtol=1e-3, atol=1e-4 * scale)


# --- settings ---

def test_defaults_head_sizes_and_errors():
  """fla's defaults; K = V = width / heads, a width the heads do not divide is one line; no
  head_dim setting (the heads are the encoder's). The settings' own rules:
  tests/test_models.py."""
  assert registry.default_settings("deltanet") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=False, use_gate=False, use_beta=True)
  assert DeltaNet(num_heads=2).head_sizes(8) == (2, 4, 4)
  with pytest.raises(SettingError, match="num_heads=3 .* a divisor of the model width 8"):
    DeltaNet(num_heads=3).head_sizes(8)
  with pytest.raises(SettingError, match="head_dim"):
    registry.make("deltanet", dict(head_dim=4))
