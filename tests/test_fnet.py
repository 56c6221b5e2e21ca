"""FNet (Lee-Thorp et al. 2022): the real part of a 2-D DFT; padded content is inert."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
import models.fnet  # noqa: F401  (registers "fnet")
from models import registry
from models.fnet import FourierMixer
from models.settings import SettingError
from tests.jaxpr_shapes import array_shapes
from tests.mixer_checks import build_and_apply, run_once as _run

LENGTH, DIM = 7, 6


def _dft_matrix(n):
  """F[j, k] = exp(-2 pi i j k / n), written out in float64 (no FFT involved)."""
  j = np.arange(n)
  return np.exp(-2j * np.pi * np.outer(j, j) / n)


def _reference(x, mask):
  """Re(F_L x F_D) per example, with padded inputs zeroed first."""
  x = np.where(np.asarray(mask)[..., None], np.asarray(x, np.float64), 0.0)
  return np.einsum("ml,bld,de->bme", _dft_matrix(x.shape[1]), x, _dft_matrix(x.shape[2])).real


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(3, LENGTH, DIM)), jnp.float32)
  mask = np.ones((3, LENGTH), bool)
  mask[1, 4:] = False  # trailing padding
  mask[2, 2] = False  # a hole
  return x, jnp.asarray(mask), rng


def test_mixing_is_the_real_part_of_the_2d_dft():
  x, mask, _ = _inputs()
  mixers = [FourierMixer(use_fft=fft, normalize=norm)
            for fft in (True, False) for norm in (False, True)]
  x_bf16 = x.astype(jnp.bfloat16)

  def run(x, x_bf16):
    outs = [m.apply({}, x, mask, deterministic=True) for m in mixers]
    return outs, mixers[0].apply({}, x_bf16, mask, deterministic=True)

  outs, out_bf16 = _run(run, x, x_bf16)
  ref = _reference(x, mask)
  scale = np.abs(ref).max()  # sums of L * D terms: compare relative to the output's size
  for out, (fft, norm) in zip(outs, [(f, n) for f in (True, False) for n in (False, True)]):
    expected = ref / np.sqrt(LENGTH * DIM) if norm else ref
    factor = 1 / np.sqrt(LENGTH * DIM) if norm else 1.0
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * scale * factor,
                               err_msg=f"use_fft={fft} normalize={norm}")
  # bfloat16 in, bfloat16 out, but computed in float32: the float32 result of the same
  # (rounded) inputs, rounded once.
  ref_bf16 = _reference(np.asarray(x_bf16, np.float32), mask)
  assert out_bf16.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out_bf16, np.float32), ref_bf16, rtol=1e-2,
                             atol=1e-5 * scale)


def test_padding_content_is_inert_and_gradients_are_finite():
  x, mask, rng = _inputs(seed=1)
  noise = jnp.where(mask[..., None], x, jnp.asarray(rng.normal(size=x.shape) * 100, x.dtype))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = FourierMixer()
  short = 4  # row 1's real tokens

  def run(x, noise):
    apply = lambda x: mixer.apply({}, x, mask, deterministic=True)
    out, pullback = jax.vjp(apply, x)
    truncated = mixer.apply({}, x[1:2, :short], mask[1:2, :short], deterministic=True)
    return out, apply(noise), pullback(cotangent)[0], truncated

  out, out_noise, grads, truncated = _run(run, x, noise)
  # Zeroed before the transform: no output, real or padded, sees the padded content.
  np.testing.assert_allclose(out_noise, out, rtol=1e-5, atol=1e-4)
  assert np.all(np.isfinite(grads))
  assert np.all(np.asarray(grads)[~np.asarray(mask)] == 0)
  assert np.all(np.asarray(grads)[np.asarray(mask)] != 0)
  # The documented limit: the padded LENGTH still matters (the DFT runs over all L positions).
  assert not np.allclose(truncated[0], out[1, :short], atol=1e-2)


def test_no_parameters_and_no_length_by_length_array_with_fft():
  length = 64
  x, mask = jnp.ones((2, length, DIM), jnp.float32), jnp.ones((2, length), bool)
  for use_fft in (True, False):
    variables = jax.eval_shape(
        lambda x: FourierMixer(use_fft=use_fft).init(jax.random.PRNGKey(0), x, mask,
                                                     deterministic=True), x)
    assert not jax.tree_util.tree_leaves(variables)
  jaxpr = jax.make_jaxpr(lambda x: FourierMixer().apply({}, x, mask, deterministic=True))(
      x).jaxpr
  shapes = list(array_shapes(jaxpr))
  assert shapes and not [s for s in shapes if s.count(length) >= 2]


def test_settings_and_errors():
  assert registry.default_settings("fnet") == {"use_fft": True, "normalize": False}
  assert "dropout_rate" not in registry.user_settings("fnet")
  with pytest.raises(SettingError, match="use_fft='yes' is not valid: True or False"):
    FourierMixer(use_fft="yes")
  with pytest.raises(SettingError, match="normalize=1 is not valid: True or False"):
    FourierMixer(normalize=1)
  with pytest.raises(SettingError, match="use_fft"):
    models.build(dict(name="fnet", attention=dict(fft=True)), vocab_size=5, num_classes=2,
                 max_len=8, pair=False)


def test_build_init_apply():
  model = models.build(
      dict(name="fnet", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32, num_layers=2,
           dropout_rate=0.1, attention_dropout_rate=0.1, attention=dict(normalize=True)),
      vocab_size=20, num_classes=5, max_len=24, pair=False)
  params = build_and_apply(model, vocab_size=20, length=24, num_classes=5)
  # The blocks hold LayerNorms and the MLP only: the mixer has no parameters.
  assert "mixer" not in params["params"]["encoder"]["block_0"]
