"""RetNet (Sun et al. 2023): the layer against a reference written from the paper's parallel
form (q k^T * D) v with the decay matrix D, rotary positions, per-head RMS norm and swish gate
(outputs and gradients of parameters and input), causal and bidirectional (the average of the
forward run and the run over the reversed sequence); chunked equals recurrent; fla's
initialisation; settings and one-line errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.retnet import RetNet  # (registers "retnet")
from lra.rules import SettingError
from tests import helpers

WIDTH, HEADS, LENGTH = 8, 2, 13  # K = 8 / 2 = 4, V = 16 / 2 = 8 per head (expand 1 and 2)


def _lead(a, ndim):
  """a with leading unit axes up to `ndim` (explicit broadcasting)."""
  a = jnp.asarray(a)
  return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def _rotate(x_BxLxHxK):
  """RoFormer: channel pairs (i, i + K/2) turned by position * 10000^(-2i/K)."""
  length, half = x_BxLxHxK.shape[1], x_BxLxHxK.shape[-1] // 2
  theta = 10000.0 ** (-2.0 * np.arange(half) / (2 * half))
  angle = np.arange(length)[:, None] * theta[None, :]
  cos, sin = (_lead(jnp.asarray(f(angle), jnp.float32)[:, None, :], 4) for f in (np.cos, np.sin))
  a, b = x_BxLxHxK[..., :half], x_BxLxHxK[..., half:]
  return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def _retention(q, k, v, mask):
  """The paper's parallel form, head by head: (q k^T * D) v with D[n, m] = gamma_h^(n - m)
  for n >= m (gamma_h = 1 - 2^(-5 - h)), padded keys left out."""
  heads, length = q.shape[2], q.shape[1]
  n, m = np.arange(length)[:, None], np.arange(length)[None, :]
  out = []
  for h in range(heads):
    gamma = 1.0 - 2.0 ** (-5 - h)
    decay_LxL = np.where(n >= m, gamma ** np.maximum(n - m, 0), 0.0)
    scores = jnp.einsum("bnk,bmk->bnm", q[:, :, h], k[:, :, h])
    scores = scores * jnp.asarray(decay_LxL, jnp.float32)[None] * mask[:, None, :]
    out.append(jnp.einsum("bnm,bmv->bnv", scores, v[:, :, h]))
  return jnp.stack(out, axis=2)


def _reference(p, x, mask, bidirectional=False):
  """The layer from its equations; bidirectional: the mean of the forward retention and the
  retention of the reversed sequence (reversed back), before the norm."""
  x = jnp.where(mask[..., None], x, 0.0)
  proj = lambda name: jnp.einsum("bld,dhk->blhk", x, p[name]["kernel"])
  key = p["q_proj"]["kernel"].shape[-1]
  q, k = _rotate(proj("q_proj")) / np.sqrt(key), _rotate(proj("k_proj"))
  v, g = proj("v_proj"), proj("g_proj")
  o = _retention(q, k, v, mask)
  if bidirectional:
    flip = lambda a: a[:, ::-1]
    o = 0.5 * (o + flip(_retention(flip(q), flip(k), flip(v), flip(mask))))
  o = o / jnp.sqrt(jnp.mean(o ** 2, axis=-1, keepdims=True) + 1e-5)
  o = o * _lead(p["output"]["norm"]["scale"], 4) * g * jax.nn.sigmoid(g)
  return jnp.einsum("blhv,hvd->bld", o, p["output"]["o_proj"]["kernel"]) * mask[..., None]


def _inputs(seed):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(2, LENGTH, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([LENGTH, 6], LENGTH)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32) * mask[..., None]
  return x, mask, cotangent


def _params(mixer, mask):
  """fla's N(0, 0.02) init plus N(0, 0.3) noise: outputs of order 1, a non-trivial norm."""
  return lambda x: helpers.perturb(mixer.init(jax.random.PRNGKey(0), x, jnp.asarray(mask),
                                              deterministic=True), scale=0.3)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_layer_matches_the_parallel_form(bidirectional):
  """Outputs and gradients (parameters and input) of the chunked layer equal the paper's
  parallel form; a row with trailing padding included."""
  x, mask, cotangent = _inputs(1)
  mixer = RetNet(num_heads=HEADS, chunk_size=4, bidirectional=bidirectional)
  reference = lambda p, x: _reference(p["params"], x, jnp.asarray(mask), bidirectional)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, _params(mixer, mask), reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
  assert np.abs(np.asarray(ref)).max() > 0.1
  assert np.abs(np.asarray(ref_grads[1])).max() > 0.01  # input gradients that matter


