"""LRU (Orvieto et al. 2023): ring initialisation, scan against a sequential loop, padding."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra import models
import lra.models.mixers.lru  # noqa: F401  (registers "lru")
from lra.models import registry
from lra.models.mixers.lru import LRU, magnitude_and_phase
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

WIDTH, LENGTH = 4, 7  # odd length: the scan's tree is not a perfect power of two


def test_ring_initialisation():
  x, mask = jnp.zeros((1, 3, 32)), jnp.ones((1, 3), bool)
  rings = ((0.4, 0.8, 1.0), (0.0, 1.0, 2 * np.pi), (0.999, 0.9999, np.pi / 10))

  def init(r_min, r_max, max_phase):
    mixer = LRU(state_size=1024, r_min=r_min, r_max=r_max, max_phase=max_phase)
    return mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]

  inits = _run(lambda: [init(*ring) for ring in rings])
  for params, (r_min, r_max, max_phase) in zip(inits, rings):
    nu, theta = np.exp(np.float64(params["nu_log"])), np.exp(np.float64(params["theta_log"]))
    radius, phase = np.exp(-nu), theta  # Lambda = exp(-nu + i theta)
    assert np.all((radius >= r_min * (1 - 1e-6)) & (radius <= r_max)) and radius.max() < 1
    assert np.all((phase >= 0) & (phase <= max_phase))
    # |Lambda|^2 is uniform on [r_min^2, r_max^2] (uniform on the ring's area): check its
    # quartiles; the phase is uniform on [0, max_phase].
    quartiles = ((np.quantile(radius ** 2, [0.25, 0.5, 0.75]) - r_min ** 2)
                 / (r_max ** 2 - r_min ** 2))
    np.testing.assert_allclose(quartiles, [0.25, 0.5, 0.75], atol=0.05)
    np.testing.assert_allclose(np.quantile(phase, [0.25, 0.5, 0.75]) / max_phase,
                               [0.25, 0.5, 0.75], atol=0.05)
    # gamma = sqrt(1 - |Lambda|^2), computed here in float64.
    np.testing.assert_allclose(np.exp(params["gamma_log"]), np.sqrt(1 - radius ** 2),
                               rtol=1e-3)
    # The module's own magnitude and phase agree.
    got_radius, got_phase = magnitude_and_phase(params["nu_log"], params["theta_log"])
    np.testing.assert_allclose(got_radius, radius, rtol=1e-6)
    np.testing.assert_allclose(got_phase, phase, rtol=1e-6)
  p = inits[0]
  assert abs(np.var(p["B"]) * 2 * 32 - 1) < 0.1  # each part N(0, 1/(2H))
  assert abs(np.var(p["C"]) * 1024 - 1) < 0.1  # each part N(0, 1/N)
  assert p["B"].shape == (1024, 32, 2) and p["C"].shape == (32, 1024, 2) and "C_reverse" not in p


def _mixer_params(mixer, x, mask, seed):
  """Init, then spread |Lambda| so that memory and decay both show."""
  params = mixer.init(jax.random.PRNGKey(seed), x, mask, deterministic=True)
  rng = np.random.default_rng(seed)
  p = dict(params["params"])
  n = p["nu_log"].shape[0]
  p["nu_log"] = jnp.asarray(np.log(-np.log(rng.uniform(0.3, 0.95, n))), jnp.float32)
  p["gamma_log"] = jnp.asarray(rng.normal(size=n) * 0.3, jnp.float32)
  p["D"] = p["D"] * 0.1
  return {"params": p}


def _reference(params, x, mask, mixer):
  """The LRU layer by a sequential loop over each row's real positions (jnp, differentiable)."""
  p = params["params"]
  lam = jnp.exp(-jnp.exp(p["nu_log"]) + 1j * jnp.exp(p["theta_log"]))
  b = (p["B"][..., 0] + 1j * p["B"][..., 1]) * jnp.exp(p["gamma_log"])[:, None]
  cs = [p[k][..., 0] + 1j * p[k][..., 1] for k in ("C", "C_reverse") if k in p]
  glu = lambda g: (g @ p["value"]["kernel"] + p["value"]["bias"][None]) * jax.nn.sigmoid(
      g @ p["gate"]["kernel"] + p["gate"]["bias"][None])
  rows = []
  for x_LxH, real_L in zip(x, mask):  # h_t = Lambda h_{t-1} + B u_t, y_t = Re(C h_t)
    u = x_LxH[real_L]
    y = sum(jnp.real(helpers.linear_recurrence(lam, u @ b.T, reverse=reverse) @ c.T)
            for c, reverse in zip(cs, (False, True)))  # C_reverse reads the reverse scan
    rows.append(jnp.zeros(x_LxH.shape).at[real_L].set(glu(jax.nn.gelu(y + p["D"][None] * u))))
  return jnp.stack(rows)


