"""S5 (Smith et al. 2023): HiPPO-N initialisation, scan against a sequential loop, padding."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

from lra import models
import lra.models.mixers.s5  # noqa: F401  (registers "s5")
from lra.models import registry
from lra.models.mixers.s5 import S5, discretize, eigenbasis, hippo_n, hippo_n_eigen
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

WIDTH, LENGTH = 4, 7  # odd length: the scan's tree is not a perfect power of two


def _legs(n):
  """HiPPO-LegS from its definition: -sqrt(2i+1) sqrt(2j+1) below the diagonal, -(i+1) on it."""
  a = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      if i > j:
        a[i, j] = -np.sqrt(2 * i + 1) * np.sqrt(2 * j + 1)
      elif i == j:
        a[i, j] = -(i + 1)
  return a


def _hippo_n_reference(n):
  p = np.sqrt(np.arange(n) + 0.5)
  return _legs(n) + np.outer(p, p)  # the rank-one correction that makes LegS normal


def test_hippo_n_diagonalisation_reconstructs_the_matrix():
  for n in (2, 6, 16):
    a_normal = _hippo_n_reference(n)
    np.testing.assert_allclose(hippo_n(n), a_normal, atol=1e-12)
    assert np.allclose(a_normal @ a_normal.T, a_normal.T @ a_normal)  # normal indeed
    lam, v = hippo_n_eigen(n)
    np.testing.assert_allclose(v @ np.diag(lam) @ np.linalg.inv(v), a_normal, atol=1e-10)
    np.testing.assert_allclose(v.conj().T @ v, np.eye(n), atol=1e-10)  # V^-1 = V^H
    np.testing.assert_allclose(lam.real, -0.5, atol=1e-12)
    # The first half holds one eigenvalue of each conjugate pair: with its conjugates it is the
    # whole spectrum (compared against numpy's general eigenvalue solver).
    kept = lam[: n // 2]
    assert np.all(kept.imag < 0)
    by_imag = lambda z: z[np.argsort(z.imag)]
    np.testing.assert_allclose(by_imag(np.concatenate([kept, kept.conj()])),
                               by_imag(np.linalg.eigvals(a_normal)), atol=1e-8)


def test_block_diagonal_conjugate_half_is_the_real_system():
  """C A^k B of the real block-diagonal HiPPO-N system = 2 Re(C V Lambda^k V^H B)."""
  state, blocks, width = 12, 3, 5
  n = state // blocks
  lam, v = eigenbasis(state, blocks)
  assert lam.shape == (state // 2,) and v.shape == (state, state // 2)
  # Block structure: block j's states only mix with block j's kept eigenvectors.
  for j in range(blocks):
    rows = np.zeros(state, bool)
    rows[j * n:(j + 1) * n] = True
    cols = np.zeros(state // 2, bool)
    cols[j * n // 2:(j + 1) * n // 2] = True
    assert np.all(v[np.ix_(~rows, cols)] == 0) and np.all(v[np.ix_(rows, ~cols)] == 0)
    np.testing.assert_allclose(lam[cols], lam[: n // 2])  # every block starts the same
  a_block = scipy.linalg.block_diag(*[_hippo_n_reference(n)] * blocks)
  rng = np.random.default_rng(0)
  b, c = rng.normal(size=(state, width)), rng.normal(size=(width, state))
  for k in range(4):
    expected = c @ np.linalg.matrix_power(a_block, k) @ b
    got = 2 * np.real(c @ v @ np.diag(lam ** k) @ v.conj().T @ b)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


def test_initial_parameters():
  state, blocks, width = 64, 4, 32
  x, mask = jnp.zeros((1, 3, width)), jnp.ones((1, 3), bool)
  lam, v = eigenbasis(state, blocks)

  def init(c_init):
    mixer = S5(state_size=state, blocks=blocks, c_init=c_init)
    return mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]

  inits = _run(lambda: [init(c) for c in ("trunc_standard_normal", "lecun_normal",
                                          "complex_normal")])
  p = inits[0]
  assert sorted(p) == ["B", "C", "C_reverse", "D", "Lambda_im", "Lambda_re", "gate", "log_dt"]
  assert set(S5.OPTIMIZER_GROUP) <= set(p)
  np.testing.assert_allclose(p["Lambda_re"], lam.real, atol=1e-6)
  np.testing.assert_allclose(p["Lambda_im"], lam.imag, rtol=1e-6)
  dt = np.exp(p["log_dt"])
  assert p["log_dt"].shape == (state // 2,) and np.all((dt >= 0.001) & (dt <= 0.1))
  # B~ = V^H B for a real B with variance 1/P: 2 Re(V B~) recovers B.
  b_tilde = p["B"][..., 0] + 1j * p["B"][..., 1]
  b_real = 2 * np.real(v @ b_tilde)
  assert abs(np.var(b_real) * state - 1) < 0.15
  # C~ = C V: its parts keep C's variance (1/P, 1/(P H), or 1/2 drawn directly).
  for params, variance in zip(inits, (1 / state, 1 / (state * width), 0.5)):
    assert params["C"].shape == params["C_reverse"].shape == (width, state // 2, 2)
    assert abs(np.var(params["C"]) / variance - 1) < 0.15


def _mixer_params(mixer, x, mask, seed):
  """Init, then move the recurrence away from dt ~ 0 so that the SSM part dominates."""
  params = mixer.init(jax.random.PRNGKey(seed), x, mask, deterministic=True)
  rng = np.random.default_rng(seed)
  p = dict(params["params"])
  n = p["Lambda_re"].shape[0]
  p["Lambda_re"] = jnp.asarray(-rng.uniform(0.05, 1.0, n), jnp.float32)
  if mixer.clip_eigs:
    p["Lambda_re"] = p["Lambda_re"].at[0].set(0.3)  # unstable unless clipped
  p["Lambda_im"] = jnp.asarray(rng.normal(size=n) * 2, jnp.float32)
  p["log_dt"] = jnp.asarray(np.log(rng.uniform(0.2, 1.0, n)), jnp.float32)
  p["D"] = p["D"] * 0.1
  return {"params": p}


def _reference(params, x, mask, mixer):
  """The S5 layer by a sequential loop over each row's real positions (jnp, differentiable)."""
  p = params["params"]
  re = jnp.minimum(p["Lambda_re"], -1e-4) if mixer.clip_eigs else p["Lambda_re"]
  lam = re + 1j * p["Lambda_im"]
  dt = jnp.exp(p["log_dt"])
  b = p["B"][..., 0] + 1j * p["B"][..., 1]
  if mixer.discretization == "zoh":
    lam_bar = jnp.exp(lam * dt)
    b_bar = ((lam_bar - 1) / lam)[:, None] * b
  else:
    lam_bar = (1 + dt * lam / 2) / (1 - dt * lam / 2)
    b_bar = (dt / (1 - dt * lam / 2))[:, None] * b
  c = p["C"][..., 0] + 1j * p["C"][..., 1]
  c2 = p["C_reverse"][..., 0] + 1j * p["C_reverse"][..., 1] if mixer.bidirectional else None
  dense = lambda name, h: h @ p[name]["kernel"] + p[name]["bias"][None, :]
  out = jnp.zeros(x.shape)
  for row in range(x.shape[0]):
    real = np.flatnonzero(mask[row])
    u = x[row, real]  # s_t = Lambda_bar s_{t-1} + B_bar u_t,  y_t = 2 Re(C s_t)
    y = 2 * jnp.real(helpers.linear_recurrence(lam_bar, u @ b_bar.T) @ c.T)
    if c2 is not None:  # the reverse scan over the same inputs, with its own C
      y = y + 2 * jnp.real(helpers.linear_recurrence(lam_bar, u @ b_bar.T, reverse=True) @ c2.T)
    y = y + p["D"][None, :] * u
    g = jax.nn.gelu(y)
    if mixer.activation == "gelu":
      h = g
    elif mixer.activation == "full_glu":
      h = dense("value", g) * jax.nn.sigmoid(dense("gate", g))
    elif mixer.activation == "half_glu1":
      h = g * jax.nn.sigmoid(dense("gate", g))
    else:
      h = y * jax.nn.sigmoid(dense("gate", g))
    out = out.at[row, real].set(h)
  return out


