"""KDA, Kimi Delta Attention (Kimi Team 2025): the layer against an independent reference written
from fla's KimiDeltaAttention equations (projections, short causal convs, l2 norms, the decay
per key channel -exp(A_log) softplus(f_proj(x) + dt_bias), a step loop of the transition
matrix (I - beta k k^T) diag(a) (tests/naive.py transition_loop), the norm gated by
sigmoid(g_proj(x)), o_proj): outputs and the gradients of every parameter and of the input,
both directions averaged, on rows with trailing padding; a decay shared by a head's channels
gives other outputs (the per-channel decay is what is checked); the initialisation, the
optimiser group, the defaults and the parameters. What the family shares (chunked ==
recurrent at the layer, padding equals truncation, causality, the declared state) is
tests/test_recurrent_family.py's; the core's diagonal-plus-rank-one kind against a float64
loop is tests/test_dplr.py's; the comparison with fla's own code is in docs/models.md."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers.kda import KDA
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
              scalar_decay=False):
  """fla's KimiDeltaAttention from its equations (scalar_decay: each head's channels share
  the mean of their log decays, the wrong model)."""
  batch, length, _ = x.shape
  x = jnp.where(jnp.asarray(mask)[..., None], x, 0.0)
  branch = lambda name: naive.silu(naive.causal_conv(
      x @ p[f"{name}_proj"]["kernel"], p[f"{name}_conv1d"]["weight"])).reshape(
          batch, length, HEADS, -1)
  unit = lambda a: a / jnp.sqrt(jnp.sum(a * a, -1, keepdims=True) + 1e-6)
  q, k, v = branch("q"), unit(branch("k")), branch("v")
  q = unit(q) / np.sqrt(KEY)
  beta = _sigmoid(x @ p["b_proj"]["kernel"]) * (2.0 if allow_neg_eigval else 1.0)
  f = (x @ p["f_proj_a"]["kernel"]) @ p["f_proj_b"]["kernel"]
  log_a = -naive.lead(jnp.exp(p["A_log"])[:, None], 4) * naive.softplus(
      f.reshape(batch, length, HEADS, KEY) + naive.lead(p["dt_bias"].reshape(HEADS, KEY), 4))
  if scalar_decay:
    log_a = jnp.broadcast_to(jnp.mean(log_a, -1, keepdims=True), log_a.shape)
  eye = jnp.eye(KEY)[None, None, None]
  outer = k[..., :, None] * k[..., None, :]
  transition = (eye - beta[..., None, None] * outer) * jnp.exp(log_a)[..., None, :]
  o = naive.transition_loop(q, k, v, beta, transition, mask)
  if bidirectional:
    o = 0.5 * (o + naive.transition_loop(q, k, v, beta, transition, mask, reverse=True))
  o = naive.rms_norm(o, p["o_norm"]["scale"])
  if use_gate:
    g = (x @ p["g_proj_a"]["kernel"]) @ p["g_proj_b"]["kernel"] + p["g_proj_b"]["bias"][None, None]
    o = o * _sigmoid(g).reshape(o.shape)
  return o.reshape(batch, length, -1) @ p["o_proj"]["kernel"]


def _params(mixer, x, mask, seed=3):
  """Initial parameters, perturbed, with decays that differ by channel: A from 0.3 to 3,
  dt_bias from -1 to 1 over each head's channels (a per step from about 0.93 down to 0.02)."""
  variables = helpers.perturb(mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask),
                                         deterministic=True), seed=seed, scale=0.2)
  p = variables["params"]
  p["A_log"] = jnp.log(jnp.linspace(0.3, 3.0, HEADS))
  p["dt_bias"] = jnp.tile(jnp.linspace(-1.0, 1.0, KEY), HEADS)
  return variables


# The default: both passes with the layer's defaults, outputs, in the recurrent form (the
# cheaper compile; the family's test checks the chunked form's outputs and gradients against
# it); the chunked form with gradients, and beta to 2, no gate, V = 2K, `-m slow`.
SETTINGS = [(dict(bidirectional=True, form="recurrent"), False),
            pytest.param(dict(bidirectional=True), True, marks=pytest.mark.slow),
            pytest.param(dict(allow_neg_eigval=True, use_gate=False, expand_v=2), True,
                         marks=pytest.mark.slow)]