# Both directions by default (the forward scan is one of them); one direction `-m slow`.
@pytest.mark.parametrize("bidirectional", [pytest.param(False, marks=pytest.mark.slow), True])
def test_scan_matches_sequential_loop(bidirectional):
  x, mask, rng = helpers.padded_inputs(LENGTH, WIDTH)
  mixer = LRU(state_size=6, bidirectional=bidirectional)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _mixer_params(mixer, x, jnp.asarray(mask), seed=1),
      lambda p, x: _reference(p, x, mask, mixer), x, mask, cotangent, grads=True)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.abs(ref).max() > 0.1  # not a trivially small output
  flat, ref_flat = jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)
  assert len(flat) == len(ref_flat) == 11 + bidirectional  # 10 or 11 params, and x
  names = ["B", "C", "D", "gamma_log", "gate", "nu_log", "theta_log", "value"]
  assert sorted(grads[0]["params"]) == sorted(names + ["C_reverse"] * bidirectional)
  assert set(LRU.OPTIMIZER_GROUP) <= set(grads[0]["params"])
  for g, r in zip(flat, ref_flat):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-5)
    assert np.any(g != 0)  # every parameter learns


def test_stable_after_initialisation_and_a_huge_training_step():
  tokens, labels = helpers.padded_tokens(12, 10, batch=4), jnp.asarray([0, 1, 2, 1])
  # Eigenvalues start right at the unit circle, and Adam takes a step of about 1 in every
  # parameter: a direct parameterisation of Lambda would leave the disk.
  model = models.build(helpers.tiny_model("lru", num_layers=1,
                                          attention=dict(r_min=0.99, r_max=0.999)),
                       vocab_size=12, num_classes=3, max_len=10, pair=False)
  before, after = _run(lambda t: helpers.training_step(model, t, labels, optax.adam(1.0)),
                       tokens)
  mixer = lambda params: params["params"]["encoder"]["block_0"]["mixer"]
  for params in (before, after):
    m = mixer(params)
    radius, _ = magnitude_and_phase(m["nu_log"], m["theta_log"])
    assert np.all(np.asarray(radius) < 1)
    # Independently: |exp(-exp(nu_log) + i theta)| = exp(-exp(nu_log)) < 1 iff exp(nu_log) > 0.
    assert np.all(np.exp(np.float64(m["nu_log"])) > 0)
  moved = np.asarray(mixer(after)["nu_log"]) - np.asarray(mixer(before)["nu_log"])
  assert np.all(np.abs(moved) > 0.5)  # the step was large indeed


def test_settings_and_errors():
  assert registry.default_settings("lru") == dict(
      state_size=256, r_min=0.0, r_max=1.0, max_phase=2 * np.pi, bidirectional=False,
      tie_dropout=True)
  for bad, match in ((dict(state_size=0), "state_size=0 .* >= 1"),
                     (dict(state_size=True), "state_size=True .* >= 1"),
                     (dict(r_min=0.9, r_max=0.5), "r_min=0.9 .* <= config.model.attention.r_max"),
                     (dict(r_max=1.5), "r_max=1.5 .* <= 1"),
                     (dict(r_min=-0.1), "r_min=-0.1 .* >= 0"),
                     (dict(r_min=1.0, r_max=1.0), "r_min=1.0 .* < 1"),
                     (dict(r_min=0.0, r_max=0.0), "r_max=0.0 .* > 0"),
                     (dict(max_phase=0.0), "max_phase=0.0 .* > 0"),
                     (dict(bidirectional=1), "True or False")):
    with pytest.raises(SettingError, match=match):
      LRU(**bad)
  with pytest.raises(SettingError, match="r_min"):
    registry.make("lru", dict(rmin=0.5))
