"""Linear Transformer (Katharopoulos et al. 2020) against the same kernel in quadratic form."""
import jax
import jax.numpy as jnp
import numpy as np

from lra.models import registry
from lra.models.linear_transformer import LinearTransformerAttention
from tests.helpers import padded_inputs, run_once as _run

HEADS, DIM = 2, 8


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


def test_matches_quadratic_form():
  """Outputs and gradients at the real positions, with the default eps (the reference's)."""
  assert registry.default_settings("linear_transformer") == {"eps": 1e-6}
  x, mask, rng = padded_inputs(7, DIM)
  mask = jnp.asarray(mask)
  mixer = LinearTransformerAttention(num_heads=HEADS, qkv_dim=DIM)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  real = lambda y: jnp.where(mask[..., None], y, 0.0)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    out, pullback = jax.vjp(apply, params, x)
    ref, ref_pullback = jax.vjp(lambda p, x: real(_reference(p, x, mask)), params, x)
    return out, ref, pullback(cotangent), ref_pullback(cotangent)

  out, ref, grads, ref_grads = _run(run, x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(ref_grads)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
