"""FNet (Lee-Thorp et al. 2022): the real part of a 2-D DFT of the zero-padded input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.fnet  # noqa: F401  (registers "fnet")
from lra.models import registry
from lra.models.mixers.fnet import FourierMixer
from lra.rules import SettingError
from tests.helpers import padded_inputs, run_once as _run

LENGTH, DIM = 7, 6


def _dft_matrix(n):
  """F[j, k] = exp(-2 pi i j k / n), written out in float64 (no FFT involved)."""
  j = np.arange(n)
  return np.exp(-2j * np.pi * np.outer(j, j) / n)


def _reference(x, mask):
  """Re(F_L x F_D) per example, with padded inputs zeroed first."""
  x = np.where(np.asarray(mask)[..., None], np.asarray(x, np.float64), 0.0)
  return np.einsum("ml,bld,de->bme", _dft_matrix(x.shape[1]), x, _dft_matrix(x.shape[2])).real


def test_mixing_is_the_real_part_of_the_2d_dft():
  """Every position (padded ones too) is the DFT of the input with padded positions zeroed;
  the gradient is the same transform of the cotangent, zero at padded inputs (the map is
  linear and F symmetric); and row 1 truncated is the DFT at its own length, which differs
  from its padded output (why the contract exempts FNet from truncation)."""
  x, mask, rng = padded_inputs(LENGTH, DIM)
  mask = jnp.asarray(mask)
  short = 4  # row 1's real tokens
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixers = [FourierMixer(use_fft=fft, normalize=norm)
            for fft in (True, False) for norm in (False, True)]
  x_bf16 = x.astype(jnp.bfloat16)

  def run(x, x_bf16):
    outs = [m.apply({}, x, mask, deterministic=True) for m in mixers]
    grads = jax.vjp(lambda x: mixers[0].apply({}, x, mask, deterministic=True), x)[1](
        cotangent)[0]
    truncated = mixers[0].apply({}, x[1:2, :short], mask[1:2, :short], deterministic=True)
    return outs, mixers[0].apply({}, x_bf16, mask, deterministic=True), grads, truncated

  outs, out_bf16, grads, truncated = _run(run, x, x_bf16)
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
  grad_ref = np.where(np.asarray(mask)[..., None], _reference(cotangent, np.ones(mask.shape)), 0)
  np.testing.assert_allclose(grads, grad_ref, rtol=0, atol=1e-5 * np.abs(grad_ref).max())
  truncated_ref = _reference(x[1:2, :short], mask[1:2, :short])
  np.testing.assert_allclose(truncated, truncated_ref, rtol=0,
                             atol=1e-5 * np.abs(truncated_ref).max())
  assert not np.allclose(truncated[0], outs[0][1, :short], atol=1e-2)


def test_no_parameters():
  x, mask = jnp.ones((2, LENGTH, DIM), jnp.float32), jnp.ones((2, LENGTH), bool)
  for use_fft in (True, False):
    variables = jax.eval_shape(
        lambda x: FourierMixer(use_fft=use_fft).init(jax.random.PRNGKey(0), x, mask,
                                                     deterministic=True), x)
    assert not jax.tree_util.tree_leaves(variables)


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
