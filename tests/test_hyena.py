"""Hyena (Poli et al. 2023; HazyResearch/zoology's mixer): the FFT long convolution against
direct sums (causal and two-sided), the layer against an independent reference written from
the operator's equations (direct convolution sums over each row's real tokens), outputs and the
gradients of every parameter and of the input, causal and two-sided, which also checks
causality and padding = truncation; the contract for the causal form (slow; the default is two-sided), Zoology's
initialisation and positional table, the settings, the length check and the carried state."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models, testing
from lra.models import registry
from lra.models.mixers.hyena import Hyena
from lra.models.ops.convolution import fft_convolve
from lra.rules import SettingError
from lra.testing import cheap_compiles
from tests import helpers
from tests.helpers import run_once

WIDTH, LENGTH, L_MAX = 4, 7, 16


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


# --- the long convolution ---

def _direct_convolution(u, k, k_rev=None):
  """y[t] = sum_{s<=t} k[t-s] u[s] (+ sum_{s>t} k_rev[s-t-1] u[s]): the sums, in float64."""
  batch, length, width = u.shape
  y = np.zeros((batch, length, width))
  for t in range(length):
    for s in range(length):
      if s <= t:
        y[:, t] += k[t - s] * u[:, s]
      elif k_rev is not None:
        y[:, t] += k_rev[s - t - 1] * u[:, s]
  return y


@pytest.mark.parametrize("causal", [True, False])
def test_fft_convolution_equals_direct_sums(causal):
  rng = np.random.default_rng(0)
  u, k, k_rev = rng.normal(size=(2, LENGTH, WIDTH)), *rng.normal(size=(2, LENGTH, WIDTH))
  args = [jnp.asarray(a, jnp.float32) for a in (u, k)] + ([] if causal else [jnp.asarray(
      k_rev, jnp.float32)])
  got = run_once(fft_convolve, *args)
  expected = _direct_convolution(u, k, None if causal else k_rev)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# --- the layer against a reference from the equations ---

def _decay(length, width, l_max):
  """exp(-t |delta_d|), t = n / (l_max - 1), delta from ln(1e-2) / 1.5 to ln(1e-2) / 0.3."""
  delta = jnp.linspace(np.log(1e-2) / 1.5, np.log(1e-2) / 0.3, width)
  return jnp.exp(-(jnp.arange(length) / (l_max - 1))[:, None] * jnp.abs(delta)[None, :])


def _ffn(p, z, freq):
  """Dense, sin(freq .), ..., Dense without bias, written out."""
  layers = sorted(k for k in p if k.startswith("dense_"))
  h = z
  for name in layers:
    h = jnp.sin(freq[None, :] * (h @ p[name]["kernel"] + p[name]["bias"][None, :]))
  return h @ p["out"]["kernel"]


def _row(p, x, causal, modulate):
  """The operator on one row of real tokens (n x D), direct sums throughout."""
  n, width = x.shape
  u = x @ p["in_proj"]["kernel"] + p["in_proj"]["bias"][None, :]
  w, kernel = p["short_conv_weight"], p["short_conv_weight"].shape[0]
  uc = jnp.stack([p["short_conv_bias"] + sum(w[j] * u[t - (kernel - 1) + j] for j in range(
      kernel) if t - (kernel - 1) + j >= 0) for t in range(n)])
  x1, x2, v = uc[:, :width], uc[:, width:2 * width], uc[:, 2 * width:]
  xv = x1 * v
  z, freq = p["pos_emb"][:n], p["sin_freq"]
  decay = _decay(n, width, p["pos_emb"].shape[0]) if modulate else 1.0
  h = _ffn(p["filter"], z, freq) * decay
  offset = np.arange(n)[:, None] - np.arange(n)[None, :]  # t - s
  taps = h[np.clip(offset, 0, None)]  # n x n x D
  if causal:
    taps = jnp.where((offset >= 0)[..., None], taps, 0.0)
  else:
    k_rev = _ffn(p["filter_rev"], z, freq) * decay
    taps = jnp.where((offset >= 0)[..., None], taps, k_rev[np.clip(-offset - 1, 0, None)])
  y = jnp.einsum("tsd,sd->td", taps, xv) + p["skip"][None, :] * xv
  return (x2 * y) @ p["out_proj"]["kernel"] + p["out_proj"]["bias"][None, :]


def _reference(variables, x, mask, causal=True, modulate=True):
  """Each row cut to its real tokens, the operator applied, zeros after."""
  p, length = variables["params"], x.shape[1]
  rows = []
  for b, real in enumerate(np.asarray(mask).sum(1)):
    y = _row(p, x[b, :real], causal, modulate)
    rows.append(jnp.concatenate([y, jnp.zeros((length - real, y.shape[1]))]))
  return jnp.stack(rows)


# Another positional embedding width and filter order (the same code at other sizes) `-m slow`.
SETTINGS = [dict(causal=True),
            pytest.param(dict(emb_dim=5, short_filter_order=2), marks=pytest.mark.slow),
            pytest.param(dict(causal=True, modulate=False, num_inner_mlps=0),
                         marks=pytest.mark.slow)]


@pytest.mark.parametrize("settings", SETTINGS)
def test_layer_matches_the_reference(settings):
  """Outputs and the gradients of every parameter and of the input on rows with trailing
  padding (LRA's), the reference run on each row cut to its real tokens: padding =
  truncation, padded content ignored (x is random there), and causality, as the reference
  has it. Parameters perturbed so that the filter is of order 1."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(3, LENGTH, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([LENGTH, 4, 1], LENGTH)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  mixer = Hyena(l_max=L_MAX, filter_order=8, **settings)
  make = lambda x: helpers.perturb(mixer.init(jax.random.PRNGKey(2), x, jnp.asarray(mask),
                                              deterministic=True), seed=3, scale=0.5)
  reference = lambda v, x: _reference(v, x, mask, settings.get("causal", False),
                                      settings.get("modulate", True))
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, make, reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(out)).max() > 0.1
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(r).max()))
  x_grad = np.asarray(grads[1])
  assert np.abs(x_grad[mask]).max() > 1e-2 and not np.any(x_grad[~mask])
  filter_grad = np.asarray(grads[0]["params"]["filter"]["out"]["kernel"])
  assert np.abs(filter_grad).max() > 1e-2  # the long filter shapes the output
  if not settings.get("causal", False):  # and later positions, through the second filter
    assert np.abs(np.asarray(grads[0]["params"]["filter_rev"]["out"]["kernel"])).max() > 1e-2


