"""HGRN2 (Qin et al. 2024): the layer against a reference written from the paper's recurrence
(tests/naive.py: a step loop over the outer-product state, outputs and gradients of
parameters and input), in both variants (fla's layer, the authors' LRA layer), causal and
bidirectional, both forms; the learned lower bounds (cumulative softmax over the layers) shared
by the layers; huge gates stay finite; its defaults and its own errors. What the family shares
is tests/test_recurrent_family.py's."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.hgrn2 import HGRN2
from lra.rules import SettingError
from lra.testing import finite
from tests import helpers, naive
from tests.helpers import run_once as _run

WIDTH, HEADS, QKV, KEY, LENGTH = 6, 2, 8, 3, 7  # V = 4 per head, K = 3 (expand_ratio)


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


# The recurrent form `-m slow` (the family's test compares it with the chunked one).
@pytest.mark.parametrize("variant, bidirectional, form", [
    ("fla", False, "chunked"), ("lra", True, "chunked"),
    pytest.param("fla", True, "recurrent", marks=pytest.mark.slow)])
def test_layer_matches_the_step_loop_reference(variant, bidirectional, form):
  """Outputs and gradients (parameters and input) of the layer equal the reference's, on rows
  with trailing padding; lower bound 2 / 4 (layer 2 of 4, "fixed")."""
  mixer = _mixer(variant=variant, bidirectional=bidirectional, form=form)
  reference = lambda p, x, mask: naive.hgrn2(p, x, mask, 0.5, variant, bidirectional)
  _check_against_reference(mixer, reference, seed=1)


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
    refs = [naive.hgrn2(params[f"layer{i}"], x, mask, jnp.asarray(
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


def test_defaults_head_sizes_and_errors():
  """Its defaults and head sizes (from qkv_dim and expand_ratio); qkv_dim that does not split
  into the heads is one line; the learned lower bounds need the encoder's shared module (the
  settings' own rules: tests/test_models.py)."""
  assert registry.default_settings("hgrn2") == dict(
      expand_ratio=0, lower_bound="learned", variant="fla", form="chunked", chunk_size=64,
      bidirectional=False, combine="mean")
  assert _mixer().head_sizes(WIDTH) == (HEADS, KEY, 4)
  assert _mixer(expand_ratio=0).head_sizes(WIDTH) == (HEADS, 4, 4)
  with pytest.raises(SettingError, match="qkv_dim=7 .* multiple of"):
    _mixer(qkv_dim=7)
  with pytest.raises(ValueError, match="shared lower bounds"):
    x, mask, _ = _inputs(0)
    _mixer(lower_bound="learned").init(jax.random.PRNGKey(0), x, mask, deterministic=True)
