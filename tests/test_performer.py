"""Performer (FAVOR+) mixer against independent references: the kernel it estimates, exact
softmax attention, and the quadratic form of its own features (plain, and with RoFormer's
rotary positions for kernel attention, Su et al. 2021, eq. 19)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.performer  # registers "performer" even before models/__init__ imports it
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.mixers.performer import (PerformerAttention, favor_attention,
                                        positive_features, random_features)
from lra.rules import SettingError
from tests.helpers import masked_softmax_attention, random_mask, run_once as _run, tiny_model
from tests.test_linear_transformer import rotate


def test_kernel_estimate_is_unbiased():
  """Mean over draws of phi(q).phi(k) -> exp(q.k / sqrt(d)), for iid and orthogonal w."""
  d, m, draws = 4, 4, 2000
  rng = np.random.default_rng(0)
  q_K, k_K = rng.normal(size=d) * 0.7, rng.normal(size=d) * 0.7
  target = np.exp(q_K @ k_K / np.sqrt(d))
  keys = jax.random.split(jax.random.PRNGKey(0), draws)

  def estimates(keys):
    out = []
    for orthogonal in (False, True):
      w_DxMxK = jax.vmap(lambda key: random_features(key, m, d, orthogonal=orthogonal))(keys)
      phi = lambda x, w: positive_features(jnp.asarray(x, jnp.float32)[None, None, None], w)
      out.append(jax.vmap(lambda w: jnp.sum(phi(q_K, w) * phi(k_K, w)))(w_DxMxK))
    return out

  for est in _run(estimates, keys):
    est = np.asarray(est, np.float64)
    stderr = est.std() / np.sqrt(draws)
    assert stderr < 0.05 * target  # the check below is not vacuous
    assert abs(est.mean() - target) < 4 * stderr, (est.mean(), target, stderr)


def test_error_against_softmax_shrinks_with_more_features():
  rng = np.random.default_rng(1)
  shape = (2, 16, 2, 8)
  q, k, v = (jnp.asarray(rng.normal(size=shape) * s, jnp.float32) for s in (0.8, 0.8, 1.0))
  mask = jnp.asarray(random_mask(rng, 2, 16, full_first=False, hole=True))
  keys = jax.random.split(jax.random.PRNGKey(1), 4)  # averaged over 4 draws per size

  def errors(q, k, v, mask, keys):
    exact = masked_softmax_attention(q, k, v, mask[:, None, None, :])
    error = lambda key, m: jnp.mean(jnp.abs(
        favor_attention(q, k, v, mask, random_features(key, m, 8)) - exact))
    return jnp.stack([jnp.mean(jax.vmap(lambda key: error(key, m))(keys))
                      for m in (16, 64, 256)])

  err = np.asarray(_run(errors, q, k, v, mask, keys))
  assert err[0] > err[1] > err[2], err
  assert err[2] < 0.5 * err[0], err
  assert err[2] < 0.1, err  # 256 features approximate softmax attention closely


def test_orthogonal_blocks():
  d, m = 8, 2 * 8 + 3
  w_MxK, iid_MxK = _run(lambda key: (random_features(key, m, d),
                                     random_features(key, m, d, orthogonal=False)),
                        jax.random.PRNGKey(2))
  w_MxK = np.asarray(w_MxK, np.float64)
  directions = w_MxK / np.linalg.norm(w_MxK, axis=1, keepdims=True)
  for start in range(0, m, d):
    block = directions[start:start + d]
    np.testing.assert_allclose(block @ block.T, np.eye(len(block)), atol=1e-5)
  norms = np.linalg.norm(w_MxK, axis=1)
  # Rescaled by chi(d) norms, not unit rows; iid rows are not orthogonal.
  assert norms.std() > 0.1 and 1.5 < norms.mean() < 4.5
  iid = np.asarray(iid_MxK, np.float64)[:d]
  iid = iid / np.linalg.norm(iid, axis=1, keepdims=True)
  assert np.abs(iid @ iid.T - np.eye(d)).max() > 0.1


@functools.lru_cache(maxsize=None)
def _params(seed):
  """Initialised once per seed. FullAttention's init: the Performer has the same parameters,
  so applying the Performer to them also checks the names match."""
  full = transformer.FullAttention(num_heads=2, qkv_dim=8)
  x, mask = jnp.zeros((1, 3, 8)), jnp.ones((1, 3), bool)
  return _run(lambda key: full.init(key, x, mask, deterministic=True), jax.random.PRNGKey(seed))


def _setup(kernel="softmax", nb_features=16, seed=0, layer_index=0, **kw):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(3, 11, 8)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, 11, full_first=False, hole=True))
  mixer = PerformerAttention(num_heads=2, qkv_dim=8, nb_features=nb_features, kernel=kernel,
                             seed=seed, layer_index=layer_index, **kw)
  return rng, x, mask, mixer, _params(seed)


def _quadratic_reference(params, x_BxLxD, mask_BxL, w_MxK, kernel, rotary=False):
  """Features written out from the definitions, the L x L kernel matrix, row-normalised.
  Rotary (RoFormer eq. 19): the numerator's kernel (R_i phi(q_i)).(R_j phi(k_j)), the
  normaliser's unrotated."""
  p = params["params"]
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  wo, bo = p["OutputProjection_0"]["out"]["kernel"], p["OutputProjection_0"]["out"]["bias"]
  q, k, v = (jnp.einsum("bld,dhk->bhlk", x_BxLxD, w) for w in (wq, wk, wv))
  d, m = q.shape[-1], w_MxK.shape[0]

  def phi(x):
    x = x / d ** 0.25
    if kernel == "relu":
      return jnp.maximum(x @ w_MxK.T, 0.0) / np.sqrt(m)
    return jnp.exp(x @ w_MxK.T - jnp.sum(x * x, -1, keepdims=True) / 2) / np.sqrt(m)

  a = phi(q) @ jnp.swapaxes(phi(k), -1, -2) * mask_BxL[:, None, None, :]
  total = jnp.sum(a, -1, keepdims=True)
  if rotary:
    a = rotate(phi(q)) @ jnp.swapaxes(rotate(phi(k)), -1, -2) * mask_BxL[:, None, None, :]
  heads = (a @ v) / jnp.where(total > 0, total, 1.0)  # ReLU rows may have no feature on
  return jnp.einsum("bhlk,hkd->bld", heads, wo) + bo[None, None, :]