@pytest.mark.slow
def test_causal_form_meets_the_contract():
  """The whole contract for causal=True (tests/test_mixer_contract.py runs the default,
  two-sided); its padding = truncation is test_layer_matches_the_reference's too."""
  testing.check_mixer("hyena", dict(helpers.tiny_settings("hyena"), causal=True),
                      label="hyena-causal")


# --- Zoology's initialisation, the settings, the length and the state ---

def test_zoology_initialisation():
  width, l_max, layers = 128, 1000, 4
  x, mask = jnp.zeros((1, 3, width)), jnp.ones((1, 3), bool)
  mixer = Hyena(l_max=l_max, emb_dim=5, num_layers=layers, causal=True)
  p = run_once(lambda: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True))["params"]
  # The table: [t, cos(f w), -sin(f w)], t = n / (l_max - 1), w = 2 pi n / l_max, f = (1e-4, 1).
  n = np.array([0, 1, 250, 999])
  w = 2 * np.pi * n / l_max
  expected = np.stack([n / 999, np.cos(1e-4 * w), np.cos(w), -np.sin(1e-4 * w), -np.sin(w)], 1)
  np.testing.assert_allclose(p["pos_emb"][n], expected, atol=1e-6)
  assert p["pos_emb"].shape == (l_max, 5)
  np.testing.assert_array_equal(p["sin_freq"], 1.0)
  for kernel, std in ((p["in_proj"]["kernel"], 0.02), (p["filter"]["dense_1"]["kernel"], 0.02),
                      (p["filter"]["out"]["kernel"], 0.02),
                      (p["out_proj"]["kernel"], 0.02 / np.sqrt(2 * layers))):
    assert abs(np.std(kernel) / std - 1) < 0.1
  for bias in (p["in_proj"]["bias"], p["out_proj"]["bias"], p["filter"]["dense_0"]["bias"]):
    np.testing.assert_array_equal(bias, 0.0)
  assert "bias" not in p["filter"]["out"] and "filter_rev" not in p
  bound = 3 ** -0.5  # PyTorch's Conv1d: +-1/sqrt(K), K = 3
  for conv in (p["short_conv_weight"], p["short_conv_bias"]):
    assert np.abs(conv).max() <= bound and np.abs(conv).max() > 0.9 * bound
  assert abs(np.std(p["skip"]) - 1) < 0.2


def test_settings_length_and_carried_state():
  assert registry.default_settings("hyena") == dict(
      l_max=1024, filter_order=64, emb_dim=3, num_inner_mlps=2, filter_freq=1.0,
      short_filter_order=3, modulate=True, causal=False)
  for bad, match in ((dict(l_max=1), "l_max=1 .* >= 2"), (dict(emb_dim=4), "emb_dim=4 .* odd"),
                     (dict(emb_dim=1), "emb_dim=1 .* >= 3"),
                     (dict(filter_order=0), "filter_order=0"),
                     (dict(num_inner_mlps=-1), "num_inner_mlps=-1"),
                     (dict(filter_freq=0.0), "filter_freq=0.0 .* > 0"),
                     (dict(short_filter_order=0), "short_filter_order=0"),
                     (dict(causal="yes"), "True or False")):
    with pytest.raises(SettingError, match=match):
      Hyena(**bad)
  with pytest.raises(SettingError, match="attention_dropout_rate"):
    Hyena(dropout_rate=0.1)
  build = lambda max_len: models.build(helpers.tiny_model("hyena"), vocab_size=10,
                                       num_classes=2, max_len=max_len, pair=False)
  build(40)
  with pytest.raises(SettingError, match="l_max=40 .* at least the longest sequence, 41"):
    build(41)
  assert Hyena(causal=True).carried_state(64, 256) == 64 * 256  # Zoology's d_model x L
  assert Hyena().carried_state(64, 256) == 2 * 64 * 256
