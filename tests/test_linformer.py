"""Linformer (Wang et al. 2020): identity projections give full attention; layer sharing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.linformer  # noqa: F401  (registers "linformer")
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.mixers.linformer import LinformerAttention
from lra.rules import SettingError
from tests.helpers import padded_inputs, run_once as _run

HEADS, DIM, LENGTH = 2, 8, 6


def _inputs(seed=0):
  x, mask, rng = padded_inputs(LENGTH, DIM, seed)
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
  assert np.any(layer_sum != 0)  # E learns (through the real positions)
