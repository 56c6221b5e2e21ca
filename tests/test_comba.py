"""Comba (Hu et al. 2025): the layer against an independent reference written from fla's Comba
equations (projections, short causal convs, p = sigmoid(decay) k, the query corrected by -D p,
l2 norms of q, k and p, Gated DeltaNet's decay, a step loop of the transition matrix
a I - beta k p^T (tests/naive.py transition_loop), the norm gated by sigmoid(g_proj(x)),
o_proj): outputs and the gradients of every parameter and of the input, both directions
averaged, on rows with trailing padding; fla's naive_recurrent_comba's transition
a (I - beta k p^T) gives other outputs (which of the two is checked); the initialisation, the
optimiser group, the defaults and the parameters. What the family shares is
tests/test_recurrent_family.py's; the core's diagonal-plus-rank-one kind against a float64
loop is tests/test_dplr.py's; the comparison with fla's own code is in docs/models.md."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers.comba import Comba
from lra.testing import cheap_compiles
from lra.training import optim
from tests import helpers, naive
from tests.helpers import run_once

WIDTH, HEADS = 8, 2
KEY = WIDTH // HEADS


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


def _sigmoid(x):
  return 1.0 / (1.0 + jnp.exp(-x))


def reference(p, x, mask, *, bidirectional=False, allow_neg_eigval=False, use_gate=True,
              use_output_correction=True, use_inner_decay=True, decay_first=False):
  """fla's Comba layer from its equations (decay_first: naive_recurrent_comba's transition
  a (I - beta k p^T) in place of its kernels' a I - beta k p^T)."""
  batch, length, _ = x.shape
  x = jnp.where(jnp.asarray(mask)[..., None], x, 0.0)
  branch = lambda name: naive.silu(naive.causal_conv(
      x @ p[f"{name}_proj"]["kernel"], p[f"{name}_conv1d"]["weight"])).reshape(
          batch, length, HEADS, -1)
  unit = lambda a: a / jnp.sqrt(jnp.sum(a * a, -1, keepdims=True) + 1e-6)
  q, k, v = branch("q"), branch("k"), branch("v")
  erase = k * naive.lead(_sigmoid(p["decay"])[:, None], 4) if use_inner_decay else k
  if use_output_correction:
    q = q - naive.lead(p["D"][:, None], 4) * erase
  q, k, erase = unit(q) / np.sqrt(KEY), unit(k), unit(erase)
  beta = _sigmoid(x @ p["b_proj"]["kernel"]) * (2.0 if allow_neg_eigval else 1.0)
  dt = naive.softplus(x @ p["a_proj"]["kernel"] + p["dt_bias"][None, None])
  alpha = jnp.exp(-jnp.exp(p["A_log"])[None, None] * dt)[..., None, None]
  rank_one = beta[..., None, None] * k[..., :, None] * erase[..., None, :]
  eye = jnp.eye(KEY)[None, None, None]
  transition = alpha * (eye - rank_one) if decay_first else alpha * eye - rank_one
  o = naive.transition_loop(q, k, v, beta, transition, mask)
  if bidirectional:
    o = 0.5 * (o + naive.transition_loop(q, k, v, beta, transition, mask, reverse=True))
  o = naive.rms_norm(o, p["o_norm"]["scale"])
  if use_gate:
    o = o * _sigmoid(x @ p["g_proj"]["kernel"]).reshape(o.shape)
  return o.reshape(batch, length, -1) @ p["o_proj"]["kernel"]


def _params(mixer, x, mask, seed=3):
  """Initial parameters, perturbed, with decays that matter: alpha between about 0.05 and 0.9
  (A from 0.3 to 3, dt_bias -0.5 and 0.5); decay and D moved from their initial 1."""
  variables = helpers.perturb(mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask),
                                         deterministic=True), seed=seed, scale=0.2)
  p = variables["params"]
  p["A_log"] = jnp.log(jnp.linspace(0.3, 3.0, HEADS))
  p["dt_bias"] = jnp.linspace(-0.5, 0.5, HEADS)
  for name, values in (("decay", [-1.0, 2.0]), ("D", [0.5, 1.5])):
    if name in p:
      p[name] = jnp.asarray(values)
  return variables