@pytest.mark.parametrize(("settings", "with_grads"), SETTINGS)
def test_layer_matches_the_reference(settings, with_grads):
  """Outputs (and with `with_grads` the gradients of every parameter and of the input), rows with
  trailing padding, chunks of 3 over 7 positions; a scalar decay per head (the mean of its channels'
  log decays) is farther from the layer than the tolerance by orders of magnitude."""
  rng = np.random.default_rng(0)
  length = 7
  x = jnp.asarray(rng.normal(size=(3, length, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([length, 4, 1], length)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = KDA(num_heads=HEADS, chunk_size=3, **settings)
  options = {k: v for k, v in settings.items() if k not in ("expand_v", "form")}
  both = lambda v, x: [reference(v["params"], x, mask, **options)] + (
      [] if with_grads else [reference(v["params"], x, mask, scalar_decay=True, **options)])
  (out, refs), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _params(mixer, x, mask),
      lambda v, x: both(v, x)[0] if with_grads else jnp.stack(both(v, x)), x, mask,
      cotangent, grads=with_grads)
  ref, scalar = (np.where(mask[..., None], r, 0.0) for r in (refs if not with_grads
                                                               else (refs, refs)))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1
  if not with_grads:  # the wrong model is far off
    assert np.abs(np.asarray(out) - scalar).max() > 1e-2
    return
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(r).max()))
  x_grad = np.asarray(grads[1])
  assert np.abs(x_grad[mask]).max() > 1e-2 and not np.any(x_grad[~mask])
  assert np.abs(np.asarray(grads[0]["params"]["dt_bias"])).max() > 1e-3  # the decay counts


def test_initialisation_and_optimizer_group():
  """fla's KDA layer: A uniform in [1, 16] per head, dt = softplus(dt_bias) log-uniform in
  [1e-3, 0.1] per head and key channel; A_log and dt_bias (and nothing else) trained apart,
  without weight decay."""
  heads = 256
  mixer = KDA(num_heads=heads, form="recurrent")  # the cheaper compile
  p = run_once(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 2 * heads)),
                                  jnp.ones((1, 2), bool), deterministic=True)["params"])
  A = np.exp(np.float64(p["A_log"]))
  assert A.shape == (heads,) and np.all((A >= 1 - 1e-6) & (A <= 16 * (1 + 1e-6)))
  np.testing.assert_allclose(np.quantile(A, [0.25, 0.5, 0.75]), [4.75, 8.5, 12.25], atol=1.2)
  dt = np.log1p(np.exp(np.float64(p["dt_bias"])))
  assert dt.shape == (2 * heads,) and np.all((dt > 1e-3 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  np.testing.assert_allclose(np.median(np.log10(dt)), -2, atol=0.2)
  model = models.build(helpers.tiny_model("kda"), vocab_size=10, num_classes=2, max_len=6,
                       pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, KDA.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  assert len(group) == 4 and {k.rsplit("'", 2)[-2] for k in group} == {"A_log", "dt_bias"}


def test_defaults_head_sizes_and_parameters():
  """fla's layer defaults (V = K); the low-rank f_proj (D -> V -> H K) and g_proj (D -> V ->
  H V, a bias on the second), dt_bias per key channel; no g_proj without use_gate."""
  assert registry.default_settings("kda") == dict(
      form="chunked", chunk_size=32, bidirectional=False, combine="mean", conv_kernel=4,
      allow_neg_eigval=False, use_gate=True, expand_v=1)
  assert KDA(num_heads=2).head_sizes(8) == (2, 4, 4)
  assert KDA(num_heads=2, expand_v=2).head_sizes(8) == (2, 4, 8)
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  shapes = lambda **s: jax.tree_util.tree_map(jnp.shape, jax.eval_shape(
      lambda: KDA(num_heads=HEADS, **s).init(jax.random.PRNGKey(0), x, mask,
                                             deterministic=True))["params"])
  p = shapes(expand_v=2)
  value = 2 * KEY
  assert (p["f_proj_a"]["kernel"], p["f_proj_b"]["kernel"]) == ((WIDTH, value), (value, WIDTH))
  assert (p["g_proj_a"]["kernel"], p["g_proj_b"]["kernel"], p["g_proj_b"]["bias"]) == (
      (WIDTH, value), (value, HEADS * value), (HEADS * value,))
  assert p["A_log"] == (HEADS,) and p["dt_bias"] == (WIDTH,) and p["o_norm"]["scale"] == (value,)
  assert "a_proj" not in p and not {"g_proj_a", "g_proj_b"} & set(shapes(use_gate=False))
