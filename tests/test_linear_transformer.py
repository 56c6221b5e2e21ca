"""Linear Transformer (Katharopoulos et al. 2020) against the same kernel in quadratic form,
plain and with RoFormer's rotary positions for kernel attention (Su et al. 2021, eq. 19)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.linear_transformer import LinearTransformerAttention
from tests.helpers import padded_inputs, run_once as _run

HEADS, DIM = 2, 8


def rotate(x_BxHxLxK):
  """RoFormer's rotation written with complex numbers: the pair (x_i, x_{i+K/2}) at position l
  becomes (x_i + j x_{i+K/2}) e^{j l 10000^(-2i/K)}, split back into its two halves."""
  half, length = x_BxHxLxK.shape[-1] // 2, x_BxHxLxK.shape[-2]
  angle_LxK2 = jnp.arange(length)[:, None] * 10000.0 ** (-2.0 * jnp.arange(half) / (2 * half))[None]
  z = (x_BxHxLxK[..., :half] + 1j * x_BxHxLxK[..., half:]) * jnp.exp(1j * angle_LxK2)[None, None]
  return jnp.concatenate([z.real, z.imag], axis=-1)


def _reference(params, x_BxLxD, mask_BxL, eps=1e-6, rotary=False):
  """A_ij = phi(q_i).phi(k_j) over real keys j, rows normalised, times V: an L x L matrix.
  Rotary (RoFormer eq. 19): the numerator's A_ij = (R_i phi(q_i)).(R_j phi(k_j)), the
  normaliser's stays unrotated."""
  p = params["params"]
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  wo, bo = p["OutputProjection_0"]["out"]["kernel"], p["OutputProjection_0"]["out"]["bias"]
  q, k, v = (jnp.einsum("bld,dhk->bhlk", x_BxLxD, w) for w in (wq, wk, wv))
  phi = lambda t: jnp.where(t > 0, t + 1.0, jnp.exp(jnp.minimum(t, 0.0)))
  real_Bx1x1xL = mask_BxL[:, None, None, :]
  a_BxHxLxL = (phi(q) @ jnp.swapaxes(phi(k), -1, -2)) * real_Bx1x1xL
  total_BxHxLx1 = jnp.sum(a_BxHxLxL, -1, keepdims=True) + eps
  if rotary:
    a_BxHxLxL = (rotate(phi(q)) @ jnp.swapaxes(rotate(phi(k)), -1, -2)) * real_Bx1x1xL
  return jnp.einsum("bhlk,hkd->bld", (a_BxHxLxL / total_BxHxLx1) @ v, wo) + bo[None, None, :]


@pytest.mark.parametrize("rotary", [False, True])
def test_matches_quadratic_form(rotary):
  """Outputs and gradients at the real positions, with the default eps (the reference's)."""
  assert registry.default_settings("linear_transformer") == {"eps": 1e-6}
  x, mask, rng = padded_inputs(7, DIM)
  mask = jnp.asarray(mask)
  mixer = LinearTransformerAttention(num_heads=HEADS, qkv_dim=DIM, rotary=rotary)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  real = lambda y: jnp.where(mask[..., None], y, 0.0)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    out, pullback = jax.vjp(apply, params, x)
    reference = lambda p, x: real(_reference(p, x, mask, rotary=rotary))
    ref, ref_pullback = jax.vjp(reference, params, x)
    return out, ref, pullback(cotangent), ref_pullback(cotangent)

  out, ref, grads, ref_grads = _run(run, x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(ref_grads)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
