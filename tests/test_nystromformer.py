"""Nystromformer (Xiong et al. 2021): one landmark per token is full attention; padding is inert."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.nystromformer  # noqa: F401  (registers "nystromformer")
from lra.models import common, registry
from lra.models.mixers import transformer
from lra.models.mixers.nystromformer import (NystromAttention, depthwise_conv,
                                            iterative_pinv, nystrom_attention)
from lra.rules import SettingError
from tests.helpers import (array_shapes, masked_softmax_attention, noise_where_padded,
                           run_once as _run)

HEADS, DIM = 2, 8


def _softmax_rows(logits):
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_pinv_converges_to_numpy_pinv():
  rng = np.random.default_rng(0)
  # Softmax matrices like softmax(Q~ K~^T) with a dominant diagonal: well conditioned.
  a = _softmax_rows(rng.normal(size=(3, 8, 8)) + 3 * np.eye(8))
  assert np.linalg.cond(a).max() < 10
  zs = _run(lambda a: [iterative_pinv(a, j) for j in range(13)], jnp.asarray(a, jnp.float32))
  ref = np.linalg.pinv(a)
  errors = [np.abs(np.asarray(z, np.float64) - ref).max() / np.abs(ref).max() for z in zs]
  # Z_0 is the paper's A^T / (||A||_1 ||A||_inf), per matrix.
  norms = np.array([np.linalg.norm(x, 1) * np.linalg.norm(x, np.inf) for x in a])
  np.testing.assert_allclose(zs[0], np.swapaxes(a, -1, -2) / norms[:, None, None], rtol=1e-6)
  assert errors[0] > 0.5  # far from the inverse at the start ...
  # ... then strictly better each step down to float32 round-off, and cubic near the end.
  for before, after in zip(errors, errors[1:]):
    assert after < before or before < 1e-6, errors
  assert errors[6] < 1e-5 and errors[-1] < 1e-6, errors  # the paper's 6 steps suffice here
  assert errors[5] < errors[4] ** 2, errors


def test_depthwise_conv_is_one_kernel_per_head():
  rng = np.random.default_rng(5)
  v = rng.normal(size=(2, 7, HEADS, 3))
  kernel = rng.normal(size=(5, HEADS))
  out = _run(depthwise_conv, jnp.asarray(v, jnp.float32), jnp.asarray(kernel, jnp.float32))
  # y[l] = sum_j kernel[j] v[l + j - 2], zero outside the sequence (the torch Conv2d's "same").
  padded = np.pad(v, ((0, 0), (2, 2), (0, 0), (0, 0)))
  ref = sum(kernel[j][None, None, :, None] * padded[:, j:j + 7] for j in range(5))
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def _dense_attention(q, k, v, mask):
  return masked_softmax_attention(q, k, v, mask[:, None, None, :])


def test_one_landmark_per_token_is_full_attention():
  """With m = L the landmarks are the tokens and the three softmax factors are one matrix A, so
  the output is A pinv(A) A V = A V. Float32 round-off amplified by cond(A) (< 30 here, checked)
  bounds the difference: 1e-5 on O(1) outputs after 12 iterations (the iteration itself has
  converged to ~1e-7 by then); gradients agree to 1e-4."""
  rng = np.random.default_rng(1)
  batch, length = 3, 6
  # Keys near their queries give a dominant diagonal, so A is well conditioned; a near-uniform
  # A would need more iterations than the few that float32 round-off allows.
  q, noise, v = (rng.normal(size=(batch, length, HEADS, DIM)) for _ in range(3))
  q, k, v = (jnp.asarray(t, jnp.float32) for t in (1.5 * q, 1.5 * q + 0.5 * noise, v))
  mask = np.ones((batch, length), bool)
  mask[1, 4:] = False
  mask[2, 2] = False
  mask = jnp.asarray(mask)
  cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.float32)
  real = lambda y: jnp.where(mask[:, :, None, None], y, 0.0)
  nystrom = lambda q, k, v, **kw: real(nystrom_attention(
      q, k, v, mask, num_landmarks=length, pinv_iterations=12, **kw))
  loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v) * cotangent)
  drop_key = jax.random.PRNGKey(3)

  def run(q, k, v):
    return (nystrom(q, k, v), real(_dense_attention(q, k, v, mask)),
            jax.grad(loss(nystrom), argnums=(0, 1, 2))(q, k, v),
            jax.grad(loss(lambda q, k, v: real(_dense_attention(q, k, v, mask))),
                     argnums=(0, 1, 2))(q, k, v),
            # Dropout on softmax(Q~ K^T) is the Transformer's attention dropout here: same
            # rng, same weights dropped.
            nystrom(q, k, v, dropout_rng=drop_key, dropout_rate=0.3),
            real(common.softmax_attention(q, k, v, mask, dropout_rng=drop_key,
                                             dropout_rate=0.3)))

  out, ref, grads, ref_grads, dropped, ref_dropped = _run(run, q, k, v)
  logits = np.einsum("blhk,bmhk->bhlm", q, k) / np.sqrt(DIM)
  for b in range(batch):
    real_ids = np.flatnonzero(mask[b])
    for h in range(HEADS):
      a = _softmax_rows(logits[b, h][np.ix_(real_ids, real_ids)])
      assert np.linalg.cond(a) < 30
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dropped, ref_dropped, rtol=1e-5, atol=1e-5)
  assert np.abs(dropped - out).max() > 1e-2  # the dropout really dropped something
  for g, ref_g in zip(grads, ref_grads):
    np.testing.assert_allclose(g, ref_g, rtol=1e-4, atol=1e-4)


def test_module_with_one_landmark_per_token_is_the_transformer():
  rng = np.random.default_rng(2)
  length = 6
  width = 16  # head dimension 8 > length: room for distinct queries
  x = jnp.asarray(rng.normal(size=(2, length, width)) * 2, jnp.float32)
  mask = jnp.asarray(np.arange(length)[None] < np.array([[length], [4]]))
  mixer = NystromAttention(num_heads=HEADS, qkv_dim=width, num_landmarks=length,
                           pinv_iterations=12, conv_kernel=0)
  full = transformer.FullAttention(num_heads=HEADS, qkv_dim=width)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    # Keys = queries: the large diagonal logits keep A well conditioned.
    qkv = params["params"]["QKVProjection_0"]
    qkv["key"] = qkv["query"]
    q = jnp.einsum("bld,dhk->blhk", x, qkv["query"]["kernel"])
    return (params, q, mixer.apply(params, x, mask, deterministic=True),
            full.apply(params, x, mask, deterministic=True))

  params, q, out, ref = _run(run, x)
  assert sorted(params["params"]) == ["OutputProjection_0", "QKVProjection_0"]
  logits = np.einsum("blhk,bmhk->bhlm", q, q) / np.sqrt(width // HEADS)
  for b, n in enumerate([length, 4]):
    assert max(np.linalg.cond(_softmax_rows(logits[b, h, :n, :n])) for h in range(HEADS)) < 30
  real = np.asarray(mask)[..., None]
  # Outputs up to ~8 in size: 1e-5 relative, as in the core test.
  np.testing.assert_allclose(np.where(real, out, 0), np.where(real, ref, 0), rtol=1e-5,
                             atol=1e-5)


def test_absent_landmarks_drop_out_exactly():
  """Trailing padding that empties whole segments equals the truncated input with fewer
  landmarks over the same segments: absent landmarks leave the Nystrom product untouched. A
  hole that empties a middle segment (its landmark absent) is inert too."""
  rng = np.random.default_rng(4)
  x = jnp.asarray(rng.normal(size=(2, 12, DIM)), jnp.float32)
  mask = np.arange(12)[None] < np.array([[6], [12]])
  mask[1, 3:6] = False  # segment [3-5] of row 1 is all padding
  noisy = noise_where_padded(x, mask, rng)
  mask = jnp.asarray(mask)
  mixer = lambda m: NystromAttention(num_heads=HEADS, qkv_dim=DIM, num_landmarks=m,
                                     conv_kernel=3)

  def run(x, noisy):
    params = mixer(4).init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    # Segments of 3 either way: [0-2], [3-5] real, [6-8], [9-11] absent.
    return (mixer(4).apply(params, x, mask, deterministic=True),
            mixer(4).apply(params, noisy, mask, deterministic=True),
            mixer(2).apply(params, x[:1, :6], mask[:1, :6], deterministic=True))

  padded, padded_noisy, truncated = _run(run, x, noisy)
  np.testing.assert_allclose(padded[:1, :6], truncated, rtol=1e-5, atol=1e-6)
  real = np.asarray(mask)[..., None]
  np.testing.assert_allclose(np.where(real, padded_noisy, 0), np.where(real, padded, 0),
                             rtol=1e-5, atol=1e-5)


def test_landmark_factors_are_length_by_landmarks():
  """The L x m and m x L factors, and no array with two axes of the length or of the length
  padded to whole segments (the contract's shape walk sees only the exact length)."""
  length = 65  # with m = 8: segments of 9, padded to 72
  x, mask = jnp.ones((1, length, DIM), jnp.float32), jnp.ones((1, length), bool)
  mixer = NystromAttention(num_heads=HEADS, qkv_dim=DIM, num_landmarks=8, conv_kernel=5,
                           dropout_rate=0.1)
  params = jax.eval_shape(
      lambda x: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)
  assert params["params"]["conv"].shape == (5, HEADS)  # one kernel per head
  jaxpr = jax.make_jaxpr(lambda p, x: mixer.apply(p, x, mask, deterministic=False,
                                                  rngs={"dropout": jax.random.PRNGKey(0)}))(
      params, x).jaxpr
  shapes = list(array_shapes(jaxpr))
  assert (1, HEADS, length, 8) in shapes and (1, HEADS, 8, length) in shapes
  assert not [s for s in shapes if s.count(length) + s.count(72) >= 2]


def test_settings_and_errors():
  assert registry.default_settings("nystromformer") == {
      "num_landmarks": 64, "pinv_iterations": 6, "conv_kernel": 35}
  make = lambda **kw: NystromAttention(num_heads=HEADS, qkv_dim=DIM, **kw)
  with pytest.raises(SettingError, match="num_landmarks=0 .* >= 1"):
    make(num_landmarks=0)
  with pytest.raises(SettingError, match="pinv_iterations=0 .* >= 1"):
    make(pinv_iterations=0)
  with pytest.raises(SettingError, match="0 \\(off\\) or an odd"):
    make(conv_kernel=4)
  with pytest.raises(SettingError, match="conv_kernel=-1 .* >= 0"):
    make(conv_kernel=-1)
  with pytest.raises(SettingError, match="num_landmarks"):
    models.build(dict(name="nystromformer", attention=dict(landmarks=4)), vocab_size=5,
                 num_classes=2, max_len=8, pair=False)