def test_matches_own_quadratic_form():
  """Eval mode uses the fixed features of (seed, layer_index); the linear-time form equals the
  quadratic one built from them, so stabilisation and masking change nothing."""
  _, x, mask, mixer, params = _setup(seed=3, layer_index=2)
  # The same variables as full attention: no random features are stored.
  own = jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True))
  assert jax.tree_util.tree_structure(own) == jax.tree_util.tree_structure(params)
  relu = mixer.clone(kernel="relu")
  w_MxK = random_features(jax.random.fold_in(jax.random.PRNGKey(3), 2), 16, 4)
  outs = _run(lambda p, x: [(m.apply(p, x, mask, deterministic=True),
                             _quadratic_reference(p, x, mask, w_MxK, m.kernel))
                            for m in (mixer, relu)], params, x)
  for out, ref in outs:
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_rotary_matches_roformers_kernel_attention(kernel):
  """Rotated features in the numerator, unrotated normaliser: outputs and gradients (of the
  parameters and the inputs) against the quadratic form, at the real positions."""
  rng, x, mask, mixer, params = _setup(kernel=kernel, seed=3, layer_index=2, rotary=True)
  w_MxK = random_features(jax.random.fold_in(jax.random.PRNGKey(3), 2), 16, 4)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  real = lambda y: jnp.where(mask[..., None], y, 0.0)

  def run(p, x):
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    reference = lambda p, x: real(_quadratic_reference(p, x, mask, w_MxK, kernel, rotary=True))
    (out, pullback), (ref, ref_pullback) = jax.vjp(apply, p, x), jax.vjp(reference, p, x)
    return out, ref, pullback(cotangent), ref_pullback(cotangent)

  out, ref, grads, ref_grads = _run(run, params, x)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


def test_rotary_needs_an_even_number_of_features():
  model = tiny_model("performer", positions="rotary", attention={"nb_features": 7})
  with pytest.raises(SettingError, match=r"nb_features=7 is not valid: an even number with "
                                         r"positions='rotary'"):
    models.build(model, vocab_size=9, num_classes=2, max_len=12, pair=False)


def test_redraw_in_training_fixed_in_evaluation():
  _, x, mask, mixer, params = _setup()
  fixed = mixer.clone(redraw=False)

  def outputs(p, x):
    train = lambda m, key: m.apply(p, x, mask, deterministic=False, rngs={"dropout": key})
    return (train(mixer, jax.random.PRNGKey(1)), train(mixer, jax.random.PRNGKey(1)),
            train(mixer, jax.random.PRNGKey(2)), mixer.apply(p, x, mask, deterministic=True),
            train(fixed, jax.random.PRNGKey(1)), train(fixed, jax.random.PRNGKey(2)))

  a, a_again, b, evaluation, fixed_a, fixed_b = _run(outputs, params, x)
  np.testing.assert_array_equal(a, a_again)
  assert not np.allclose(a, b)
  assert not np.allclose(a, evaluation)
  # Without redraw, training uses the evaluation features whatever the rng.
  np.testing.assert_allclose(fixed_a, evaluation, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(fixed_b, evaluation, rtol=1e-6, atol=1e-6)


def test_relu_queries_without_features_have_finite_gradients():
  """The ReLU kernel with 2 features leaves some queries with no feature on (a zero
  normaliser); the softmax kernel is in the contract."""
  rng, x, mask, mixer, params = _setup(kernel="relu", nb_features=2)
  mask = mask.at[1].set(False)  # and a row with no real token
  x = jnp.where(mask[:, :, None], x, 30.0)
  weights = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=False,
                                          rngs={"dropout": jax.random.PRNGKey(5)}) * weights)
  for g in jax.tree_util.tree_leaves(_run(jax.grad(loss, argnums=(0, 1)), params, x)):
    assert np.all(np.isfinite(g))


def test_settings():
  """The defaults (tests/test_models.py tries every setting's bad values)."""
  assert registry.default_settings("performer") == {
      "nb_features": 256, "kernel": "softmax", "orthogonal": True, "redraw": True, "seed": 0}
