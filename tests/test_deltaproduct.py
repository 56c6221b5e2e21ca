"""DeltaProduct (Siems et al. 2025): the interleaved op (models/ops/delta_product.py) against an
independent loop of N Householder steps per position (tests/naive.py householder_loop), both
forms, both directions, outputs and gradients, with padded positions full of noise; one step
per position is the core's delta rule on the same inputs; the layer's outputs against fla's
GatedDeltaProduct written out from its equations (tests/naive.py delta_net with householder),
bidirectional, on rows with trailing padding; its defaults, head sizes and parameters.
What the family shares (chunked == recurrent at the layer, padding equals truncation, the
declared state) is tests/test_recurrent_family.py's; the comparison with fla's own naive
reference is in docs/models.md."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.deltaproduct import DeltaProduct
from lra.models.ops.delta_product import delta_product
from lra.models.ops.matrix_recurrence import recurrence
from lra.testing import cheap_compiles
from tests import helpers, naive
from tests.helpers import run_once

WIDTH, HEADS = 8, 2


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


def _inputs(steps: int, seed: int = 0):
  """q, k (unit), v, beta in (0, 2), log decay: B=2, L=9 (row 1: a hole at 3 and padding
  from 7, its padded inputs noise like the rest), N = steps, H = 2, K = 3, V = 4."""
  rng = np.random.default_rng(seed)
  batch, length, key, value = 2, 9, 3, 4
  k = rng.normal(size=(batch, length, steps, HEADS, key))
  arrays = dict(q=rng.normal(size=(batch, length, HEADS, key)),
                k=k / np.linalg.norm(k, axis=-1, keepdims=True),
                v=rng.normal(size=(batch, length, steps, HEADS, value)),
                beta=rng.uniform(0.0, 2.0, size=(batch, length, steps, HEADS)),
                log_decay=rng.uniform(-2.0, 0.0, size=(batch, length, HEADS)))
  mask = np.ones((batch, length), bool)
  mask[1, 7:] = False
  mask[1, 3] = False
  cotangent = jnp.asarray(rng.normal(size=(batch, length, HEADS, value)), jnp.float32)
  return {n: jnp.asarray(a, jnp.float32) for n, a in arrays.items()}, mask, cotangent


def test_op_equals_the_householder_loop_in_both_forms_and_directions():
  """Three steps a position, chunks of 4 sub-steps over 27 (a chunk ends mid-position): the
  chunked and the recurrent op equal the loop, forward with the decay and from the end
  without; the chunked op's gradients of q, k, v, beta and the decay equal the
  loop's; a padded position outputs 0 and its noise reaches nothing (the loop never reads
  it)."""
  arrays, mask, cotangent = _inputs(steps=3)
  names = ("q", "k", "v", "beta", "log_decay")
  cases = [(True, False), (False, True)]  # (decay, reverse)

  def everything(*args):
    results = []
    for decay, reverse in cases:
      chunked, recurrent = (lambda q, k, v, b, g, f=form: delta_product(
          q, k, v, b, jnp.asarray(mask), log_decay=g if decay else None, reverse=reverse,
          form=f, chunk_size=4) for form in ("chunked", "recurrent"))
      loop = lambda q, k, v, b, g: naive.householder_loop(
          q, k, v, b, mask, alpha=jnp.exp(g) if decay else None, reverse=reverse)
      grad = lambda f: jax.grad(lambda *a: jnp.sum(f(*a) * cotangent), range(5))(*args)
      results.append((chunked(*args), recurrent(*args), loop(*args), grad(chunked),
                      grad(loop)))
    return results

  for (decay, reverse), (chunked, recurrent, looped, got, want) in zip(cases, run_once(
      everything, *(arrays[n] for n in names))):
    assert np.abs(np.asarray(looped)).max() > 0.5
    for o in (chunked, recurrent):
      np.testing.assert_allclose(o, looped, rtol=1e-4, atol=1e-5)
    assert not np.any(np.asarray(chunked)[~mask])
    for name, g, w in zip(names, got, want):
      np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()),
                                 err_msg=f"d{name}, decay {decay}, reverse {reverse}")
    assert np.abs(np.asarray(want[4])).max() > 1e-2 or not decay  # the decay counts


def test_one_step_a_position_is_the_delta_rule():
  """N = 1: the op is the core's delta rule (DeltaNet's, Gated DeltaNet's) on the same q, k,
  v, beta and decay, in both forms and both directions."""
  a, mask, _ = _inputs(steps=1, seed=1)

  def both():
    pairs = []
    for form in ("chunked", "recurrent"):
      for reverse in (False, True):
        settings = dict(form=form, chunk_size=4, reverse=reverse, log_decay=a["log_decay"])
        pairs.append((delta_product(a["q"], a["k"], a["v"], a["beta"], mask, **settings),
                      recurrence(a["q"], a["k"][:, :, 0], a["v"][:, :, 0], mask,
                                 beta=a["beta"][:, :, 0], **settings)[0]))
    return pairs

  for got, want in run_once(both):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_layer_matches_the_reference():
  """fla's GatedDeltaProduct at its defaults (two steps, forget gate, beta in (0, 2), output
  gate, V = 2K), both directions averaged, on rows with trailing padding: the outputs, in the
  recurrent form (the cheaper compile; the op's gradients are checked above, the chunked
  form's outputs and gradients at the layer by the family's test)."""
  rng = np.random.default_rng(0)
  length = 7
  x = jnp.asarray(rng.normal(size=(2, length, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([length, 4], length)
  mixer = DeltaProduct(num_heads=HEADS, form="recurrent", bidirectional=True)

  def params(x):  # perturbed, with decays between about 0.2 and 0.9
    variables = helpers.perturb(mixer.init(jax.random.PRNGKey(3), x, jnp.asarray(mask),
                                           deterministic=True), seed=3, scale=0.2)
    variables["params"]["A_log"] = jnp.log(jnp.linspace(0.3, 3.0, HEADS))
    variables["params"]["dt_bias"] = jnp.linspace(-0.5, 0.5, HEADS)
    return variables

  reference = lambda v, x: naive.delta_net(
      v["params"], x, mask, HEADS, gated=True, bidirectional=True, use_gate=True,
      allow_neg_eigval=True, householder=2)
  (out, ref), _ = helpers.mixer_against_reference(mixer, params, reference, x, mask, None,
                                                  grads=False)
  np.testing.assert_allclose(out, np.where(mask[..., None], ref, 0.0), rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1


def test_defaults_head_sizes_and_parameters():
  """fla's layer defaults; V = expand_v K; k_proj, v_proj and b_proj give N per position; the
  forget gate's A_log and dt_bias (the optimiser group) only with use_forget_gate."""
  assert registry.default_settings("deltaproduct") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=True, use_gate=True, num_householder=2, use_forget_gate=True,
      expand_v=2)
  assert DeltaProduct(num_heads=2).head_sizes(8) == (2, 4, 8)
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  shapes = lambda **s: jax.tree_util.tree_map(jnp.shape, jax.eval_shape(
      lambda: DeltaProduct(num_heads=HEADS, **s).init(jax.random.PRNGKey(0), x, mask,
                                                       deterministic=True))["params"])
  p = shapes(num_householder=3)
  assert (p["k_proj"]["kernel"], p["v_proj"]["kernel"], p["b_proj"]["kernel"]) == (
      (WIDTH, 3 * WIDTH), (WIDTH, 3 * 2 * WIDTH), (WIDTH, 3 * HEADS))
  assert p["A_log"] == (HEADS,) and p["dt_bias"] == (HEADS,)
  assert DeltaProduct.OPTIMIZER_GROUP == ("A_log", "dt_bias")
  assert not {"A_log", "dt_bias", "a_proj", "g_proj"} & set(shapes(use_forget_gate=False,
                                                                   use_gate=False))