# The first and last by default; the other two (other discretisation, activation and C init of
# the same scan) `-m slow`.
@pytest.mark.parametrize("settings,check_grads", [
    (dict(discretization="zoh", bidirectional=True, activation="half_glu1"), True),
    pytest.param(dict(discretization="bilinear", bidirectional=False, activation="full_glu"),
                 True, marks=pytest.mark.slow),
    pytest.param(dict(discretization="zoh", bidirectional=True, activation="half_glu2",
                      clip_eigs=True, c_init="complex_normal"), False, marks=pytest.mark.slow),
    (dict(discretization="bilinear", bidirectional=True, activation="gelu", blocks=1), False),
])
def test_scan_matches_sequential_loop(settings, check_grads):
  x, mask, rng = helpers.padded_inputs(LENGTH, WIDTH)
  mixer = S5(state_size=8, **{"blocks": 2, **settings})
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, lambda x: _mixer_params(mixer, x, jnp.asarray(mask), seed=1),
      lambda p, x: _reference(p, x, mask, mixer), x, mask, cotangent,
      grads=check_grads)  # (the reference's unrolled gradient is the slow part to compile)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  assert np.abs(ref).max() > 0.1  # not a trivially small output
  flat, ref_flat = jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)
  assert len(flat) == len(ref_flat) and (len(flat) > 9) == check_grads
  for g, r in zip(flat, ref_flat):
    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-5)
    assert np.any(g != 0)  # every parameter learns


