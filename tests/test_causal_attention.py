"""The Transformer's `causal` setting (Zoology's MQAR attention): every implementation equals a
dense reference with the causal mask, in outputs and gradients; a later token never changes an
earlier output; padding at the end is invisible."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.mixers import transformer
from lra.models.mixers.transformer import FullAttention
from tests.helpers import masked_softmax_attention, padded_inputs, run_once

HEADS, DIM, LENGTH = 2, 8, 11
IMPLEMENTATIONS = [dict(), dict(implementation="chunked", query_chunk=4, key_chunk=3),
                   dict(implementation="chunked", query_chunk=3, key_chunk=5)]


def _reference(params, x_BxLxD, mask_BxL):
  """Project, attend to real keys j <= i in plain jnp, merge the heads."""
  p = params["params"]
  project = lambda n: jnp.einsum("bld,dhk->blhk", x_BxLxD, p["QKVProjection_0"][n]["kernel"])
  positions = np.arange(x_BxLxD.shape[1])
  allowed = jnp.asarray(mask_BxL)[:, None, None, :] & jnp.asarray(
      positions[None, :] <= positions[:, None])[None, None]
  heads = masked_softmax_attention(project("query"), project("key"), project("value"), allowed)
  out = p["OutputProjection_0"]["out"]
  return jnp.einsum("blhk,hkd->bld", heads, out["kernel"]) + out["bias"][None, None]


@pytest.mark.parametrize("settings", IMPLEMENTATIONS, ids=["dense", "chunked43", "chunked35"])
def test_causal_attention_equals_the_masked_reference(settings):
  x, mask, rng = padded_inputs(LENGTH, DIM)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = FullAttention(num_heads=HEADS, qkv_dim=DIM, causal=True, **settings)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    got, pull = jax.vjp(lambda x: mixer.apply(params, x, mask, deterministic=True), x)
    want, pull_want = jax.vjp(lambda x: _reference(params, x, mask), x)
    return got, want, pull(cotangent)[0], pull_want(cotangent)[0]

  got, want, grad, grad_want = run_once(run, x)
  real = mask.astype(bool)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=1e-5, atol=1e-5)
  # Gradients reach real inputs only through real outputs: compare on the real positions.
  np.testing.assert_allclose(np.asarray(grad)[real], np.asarray(grad_want)[real], rtol=1e-4,
                             atol=1e-5)


def test_a_later_token_changes_no_earlier_output_and_non_causal_does():
  x, _, rng = padded_inputs(LENGTH, DIM)
  mask = np.ones(x.shape[:2], bool)
  changed = x.at[:, 7].add(jnp.asarray(rng.normal(size=(x.shape[0], DIM)), jnp.float32))
  for causal in (True, False):
    mixer = FullAttention(num_heads=HEADS, qkv_dim=DIM, causal=causal)
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    before, after = (np.asarray(mixer.apply(params, v, mask, deterministic=True))
                     for v in (x, changed))
    same = np.allclose(before[:, :7], after[:, :7], rtol=0, atol=1e-6)
    assert same == causal


def test_cudnn_call_is_causal_through_xla():
  """The "cudnn" wrapper passes causal to jax.nn.dot_product_attention (run here through XLA)
  and to its fallback."""
  rng = np.random.default_rng(3)
  q, k, v = (jnp.asarray(rng.normal(size=(2, LENGTH, HEADS, 8)), jnp.float32) for _ in range(3))
  mask = jnp.asarray(np.arange(LENGTH)[None, :] < np.array([[LENGTH], [6]]))
  never = lambda: jnp.full(q.shape, 7.0, q.dtype)
  got = run_once(lambda q, k, v: transformer.cudnn_attention(
      q, k, v, mask, fallback=never, implementation="xla", causal=True), q, k, v)
  positions = np.arange(LENGTH)
  allowed = mask[:, None, None, :] & jnp.asarray(positions[None, :] <= positions[:, None])[None, None]
  want = masked_softmax_attention(q, k, v, allowed)
  real = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=1e-5,
                             atol=1e-5)
