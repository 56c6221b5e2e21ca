"""Linformer (Wang et al. 2020): identity projections give full attention; padding is inert."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
import models.linformer  # noqa: F401  (registers "linformer")
from models import registry, transformer
from models.linformer import LinformerAttention
from models.settings import SettingError
from tests.jaxpr_shapes import array_shapes
from tests.mixer_checks import build_and_apply, run_once as _run

HEADS, DIM, LENGTH = 2, 8, 6


def _inputs(seed=0, batch=3):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, LENGTH, DIM)), jnp.float32)
  # One full row, one with trailing padding, one with a hole; each has a real token.
  mask = np.ones((batch, LENGTH), bool)
  mask[1, 4:] = False
  mask[2, 2] = False
  return x, jnp.asarray(mask), rng


def _mixer(**kw):
  return LinformerAttention(num_heads=HEADS, qkv_dim=DIM, **kw)


def test_identity_projections_are_full_attention():
  x, _, _ = _inputs()
  mask = jnp.ones(x.shape[:2], bool)  # padded keys would be zero vectors here, not dropped
  eye = jnp.eye(LENGTH, dtype=jnp.float32)
  full = transformer.FullAttention(num_heads=HEADS, qkv_dim=DIM)

  mixers = [_mixer(k=LENGTH, sharing=sharing) for sharing in ("none", "kv")]
  init = lambda m: m.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
  assert [sorted(jax.eval_shape(lambda: init(m))) for m in mixers] == [
      ["E", "F", "OutputProjection_0", "QKVProjection_0"],
      ["E", "OutputProjection_0", "QKVProjection_0"]]  # "kv": one matrix serves both

  def run(x):
    outs = []
    for mixer in mixers:
      p = dict(init(mixer))
      p.update({n: eye for n in ("E", "F") if n in p})
      outs.append((mixer.apply({"params": p}, x, mask, deterministic=True),
                   full.apply({"params": p}, x, mask, deterministic=True)))
    return outs

  for out, full_out in _run(run, x):
    np.testing.assert_allclose(out, full_out, rtol=1e-5, atol=1e-5)


def test_padding_is_inert_and_gradients_are_finite():
  x, mask, rng = _inputs(seed=1)
  mixer = _mixer(k=4)
  noise = jnp.where(mask[..., None], x, jnp.asarray(rng.normal(size=x.shape) * 100, x.dtype))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  real = lambda y: jnp.where(mask[..., None], y, 0.0)
  short = 4  # row 1's real tokens; trailing padding and truncation must agree

  def run(x, noise):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    out, pullback = jax.vjp(apply, params, x)
    truncated = mixer.apply(params, x[1:2, :short], mask[1:2, :short], deterministic=True)
    return out, apply(params, noise), pullback(cotangent), truncated

  out, out_noise, grads, truncated = _run(run, x, noise)
  assert out.shape == x.shape and np.all(np.isfinite(out))
  np.testing.assert_allclose(out_noise, out, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(truncated[0], out[1, :short], rtol=1e-5, atol=1e-5)
  leaves = jax.tree_util.tree_leaves(grads)
  assert all(np.all(np.isfinite(g)) for g in leaves)
  # The projections get gradient only through real positions: padded columns of row 1 are
  # real in row 0, so just check E and F learn at all.
  p_grads = grads[0]["params"]
  assert np.any(p_grads["E"] != 0) and np.any(p_grads["F"] != 0)


def test_settings_and_errors():
  assert registry.default_settings("linformer") == {"k": 16, "sharing": "none"}
  with pytest.raises(ValueError, match="needs the encoder's shared"):
    x, mask, _ = _inputs()
    jax.eval_shape(lambda: _mixer(sharing="layer").init(jax.random.PRNGKey(0), x, mask,
                                                        deterministic=True))
  with pytest.raises(SettingError, match="'none', 'kv', 'layer'"):
    _mixer(sharing="heads")
  with pytest.raises(SettingError, match="k=0 is not valid: an integer >= 1"):
    _mixer(k=0)
  x, mask, _ = _inputs()
  mixer = _mixer(k=2)
  params = jax.eval_shape(
      lambda x: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)
  assert params["params"]["E"].shape == (2, LENGTH)
  longer = jnp.ones((1, LENGTH + 1, DIM), jnp.float32)
  with pytest.raises(ValueError, match="exceeds"):
    jax.eval_shape(lambda p: mixer.apply(p, longer, jnp.ones((1, LENGTH + 1), bool),
                                         deterministic=True), params)


def test_build_init_apply():
  model = models.build(
      dict(name="linformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32, num_layers=2,
           dropout_rate=0.1, attention_dropout_rate=0.1, attention=dict(k=4)),
      vocab_size=20, num_classes=5, max_len=24, pair=False)
  params = build_and_apply(model, vocab_size=20, length=24, num_classes=5)
  mixer_params = params["params"]["encoder"]["block_0"]["mixer"]
  assert mixer_params["E"].shape == (4, 25)  # max_len + the CLS position


def test_layer_sharing_is_one_matrix_for_every_layer():
  """sharing="layer" equals per-layer "kv" sharing with every layer's E set to the one E."""
  settings = lambda sharing: dict(
      name="linformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32, num_layers=3,
      dropout_rate=0.0, attention_dropout_rate=0.0, attention=dict(k=4, sharing=sharing))
  build = lambda sharing: models.build(settings(sharing), vocab_size=20, num_classes=5,
                                       max_len=12, pair=False)
  shared, per_layer = build("layer"), build("kv")
  tokens = np.random.default_rng(0).integers(1, 20, size=(2, 12))
  tokens[1, 7:] = 0
  tokens = jnp.asarray(tokens)

  def run(tokens):
    params = shared.init(jax.random.PRNGKey(0), tokens)
    enc = params["params"]["encoder"]
    # The reference: the same weights, the one E copied into each layer's own slot.
    ref = jax.tree_util.tree_map(lambda a: a, params)
    ref_enc = ref["params"]["encoder"]
    del ref_enc["shared_projection"]
    for i in range(3):
      ref_enc[f"block_{i}"]["mixer"]["E"] = enc["shared_projection"]["E"]
    loss = lambda p, model: jnp.sum(model.apply(p, tokens) ** 2)
    grads = jax.grad(loss)(params, shared)
    ref_grads = jax.grad(loss)(ref, per_layer)
    return params, shared.apply(params, tokens), per_layer.apply(ref, tokens), grads, ref_grads

  params, out, ref_out, grads, ref_grads = _run(run, tokens)
  enc = params["params"]["encoder"]
  assert enc["shared_projection"]["E"].shape == (4, 13)  # max_len + the CLS position
  assert all("E" not in enc[f"block_{i}"]["mixer"] and "F" not in enc[f"block_{i}"]["mixer"]
             for i in range(3))
  np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)
  # The shared E's gradient is the sum of what each layer's copy would get.
  layer_sum = sum(ref_grads["params"]["encoder"][f"block_{i}"]["mixer"]["E"] for i in range(3))
  np.testing.assert_allclose(grads["params"]["encoder"]["shared_projection"]["E"], layer_sum,
                             rtol=1e-4, atol=1e-6)


def test_no_length_by_length_array():
  length = 64
  x, mask = jnp.ones((1, length, DIM), jnp.float32), jnp.ones((1, length), bool)
  mixer = _mixer(k=4)
  params = jax.eval_shape(
      lambda x: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)
  jaxpr = jax.make_jaxpr(lambda p, x: mixer.apply(p, x, mask, deterministic=True))(
      params, x).jaxpr
  shapes = list(array_shapes(jaxpr))
  assert shapes and not [s for s in shapes if s.count(length) >= 2]