def test_chunked_equals_recurrent():
  """Chunks of 4 over 13 positions (no multiple), both directions: the same outputs and the
  same gradients as the position-by-position form."""
  x, mask, cotangent = _inputs(2)
  mixers = [RetNet(num_heads=HEADS, form=form, chunk_size=4, bidirectional=True)
            for form in ("chunked", "recurrent")]
  make = _params(mixers[0], mask)
  recurrent = lambda p, x: mixers[1].apply(p, x, jnp.asarray(mask), deterministic=True)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixers[0], make, recurrent, x, mask, cotangent)
  np.testing.assert_allclose(out, np.asarray(ref) * mask[..., None], rtol=1e-5, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_fla_initialisation_and_state_size():
  width = 64
  mixer = RetNet(num_heads=4)
  p = jax.jit(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 3, width)),
                                 jnp.ones((1, 3), bool), deterministic=True))()["params"]
  shapes = {k: v["kernel"].shape for k, v in p.items() if "kernel" in v}
  assert shapes == {"q_proj": (64, 4, 16), "k_proj": (64, 4, 16), "v_proj": (64, 4, 32),
                    "g_proj": (64, 4, 32)}
  for kernel in [v["kernel"] for v in p.values() if "kernel" in v] + \
      [p["output"]["o_proj"]["kernel"]]:
    assert abs(np.std(kernel) - 0.02) < 0.002 and abs(np.mean(kernel)) < 0.002
  np.testing.assert_array_equal(p["output"]["norm"]["scale"], np.ones(32))
  assert mixer.carried_state(width, 64) == 4 * 16 * 32
  assert RetNet(num_heads=4, bidirectional=True).carried_state(width, 64) == 2 * 4 * 16 * 32


def test_settings_and_errors():
  assert registry.default_settings("retnet") == dict(
      expand_k=1.0, expand_v=2.0, form="chunked", chunk_size=64, bidirectional=False,
      combine="mean")
  for bad, match in ((dict(expand_k=0.0), "expand_k=0.0 .* > 0"),
                     (dict(expand_v=-1.0), "expand_v=-1.0 .* > 0"),
                     (dict(form="fast"), "form='fast'"),
                     (dict(chunk_size=0), "chunk_size=0"),
                     (dict(bidirectional=1), "True or False"),
                     (dict(num_heads=0), "num_heads=0"),
                     (dict(dropout_rate=0.1), "attention_dropout_rate")):
    with pytest.raises(SettingError, match=match) as error:
      RetNet(**bad)
    assert "\n" not in str(error.value)
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  for bad, match in ((dict(expand_k=0.75), "expand_k=0.75 .* int\\(width 8 \\* expand_k\\) = 6 "
                                           "channels must be a positive multiple of "
                                           "config.model.num_heads=4"),
                     (dict(expand_v=0.25), "expand_v=0.25 .* = 2 channels"),
                     (dict(expand_k=0.5), "expand_k=0.5 .* even key width .* = 1\\)")):
    mixer = RetNet(**{"num_heads": 4, **bad})
    with pytest.raises(SettingError, match=match) as error:
      mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    assert "\n" not in str(error.value)
