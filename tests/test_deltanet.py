"""DeltaNet (Schlag et al. 2021; Yang et al. 2024): the layer against an independent reference
written from the paper's equations (projections, short causal convs, l2 norms, a step loop of
S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, RMS norm, o_proj), outputs and the
gradients of the parameters and the input, causal and bidirectional (the two directions'
average), on rows with trailing padding; the chunked (UT) form against the recurrent one with
beta near 0, 1 and 2 and repeated keys, in the core and in the layer; the settings."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.deltanet import DeltaNet
from lra.models.matrix_recurrence import recurrence
from lra.rules import SettingError
from lra.testing import cheap_compiles
from tests import helpers
from tests.helpers import run_once

WIDTH, HEADS = 8, 2
K = WIDTH // HEADS


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


# --- the reference, from the paper's equations ---

def _silu(x):
  return x / (1.0 + jnp.exp(-x))


def _causal_conv(x_BxLxC, w_KxC):
  """y_t = sum_j w_j x_{t-(K-1)+j}: the current and the K - 1 previous positions (zeros
  before the start)."""
  kernel, length = w_KxC.shape[0], x_BxLxC.shape[1]
  padded = jnp.concatenate([jnp.zeros((x_BxLxC.shape[0], kernel - 1, x_BxLxC.shape[2])),
                            x_BxLxC], axis=1)
  return sum(w_KxC[j][None, None, :] * padded[:, j:j + length] for j in range(kernel))


def _delta_loop(q, k, v, beta, mask, *, alpha=None, reverse=False):
  """o_t = S_t^T q_t with S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,
  the matrix form position by position (a scan over t); a padded position leaves S and
  outputs 0."""
  alpha = jnp.ones(beta.shape) if alpha is None else alpha
  return _matrix_loop(q, k, v, beta, alpha, mask, reverse)


def _matrix_loop(q, k, v, beta, alpha, mask, reverse):
  batch, _, heads, key = q.shape
  eye = jnp.eye(key)[None, None]

  def step(S, xs):
    q_t, k_t, v_t, b_t, a_t, real = xs  # B x H x K, .., B x H, B
    k_t, b_t = k_t[..., :, None], b_t[..., None, None]  # B x H x K x 1
    transition = a_t[..., None, None] * (eye - b_t * (k_t @ jnp.swapaxes(k_t, -1, -2)))
    written = transition @ S + b_t * (k_t @ v_t[..., None, :])
    S = jnp.where(real[:, None, None, None], written, S)
    o_t = (jnp.swapaxes(S, -1, -2) @ q_t[..., None])[..., 0]
    return S, jnp.where(real[:, None, None], o_t, 0.0)

  xs = [jnp.moveaxis(jnp.asarray(a), 1, 0) for a in (q, k, v, beta, alpha, mask)]
  S = jnp.zeros((batch, heads, key, v.shape[-1]))
  return jnp.moveaxis(jax.lax.scan(step, S, xs, reverse=reverse)[1], 0, 1)


def _reference(p, x, mask, *, bidirectional=False, use_beta=True, use_gate=False,
               allow_neg_eigval=False):
  """fla's DeltaNet layer written out from its equations (float32)."""
  batch, length, _ = x.shape
  x = jnp.where(jnp.asarray(mask)[..., None], x, 0.0)

  def branch(name):
    y = _silu(_causal_conv(x @ p[f"{name}_proj"]["kernel"], p[f"{name}_conv1d"]["weight"]))
    return y.reshape(batch, length, HEADS, -1)

  unit = lambda a: a / jnp.sqrt(jnp.sum(a * a, -1, keepdims=True) + 1e-6)
  q, k, v = unit(branch("q")) / np.sqrt(K), unit(branch("k")), branch("v")
  beta = 1.0 / (1.0 + jnp.exp(-x @ p["b_proj"]["kernel"])) if use_beta else \
      jnp.ones((batch, length, HEADS))
  beta = 2 * beta if allow_neg_eigval else beta
  o = _delta_loop(q, k, v, beta, mask)
  if bidirectional:
    o = 0.5 * (o + _delta_loop(q, k, v, beta, mask, reverse=True))
  o = o / jnp.sqrt(jnp.mean(o * o, -1, keepdims=True) + 1e-5) * p["o_norm"]["scale"][None, None, None]
  if use_gate:
    o = o * _silu(x @ p["g_proj"]["kernel"]).reshape(o.shape)
  return o.reshape(batch, length, -1) @ p["o_proj"]["kernel"]