# The default: both passes with the layer's defaults, outputs, in the recurrent form (the
# cheaper compile; the family's test checks the chunked form's outputs and gradients against
# it); the chunked form with gradients, and beta to 2, p = k, no correction nor gate, V = K,
# `-m slow`.
SETTINGS = [(dict(bidirectional=True, form="recurrent"), False),
            pytest.param(dict(bidirectional=True), True, marks=pytest.mark.slow),
            pytest.param(dict(allow_neg_eigval=True, use_inner_decay=False,
                              use_output_correction=False, use_gate=False, expand_v=1), True,
                         marks=pytest.mark.slow)]


@pytest.mark.parametrize(("settings", "with_grads"), SETTINGS)
def test_layer_matches_the_reference(settings, with_grads):
  """Outputs (and with `with_grads` the gradients of every parameter and of the input), rows with
  trailing padding, chunks of 3 over 7 positions; the decay applied before p reads the state
  (naive_recurrent_comba's order) is farther from the layer than the tolerance by orders of
  magnitude."""
  rng = np.random.default_rng(0)
  length = 7
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([length, 4, 1], length)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = Comba(num_heads=HEADS, chunk_size=3, **settings)
  options = {k: v for k, v in settings.items() if k not in ("expand_v", "form")}
  both = lambda v, x: [reference(v["params"], x, mask, **options)] + (
      [] if with_grads else [reference(v["params"], x, mask, decay_first=True, **options)])
  (out, refs), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _params(mixer, x, mask),
      lambda v, x: both(v, x)[0] if with_grads else jnp.stack(both(v, x)), x, mask,
      cotangent, grads=with_grads)
  ref, other = (np.where(mask[..., None], r, 0.0) for r in (refs if not with_grads
                                                               else (refs, refs)))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1
  if not with_grads:  # the wrong model is far off
    assert np.abs(np.asarray(out) - other).max() > 1e-2
    return
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(r).max()))
  x_grad = np.asarray(grads[1])
  assert np.abs(x_grad[mask]).max() > 1e-2 and not np.any(x_grad[~mask])
  p = grads[0]["params"]
  assert np.abs(np.asarray(p["A_log"])).max() > 1e-3  # the decay counts
  if "D" in p:
    assert np.abs(np.asarray(p["D"])).max() > 1e-3  # the correction counts


def test_initialisation_and_optimizer_group():
  """fla's Comba layer: decay 1 and D = correction_factor per head, A uniform in (0, 16],
  dt = softplus(dt_bias) log-uniform in [1e-3, 0.1]; A_log, dt_bias and D (fla's
  _no_weight_decay, and nothing else: not decay) trained apart, without weight decay."""
  heads = 512
  mixer = Comba(num_heads=heads, correction_factor=0.02, form="recurrent")
  p = run_once(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, heads)),
                                  jnp.ones((1, 2), bool), deterministic=True)["params"])
  assert np.all(np.asarray(p["decay"]) == 1.0) and np.allclose(p["D"], 0.02)
  A = np.exp(np.float64(p["A_log"]))
  assert A.shape == (heads,) and np.all((A > 0) & (A <= 16 * (1 + 1e-6)))
  np.testing.assert_allclose(np.quantile(A, [0.25, 0.5, 0.75]), [4, 8, 12], atol=1.2)
  dt = np.log1p(np.exp(np.float64(p["dt_bias"])))
  assert np.all((dt > 1e-3 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  model = models.build(helpers.tiny_model("comba"), vocab_size=10, num_classes=2, max_len=6,
                       pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, Comba.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  assert len(group) == 6 and {k.rsplit("'", 2)[-2] for k in group} == {"A_log", "dt_bias", "D"}


def test_defaults_head_sizes_and_parameters():
  """fla's layer defaults (V = 2K); decay and D only with use_inner_decay and
  use_output_correction, g_proj only with use_gate."""
  assert registry.default_settings("comba") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=False, use_gate=True, expand_v=2, use_output_correction=True,
      use_inner_decay=True, correction_factor=1.0)
  assert Comba(num_heads=2).head_sizes(8) == (2, 4, 8)
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  names = lambda **s: set(jax.eval_shape(
      lambda: Comba(num_heads=HEADS, **s).init(jax.random.PRNGKey(0), x, mask,
                                               deterministic=True))["params"])
  assert names() >= {"decay", "D", "A_log", "dt_bias", "a_proj", "g_proj"}
  assert not {"decay", "D", "g_proj"} & names(use_inner_decay=False,
                                              use_output_correction=False, use_gate=False)
