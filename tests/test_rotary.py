"""Rotary positions (positions="rotary", RoFormer): the rotation against a complex-number
reference, its relative property, the Transformer against a dense reference with rotated
queries and keys, every attention mixer taking it (padding still invisible), and a one-line
refusal for every mixer without queries and keys."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.common import ROTARY_BASE, rotary_embedding
from lra.rules import SettingError
from tests.helpers import (compile_once, masked_softmax_attention, noise_where_padded,
                           padded_inputs, tiny_model)

# The mixers with queries and keys (every HeadsMixer but Transformer-XL, whose positions are
# relative already); the others refuse the setting.
ROTARY = ["bigbird", "linear_transformer", "linformer", "local", "longformer", "nystromformer",
          "performer", "reformer", "sinkhorn", "sparse_transformer", "synthesizer",
          "transformer"]


def _complex_reference(x_BxLxHxK):
  """Pairs (x_i, x_{i+K/2}) as the complex number x_i + j x_{i+K/2}, times e^{j m theta_i}."""
  x = np.asarray(x_BxLxHxK, np.float64)
  half = x.shape[-1] // 2
  theta = ROTARY_BASE ** (-np.arange(half) / half)
  z = (x[..., :half] + 1j * x[..., half:]) * np.exp(
      1j * np.arange(x.shape[1])[None, :, None, None] * theta)
  return np.concatenate([z.real, z.imag], axis=-1)


def test_the_rotation_is_roformers():
  x = np.random.default_rng(0).normal(size=(2, 9, 3, 8)).astype(np.float32)
  np.testing.assert_allclose(rotary_embedding(jnp.asarray(x)), _complex_reference(x),
                             rtol=1e-5, atol=1e-5)


def test_a_rotated_dot_product_depends_on_the_offset_only():
  rng = np.random.default_rng(1)
  q, k = (jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32) for _ in range(2))
  dot = lambda m, n: float(jnp.sum(rotary_embedding(q, jnp.asarray([m])) *
                                   rotary_embedding(k, jnp.asarray([n]))))
  assert dot(7, 3) == pytest.approx(dot(104, 100), rel=1e-4, abs=1e-4)
  assert dot(7, 3) == pytest.approx(dot(4, 0), rel=1e-4, abs=1e-4)
  assert abs(dot(7, 3) - dot(3, 7)) > 1e-3  # the sign of the offset matters


def _mixer(name, rotary: bool, length: int):
  model = tiny_model(name, positions="rotary" if rotary else "none")
  settings = dict(model["attention"])
  return registry.make(name, settings, num_heads=model["num_heads"], qkv_dim=model["qkv_dim"],
                       dtype="float32", layer_index=0, num_layers=2, rotary=rotary,
                       length=length)


def test_the_transformer_attends_with_rotated_queries_and_keys():
  x, mask, _ = padded_inputs(11, 16)
  mixer = _mixer("transformer", True, 11)
  params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  got = mixer.apply(params, x, mask, deterministic=True)
  p = params["params"]
  project = lambda n: jnp.einsum("bld,dhk->blhk", x, p["QKVProjection_0"][n]["kernel"])
  q, k = (jnp.asarray(_complex_reference(project(n)), jnp.float32) for n in ("query", "key"))
  heads = masked_softmax_attention(q, k, project("value"), jnp.asarray(mask)[:, None, None, :])
  out = p["OutputProjection_0"]["out"]
  want = jnp.einsum("blhk,hkd->bld", heads, out["kernel"]) + out["bias"][None, None]
  real = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=2e-4,
                             atol=2e-4)


@pytest.mark.parametrize("name", ROTARY)
def test_every_attention_mixer_rotates_and_padding_stays_invisible(name):
  """The same parameters with and without rotation give other outputs (it is applied), and
  noise at padded positions changes no real output."""
  x, mask, rng = padded_inputs(12, 16)
  plain, rotated = _mixer(name, False, 12), _mixer(name, True, 12)
  params = plain.init({"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}, x,
                      mask, deterministic=True)
  run = lambda m, inputs: m.apply(params, inputs, mask, deterministic=True)
  a = compile_once(lambda inputs: run(plain, inputs), x)(x)
  rotate = compile_once(lambda inputs: run(rotated, inputs), x)
  b, noisy = rotate(x), rotate(noise_where_padded(x, mask, rng))
  real = np.asarray(mask)
  assert np.all(np.isfinite(np.asarray(b)))
  assert np.max(np.abs(np.asarray(a) - np.asarray(b))[real]) > 1e-4, "no rotation applied"
  np.testing.assert_allclose(np.asarray(noisy)[real], np.asarray(b)[real], rtol=1e-4,
                             atol=1e-4)


@pytest.mark.parametrize("name, attention", [
    *[(n, {}) for n in registry.names() if n not in ROTARY and registry.in_repository(n)],
    ("synthesizer", {"mix_dot_product": False})])
def test_a_mixer_without_queries_and_keys_refuses_rotary_in_one_line(name, attention):
  model = tiny_model(name, positions="rotary", attention=attention)
  with pytest.raises(SettingError, match=r"config.model.positions='rotary' is not valid"):
    models.build(model, vocab_size=9, num_classes=2, max_len=12, pair=False)


def test_an_odd_head_width_is_refused():
  model = tiny_model("transformer", positions="rotary", num_heads=2, qkv_dim=6)
  with pytest.raises(SettingError, match=r"even head width \(qkv_dim / num_heads = 3\)"):
    models.build(model, vocab_size=9, num_classes=2, max_len=12, pair=False)
