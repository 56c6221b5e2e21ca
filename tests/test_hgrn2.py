"""HGRN2 (Qin et al. 2024): the layer against a reference written from the paper's recurrence
(a step loop over the outer-product state, outputs and gradients of parameters and input), in
both variants (fla's layer, the authors' LRA layer), causal and bidirectional; chunked equals
recurrent; the learned lower bounds (cumulative softmax over the layers) shared by the layers;
huge gates stay finite; settings."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.hgrn2 import HGRN2
from lra.rules import SettingError
from lra.testing import finite
from tests import helpers
from tests.helpers import run_once as _run

WIDTH, HEADS, QKV, KEY, LENGTH = 6, 2, 8, 3, 7  # V = 4 per head, K = 3 (expand_ratio)


def _lead(a, ndim):
  """a with leading unit axes up to `ndim` (explicit broadcasting)."""
  a = jnp.asarray(a)
  return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def _dense(p, x, axes=1):
  """x @ kernel (+ bias) over the last `axes` axes of x."""
  y = jnp.tensordot(x, p["kernel"], axes=axes)
  return y + _lead(p["bias"], y.ndim) if "bias" in p else y


def _step_loop(q, k, v, f, mask, reverse=False):
  """S_t = diag(f_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, one position at a time (a scan
  over L); a padded position leaves S alone and reads 0."""
  batch, _, heads, key = q.shape

  def step(S, xs):
    q_t, k_t, v_t, f_t, keep = xs
    new = f_t[..., None] * S + k_t[..., :, None] * v_t[..., None, :]
    S = jnp.where(keep[:, None, None, None], new, S)
    return S, jnp.einsum("bhkv,bhk->bhv", S, q_t) * keep[:, None, None]

  xs = [jnp.moveaxis(a, 1, 0) for a in (q, k, v, f, mask)]
  _, o = jax.lax.scan(step, jnp.zeros((batch, heads, key, v.shape[-1])), xs, reverse=reverse)
  return jnp.moveaxis(o, 0, 1)


def _reference(p, x, mask, bound, variant="fla", bidirectional=False):
  """The layer from its equations: f = lb + (1 - lb) sigmoid(f_proj x), k = 1 - f."""
  x = jnp.where(mask[..., None], x, 0.0)
  q, f, i = (_dense(p[n], x) for n in ("q_proj", "f_proj", "i_proj"))
  if variant == "lra":
    q, v = jax.nn.sigmoid(q), i * jax.nn.sigmoid(i)
  else:
    q, v = q * jax.nn.sigmoid(q) / np.sqrt(KEY), i
  bound = _lead(bound, 4)
  f = bound + (1 - bound) * jax.nn.sigmoid(f)
  o = _step_loop(q, 1 - f, v, f, mask)
  if bidirectional:
    o = 0.5 * (o + _step_loop(q, 1 - f, v, f, mask, reverse=True))
  if variant == "lra":
    mean = jnp.mean(o, axis=(-2, -1), keepdims=True)
    var = jnp.mean((o - mean) ** 2, axis=(-2, -1), keepdims=True)
    o = (o - mean) / jnp.sqrt(var + 1e-5) * _lead(p["norm"]["scale"], 4) + \
        _lead(p["norm"]["bias"], 4)
  else:
    o = o / jnp.sqrt(jnp.mean(o ** 2, axis=(-2, -1), keepdims=True) + 1e-5) * \
        _lead(p["g_norm"]["scale"], 4)
  return _dense(p["o_proj"], o, axes=2) * mask[..., None]


def _inputs(seed, length=LENGTH):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = jnp.asarray(helpers.trailing_mask([length, 4, 1], length))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  return x, mask, cotangent


def _mixer(**settings):
  settings = dict(dict(num_heads=HEADS, qkv_dim=QKV, expand_ratio=KEY, chunk_size=3,
                       lower_bound="fixed", layer_index=2, num_layers=4), **settings)
  return HGRN2(**settings)


def _check_against_reference(mixer, reference, seed):
  x, mask, cotangent = _inputs(seed)
  make = lambda x: {"params": helpers.perturb(mixer.init(jax.random.PRNGKey(seed), x, mask,
                                                          deterministic=True)["params"], seed)}
  ref = lambda v, x: reference(v["params"], x, mask)
  (out, expected), (grads, expected_grads) = helpers.mixer_against_reference(
      mixer, make, ref, x, mask, cotangent * mask[..., None])
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(expected)).max() > 0.1
  for got, want in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(
      expected_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(expected_grads[1])).max() > 1e-3  # input gradients that matter


@pytest.mark.parametrize("variant, bidirectional, form", [
    ("fla", False, "chunked"), ("lra", True, "chunked"), ("fla", True, "recurrent")])
def test_layer_matches_the_step_loop_reference(variant, bidirectional, form):
  """Outputs and gradients (parameters and input) of the layer equal the reference's, on rows
  with trailing padding; lower bound 2 / 4 (layer 2 of 4, "fixed")."""
  mixer = _mixer(variant=variant, bidirectional=bidirectional, form=form)
  reference = lambda p, x, mask: _reference(p, x, mask, 0.5, variant, bidirectional)
  _check_against_reference(mixer, reference, seed=1)


def test_chunked_equals_recurrent():
  """Chunks of 4 over 13 positions (no divisor): the same outputs and gradients as the
  position-by-position form, both directions."""
  x, mask, cotangent = _inputs(3, length=13)
  mixers = [_mixer(form=form, chunk_size=4, bidirectional=True)
            for form in ("recurrent", "chunked")]

  def run(x):
    params = mixers[0].init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    loss = lambda m: lambda p, x: jnp.sum(m.apply(p, x, mask, deterministic=True) * cotangent)
    return [(m.apply(params, x, mask, deterministic=True), jax.grad(loss(m), (0, 1))(params, x))
            for m in mixers]

  (want, want_grads), (got, got_grads) = _run(run, x)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for g, w in zip(jax.tree_util.tree_leaves(got_grads), jax.tree_util.tree_leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


class _Stack(nn.Module):
  """Three HGRN2 layers applied to the same input with the encoder's shared lower bounds."""

  @nn.compact
  def __call__(self, x, mask):
    settings = dict(expand_ratio=KEY, chunk_size=3)
    shared = registry.make_shared("hgrn2", settings, num_heads=HEADS, qkv_dim=QKV)
    return [registry.make("hgrn2", settings, num_heads=HEADS, qkv_dim=QKV, layer_index=i,
                          num_layers=3, shared=shared, name=f"layer{i}")(
                              x, mask, deterministic=True) for i in range(3)]


def test_learned_lower_bounds_are_a_cumulative_softmax_shared_by_the_layers():
  """One logits parameter (layers x H K) in the encoder's scope, zero at init (bounds l / 3);
  layer l's bound is sum_{j=1..l} softmax_j, and the logits get gradients."""
  x, mask, _ = _inputs(5)
  stack = _Stack()
  params = _run(lambda: stack.init(jax.random.PRNGKey(0), x, mask))["params"]
  logits = params["hgrn2_lower_bounds"]["logits"]
  assert logits.shape == (3, HEADS * KEY) and np.all(np.asarray(logits) == 0)
  rng = np.random.default_rng(6)
  logits = rng.normal(size=(3, HEADS * KEY))
  params["hgrn2_lower_bounds"]["logits"] = jnp.asarray(logits, jnp.float32)
  share = np.exp(logits) / np.exp(logits).sum(0)
  bounds = [np.zeros(HEADS * KEY), share[1], share[1] + share[2]]

  def run(params):
    outs = stack.apply({"params": params}, x, mask)
    refs = [_reference(params[f"layer{i}"], x, mask, jnp.asarray(
        bounds[i].reshape(HEADS, KEY), jnp.float32)) for i in range(3)]
    grad = jax.grad(lambda p: sum(jnp.sum(o ** 2) for o in stack.apply({"params": p}, x,
                                                                       mask)))(params)
    return outs, refs, grad["hgrn2_lower_bounds"]["logits"]

  outs, refs, grad = _run(run, params)
  for out, ref in zip(outs, refs):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.all(np.abs(np.asarray(grad)) > 0)


def test_huge_gates_stay_finite():
  """Forget-gate pre-activations of +-1e4 (f = 1 or the bound): finite outputs, gradients."""
  x, mask, _ = _inputs(7)
  mixer = _mixer(lower_bound="none", layer_index=0)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    params = jax.tree_util.tree_map_with_path(
        lambda path, v: v * 1e4 if "f_proj" in jax.tree_util.keystr(path) else v, params)
    loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True) ** 2)
    return mixer.apply(params, x, mask, deterministic=True), jax.grad(loss, (0, 1))(params, x)

  out, grads = _run(run, x)
  assert finite(out) and finite(grads)


def test_settings_state_size_and_errors():
  assert registry.default_settings("hgrn2") == dict(
      expand_ratio=0, lower_bound="learned", variant="fla", form="chunked", chunk_size=64,
      bidirectional=False, combine="mean")
  assert _mixer().carried_state(WIDTH, 64) == HEADS * KEY * 4
  assert _mixer(bidirectional=True, expand_ratio=0).carried_state(WIDTH, 64) == 2 * HEADS * 4 * 4
  for bad, match in ((dict(expand_ratio=-1), "expand_ratio=-1 .* >= 0"),
                     (dict(lower_bound="cumsum"), "lower_bound='cumsum' .* 'learned'"),
                     (dict(variant="hgru2"), "variant='hgru2' .* 'fla', 'lra'"),
                     (dict(form="scan"), "form='scan'"),
                     (dict(qkv_dim=7), "qkv_dim=7 .* multiple of"),
                     (dict(dropout_rate=0.1), "attention_dropout_rate")):
    with pytest.raises(SettingError, match=match):
      _mixer(**bad)
  with pytest.raises(ValueError, match="shared lower bounds"):
    x, mask, _ = _inputs(0)
    _mixer(lower_bound="learned").init(jax.random.PRNGKey(0), x, mask, deterministic=True)