def _params(mixer, x, mask, seed=3):
  """The mixer's initial parameters, perturbed (norm weights not all 1)."""
  variables = mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask), deterministic=True)
  return helpers.perturb(variables, seed=seed, scale=0.2)


SETTINGS = [dict(), dict(bidirectional=True, use_gate=True, allow_neg_eigval=True, conv_kernel=2),
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
  reference = lambda v, x: _reference(v["params"], x, mask, **{
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
    fns.append(lambda *a: _delta_loop(*a, mask))
    return [jax.value_and_grad(lambda *a, f=f: jnp.sum(f(*a) * cotangent), (0, 1, 2, 3))(
        q, k, v, beta) for f in fns] + [fns[1](q, k, v, beta), fns[2](q, k, v, beta)]

  *results, chunked, looped = run_once(everything, q, k, v, beta)
  np.testing.assert_allclose(chunked, looped, rtol=1e-4, atol=1e-4)
  (_, expected), (_, got), (_, loop) = results
  for g, e, l in zip(got, expected, loop):
    scale = max(1.0, np.abs(e).max())
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(e, l, rtol=1e-3, atol=1e-4 * scale)


def test_chunked_layer_equals_the_recurrent_layer():
  """The layer with form "chunked" (chunks of 4 over 13 positions) equals form "recurrent",
  outputs and gradients, with beta pushed to 0 or 1 (b_proj scaled up) and both directions."""
  rng = np.random.default_rng(2)
  length = 13
  x = jnp.asarray(rng.normal(size=(2, length, WIDTH)), jnp.float32)
  mask = jnp.asarray(helpers.trailing_mask([length, 6], length))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  chunked = DeltaNet(num_heads=HEADS, chunk_size=4, bidirectional=True)
  recurrent = DeltaNet(num_heads=HEADS, form="recurrent", bidirectional=True)
  variables = run_once(lambda x: _params(chunked, x, mask), x)
  variables["params"]["b_proj"]["kernel"] = 30 * variables["params"]["b_proj"]["kernel"]

  def both(variables, x):
    loss = lambda m: lambda v, x: jnp.sum(m.apply(v, x, mask, deterministic=True) * cotangent)
    return [jax.value_and_grad(loss(m), (0, 1))(variables, x) for m in (recurrent, chunked)]

  (value, expected), (got_value, got) = run_once(both, variables, x)
  np.testing.assert_allclose(got_value, value, rtol=1e-4)
  for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(e).max()))


# --- settings ---

def test_settings_state_size_and_errors():
  assert registry.default_settings("deltanet") == dict(
      form="chunked", chunk_size=64, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=False, use_gate=False, use_beta=True)
  assert DeltaNet(num_heads=2).carried_state(8, 64) == 2 * 4 * 4
  assert DeltaNet(num_heads=4, bidirectional=True).carried_state(8, 64) == 2 * 4 * 2 * 2
  for bad, match in ((dict(conv_kernel=0), "conv_kernel=0 .* >= 1"),
                     (dict(use_gate=1), "use_gate=1 .* True or False"),
                     (dict(use_beta="yes"), "use_beta='yes'"),
                     (dict(allow_neg_eigval=None), "allow_neg_eigval=None"),
                     (dict(form="fast"), "form='fast'"),
                     (dict(chunk_size=0), "chunk_size=0 .* >= 1"),
                     (dict(bidirectional=1), "bidirectional=1"),
                     (dict(num_heads=0), "num_heads=0"),
                     (dict(dropout_rate=0.1), "attention_dropout_rate=0.1")):
    with pytest.raises(SettingError, match=match):
      DeltaNet(**bad)
  with pytest.raises(SettingError, match="num_heads=3 .* a divisor of the model width 8"):
    DeltaNet(num_heads=3).carried_state(8, 64)
  with pytest.raises(SettingError, match="head_dim"):
    registry.make("deltanet", dict(head_dim=4))
