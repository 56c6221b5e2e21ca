"""Rotary positions (positions="rotary", RoFormer): the rotation against a complex-number
reference, its relative property, the Transformer against a dense reference with rotated
queries and keys, every attention mixer taking it (padding still invisible), what a shift of
every position does to each of them (the relative property, or why it does not hold), and a
one-line refusal for every mixer without queries and keys."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import common, registry
from lra.models.common import ROTARY_BASE, rotary_embedding
from lra.rules import SettingError
from tests.helpers import (masked_softmax_attention, noise_where_padded, padded_inputs, run_once,
                           tiny_model)

# The mixers with queries and keys (every HeadsMixer but Transformer-XL, whose positions are
# relative already); the others refuse the setting.
ROTARY = ["based", "bigbird", "linear_transformer", "linformer", "local", "longformer",
          "nystromformer", "performer", "reformer", "sinkhorn", "sparse_transformer",
          "synthesizer", "transformer"]
# Settings under which a mixer has queries and keys to rotate, one case each (a Based layer
# is one kind; its conv layers have none).
ROTATING = {"based": [{"layers": ("linear",)}, {"layers": ("window",)}]}
# Parameters scaled after init where the mixer's init leaves q.k so small that a rotation
# would hardly show (Zoology's and fla's N(0, 0.02): q.k ~ 1e-3, outputs ~ 1e-2).
PARAM_SCALE = {"based": 10.0, "retnet": 10.0}

# What shifting every rotary position by one constant does to a mixer's real outputs.
# "relative": nothing. The rotated queries and keys meet only in dot products q_m.k_n (or, in
# Based's Taylor kernel, functions of them), or in dot products with sums of rotated vectors
# (Linformer's E K, Nystromformer's landmarks, the kernel mixers' sum_n R_n phi(k_n) v_n^T),
# which the common extra rotation leaves unchanged. "absolute": the outputs move, because a
# part of the mixer reads the rotated vectors themselves (docs/models.md says why each is
# kept): the Reformer hashes them, the Sinkhorn sorting network reads the rotated keys' block
# means.
SHIFT = {**{name: "relative" for name in ROTARY}, "reformer": "absolute",
         "sinkhorn": "absolute",
         "retnet": "relative"}  # rotates its queries and keys always (fla's layer)
OFFSET = 37


def _cases(names):
  """pytest params (name, attention settings) for each rotating case of `names`."""
  return [pytest.param(name, attention, id="-".join([name, *map(str, attention.values())]))
          for name in names for attention in ROTATING.get(name, [{}])]


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


def _mixer(name, rotary: bool, length: int, attention=None):
  model = tiny_model(name, positions="rotary" if rotary else "none", attention=attention)
  settings = dict(model["attention"])
  return registry.make(name, settings, num_heads=model["num_heads"], qkv_dim=model["qkv_dim"],
                       dtype="float32", layer_index=0, num_layers=2, rotary=rotary,
                       length=length)


def _init(name, mixer, x, mask):
  """The mixer's parameters, times PARAM_SCALE (if any); compiled (op by op, init is slow)."""
  init = lambda x: mixer.init({"params": jax.random.PRNGKey(0),
                               "dropout": jax.random.PRNGKey(1)}, x, mask, deterministic=True)
  return jax.tree_util.tree_map(lambda p: p * PARAM_SCALE.get(name, 1.0), run_once(init, x))


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


@pytest.mark.parametrize("name, attention", _cases(ROTARY))
def test_every_attention_mixer_rotates_and_padding_stays_invisible(name, attention):
  """The same parameters with and without rotation give other outputs (it is applied), and
  noise at padded positions changes no real output."""
  x, mask, rng = padded_inputs(12, 16)
  plain, rotated = _mixer(name, False, 12, attention), _mixer(name, True, 12, attention)
  params = _init(name, plain, x, mask)
  run = lambda m, inputs: m.apply(params, inputs, mask, deterministic=True)
  # One program for the three runs (a compile each cost more than the runs).
  a, b, noisy = run_once(lambda x, noisy: (run(plain, x), run(rotated, x), run(rotated, noisy)),
                         x, noise_where_padded(x, mask, rng))
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


def _shift_rotary_positions(monkeypatch) -> list:
  """Every lra.models module's rotary_embedding now rotates position p by p + offset[0] (0 to
  begin with); returns offset, which also records the shape of each shifted call (so a test
  sees that the shift reached the mixer)."""
  offset = [0]

  def shifted(x_BxLxHxK, positions_L=None):
    if offset[0]:
      offset.append(x_BxLxHxK.shape)
    positions_L = jnp.arange(x_BxLxHxK.shape[1]) if positions_L is None else positions_L
    return rotary_embedding(x_BxLxHxK, positions_L + offset[0])

  for module in list(sys.modules.values()):
    if (getattr(module, "__name__", "").startswith("lra.models")
        and getattr(module, "rotary_embedding", None) is rotary_embedding):
      monkeypatch.setattr(module, "rotary_embedding", shifted)
  assert common.rotary_embedding is shifted
  return offset


def test_every_mixer_that_rotates_is_in_the_shift_table():
  """Each mixer with a rotary field (but Transformer-XL, which refuses it) or a rotation of
  its own (it imports rotary_embedding) says what a shift of the positions does."""
  rotating = set()
  for name in filter(registry.in_repository, registry.names()):
    module = sys.modules[registry.get(name).__module__]
    own = getattr(module, "rotary_embedding", None) is rotary_embedding
    if own or (registry.takes_rotary(name) and name != "transformer_xl"):
      rotating.add(name)
  assert rotating == set(SHIFT)


@pytest.mark.parametrize("name, attention", _cases(sorted(SHIFT)))
def test_a_shift_of_every_position_leaves_relative_mixers_unchanged(name, attention,
                                                                     monkeypatch):
  """Positions 0..L-1 against OFFSET..OFFSET+L-1, the same parameters and inputs: real
  outputs equal for the "relative" mixers, different for the "absolute" ones."""
  x, mask, _ = padded_inputs(12, 16)
  mixer = _mixer(name, registry.takes_rotary(name), 12, attention)
  params = _init(name, mixer, x, mask)
  apply = lambda inputs: mixer.apply(params, inputs, mask, deterministic=True)
  offset = _shift_rotary_positions(monkeypatch)

  def plain_and_shifted(inputs):  # one compile: the offset is read while tracing
    plain = apply(inputs)
    offset[0] = OFFSET
    shifted = apply(inputs)
    offset[0] = 0
    return plain, shifted

  plain, shifted = run_once(plain_and_shifted, x)
  assert len(offset) > 1, "the shift did not reach the mixer's rotation"
  real = np.asarray(mask)
  a, b = np.asarray(plain)[real], np.asarray(shifted)[real]
  if SHIFT[name] == "relative":
    np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-4)
  else:
    assert np.max(np.abs(a - b)) > 1e-2, "the outputs no longer depend on absolute positions"