def _classifier(**settings):
  return models.build(helpers.tiny_model("s5", num_layers=1, attention=settings),
                      vocab_size=12, num_classes=3, max_len=10, pair=False)


def test_stable_after_initialisation_and_a_training_step():
  tokens, labels = helpers.padded_tokens(12, 10, batch=4), jnp.asarray([0, 1, 2, 1])
  plain, clipped = _classifier(), _classifier(clip_eigs=True)
  step = lambda model, lr: helpers.training_step(model, tokens, labels, optax.adam(lr))
  # A small step without clipping; a huge one with clipping (Re Lambda would turn positive).
  (p0, p1), (q0, q1) = _run(lambda: (step(plain, 1e-2), step(clipped, 1.0)))
  mixer = lambda params: params["params"]["encoder"]["block_0"]["mixer"]
  for params, clip in ((p0, False), (p1, False), (q0, True), (q1, True)):
    m = mixer(params)
    lam_bar, _ = discretize(m["Lambda_re"], m["Lambda_im"], m["log_dt"], m["B"], "zoh", clip)
    assert np.all(np.abs(lam_bar) < 1)
    if not clip:  # |exp(Lambda dt)| = exp(Re(Lambda) dt) < 1 iff Re(Lambda) < 0
      assert np.all(np.asarray(m["Lambda_re"]) < 0)
  # The step did push eigenvalues to the right half plane: clipping is what kept them stable.
  assert np.any(np.asarray(mixer(q1)["Lambda_re"]) > 0)


def test_settings_and_errors():
  assert registry.default_settings("s5") == dict(
      state_size=256, blocks=8, discretization="zoh", dt_min=0.001, dt_max=0.1,
      c_init="trunc_standard_normal", bidirectional=True, clip_eigs=False,
      activation="half_glu1", tie_dropout=True)
  for bad, match in ((dict(state_size=12, blocks=4), "blocks of even size"),
                     (dict(state_size=10, blocks=4), "blocks of even size"),
                     (dict(state_size=1), "state_size=1 .* >= 2"),
                     (dict(state_size=8.0), "state_size=8.0 .* >= 2"),
                     (dict(discretization="euler"), "'zoh', 'bilinear'"),
                     (dict(c_init="zeros"), "'trunc_standard_normal', 'lecun_normal'"),
                     (dict(activation="relu"), "'gelu', 'full_glu', 'half_glu1', 'half_glu2'"),
                     (dict(dt_min=0.1, dt_max=0.01), "<= config.model.attention.dt_max"),
                     (dict(bidirectional="yes"), "True or False")):
    with pytest.raises(SettingError, match=match):
      S5(**bad)
  with pytest.raises(SettingError, match="state_size"):
    registry.make("s5", dict(state=8))
