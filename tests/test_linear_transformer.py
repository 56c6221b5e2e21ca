"""Linear Transformer (Katharopoulos et al. 2020) against the same kernel in quadratic form."""
import jax
import jax.numpy as jnp
import numpy as np

import models
import models.linear_transformer  # noqa: F401  (registers "linear_transformer")
from models import registry
from models.linear_transformer import LinearTransformerAttention
from tests.jaxpr_shapes import array_shapes
from tests.mixer_checks import run_once as _run

HEADS, DIM = 2, 8


def _inputs(length=7, seed=0, batch=3):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, length, DIM)), jnp.float32)
  # One full row, one with trailing padding, one with holes; each has a real token.
  mask = np.ones((batch, length), bool)
  mask[1, 3:] = False
  mask[2] = rng.random(length) < 0.5
  mask[2, 0] = True
  return x, jnp.asarray(mask), rng


def _reference(params, x_BxLxD, mask_BxL, eps=1e-6):
  """A_ij = phi(q_i).phi(k_j) over real keys j, rows normalised, times V: an L x L matrix."""
  p = params["params"]
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  wo, bo = p["OutputProjection_0"]["out"]["kernel"], p["OutputProjection_0"]["out"]["bias"]
  q, k, v = (jnp.einsum("bld,dhk->bhlk", x_BxLxD, w) for w in (wq, wk, wv))
  phi = lambda t: jnp.where(t > 0, t + 1.0, jnp.exp(jnp.minimum(t, 0.0)))
  a_BxHxLxL = (phi(q) @ jnp.swapaxes(phi(k), -1, -2)) * mask_BxL[:, None, None, :]
  a_BxHxLxL = a_BxHxLxL / (jnp.sum(a_BxHxLxL, -1, keepdims=True) + eps)
  return jnp.einsum("bhlk,hkd->bld", a_BxHxLxL @ v, wo) + bo[None, None, :]


def test_matches_quadratic_form_and_ignores_padding():
  x, mask, rng = _inputs()
  mixer = LinearTransformerAttention(num_heads=HEADS, qkv_dim=DIM)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  noise = jnp.where(mask[..., None], x, jnp.asarray(rng.normal(size=x.shape) * 100, x.dtype))
  real = lambda y: jnp.where(mask[..., None], y, 0.0)

  def run(x, noise):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    out, pullback = jax.vjp(apply, params, x)
    ref, ref_pullback = jax.vjp(lambda p, x: real(_reference(p, x, mask)), params, x)
    return out, ref, pullback(cotangent), ref_pullback(cotangent), apply(params, noise)

  out, ref, grads, ref_grads, out_noise = _run(run, x, noise)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(ref_grads)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
  # Whatever sits at padded positions changes no real output.
  np.testing.assert_allclose(out_noise, out, rtol=1e-5, atol=1e-5)


def test_no_length_by_length_array():
  length = 64
  x, mask = jnp.ones((1, length, DIM), jnp.float32), jnp.ones((1, length), bool)
  mixer = LinearTransformerAttention(num_heads=HEADS, qkv_dim=DIM)
  params = jax.eval_shape(lambda x: mixer.init(jax.random.PRNGKey(0), x, mask,
                                               deterministic=True), x)
  jaxpr = jax.make_jaxpr(lambda p, x: mixer.apply(p, x, mask, deterministic=True))(
      params, x).jaxpr
  shapes = list(array_shapes(jaxpr))
  assert shapes and not [s for s in shapes if s.count(length) >= 2]


def test_build_init_apply_and_settings():
  assert registry.default_settings("linear_transformer") == {"eps": 1e-6}
  model = models.build(
      dict(name="linear_transformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32,
           num_layers=2, dropout_rate=0.1, attention_dropout_rate=0.1),
      vocab_size=20, num_classes=5, max_len=24, pair=False)
  tokens = np.random.default_rng(0).integers(1, 20, size=(2, 21))
  tokens[1, 5:] = 0
  tokens = jnp.asarray(tokens)

  def run(tokens):
    params = model.init(jax.random.PRNGKey(0), tokens)
    loss = lambda p: jnp.sum(model.apply(p, tokens, deterministic=False,
                                         rngs={"dropout": jax.random.PRNGKey(1)}))
    return model.apply(params, tokens), jax.grad(loss)(params)

  logits, grads = _run(run, tokens)
  assert logits.shape == (2, 5) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits))
  assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))
