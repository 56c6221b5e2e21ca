"""S4D (Gu et al. 2022): the FFT convolution is the discretised recurrence, run step by step."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra import models
import lra.models.mixers.s4d  # noqa: F401  (registers "s4d")
from lra.configs import listops
from lra.training import optim
from lra.models import registry
from lra.models.mixers.s4d import S4D, ssm_kernel
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

DIM, LENGTH, STATE = 5, 7, 6  # D channels, L positions, N state size (3 conjugate pairs)


def _randomised(params, rng):
  """Init values with every SSM parameter moved off its structured start (B = 1, Re A = -1/2),
  keeping dt, A and B in ranges where the recurrence is well conditioned."""
  p = dict(params["params"])
  normal = lambda shape, scale: jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)
  p["log_A_re"] = p["log_A_re"] + normal(p["log_A_re"].shape, 0.5)
  p["A_im"] = p["A_im"] + normal(p["A_im"].shape, 0.3)
  p["B"] = p["B"] + normal(p["B"].shape, 0.5)
  p["log_dt"] = jnp.asarray(rng.uniform(np.log(0.05), np.log(0.5), p["log_dt"].shape),
                            jnp.float32)
  return {"params": p}


def _gelu(x):
  return 0.5 * x * (1 + jax.scipy.special.erf(x / np.sqrt(2)))


def _reference(params, x_BxLxD, mask_BxL, bidirectional):
  """The SSM as a recurrence, one position at a time (helpers.linear_recurrence: x_k =
  dA x_{k-1} + dB u_k, y_k = 2 Re(C x_k)), then GELU and the linear GLU."""
  p = params["params"]
  u = jnp.where(mask_BxL[..., None], x_BxLxD, 0.0)
  dt = jnp.exp(p["log_dt"])[:, None]                               # D x 1
  a = -jnp.exp(p["log_A_re"]) + 1j * p["A_im"]                     # D x N/2
  b = p["B"][..., 0] + 1j * p["B"][..., 1]
  c = p["C"][..., 0] + 1j * p["C"][..., 1]                         # directions x D x N/2
  da = jnp.exp(dt * a)
  db = (da - 1) / a * b
  bu_LxBxDxN = db[None, None] * jnp.moveaxis(u, 1, 0)[..., None]
  states = helpers.linear_recurrence(da[None], bu_LxBxDxN)  # a state per row: B x D x N/2
  y_LxBxD = 2 * jnp.sum(c[0][None, None] * states, -1).real
  if bidirectional:  # the backward state at k holds u_{k+1}, u_{k+2}, ...
    states = helpers.linear_recurrence(da[None], bu_LxBxDxN, reverse=True)
    after = jnp.concatenate([states[1:], jnp.zeros_like(states[:1])])
    y_LxBxD = y_LxBxD + 2 * jnp.sum(c[1][None, None] * after, -1).real
  y = _gelu(jnp.moveaxis(y_LxBxD, 0, 1) + p["D"][None, None] * u)
  w, bias = p["output_linear"]["kernel"], p["output_linear"]["bias"]
  h = jnp.einsum("bld,de->ble", y, w) + bias[None, None]
  return h[..., :DIM] * jax.nn.sigmoid(h[..., DIM:])


# Both directions by default (the forward kernel among them); one `-m slow`.
@pytest.mark.parametrize("bidirectional", [pytest.param(False, marks=pytest.mark.slow), True])
def test_fft_convolution_equals_the_recurrence(bidirectional):
  x, mask, rng = helpers.padded_inputs(LENGTH, DIM)
  mixer = S4D(state_size=STATE, A_init="lin", bidirectional=bidirectional)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  params = _randomised(mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), rng)

  def run(params, x):
    loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True) * cotangent)
    ref_loss = lambda p, x: jnp.sum(_reference(p, x, mask, bidirectional) * cotangent)
    return (mixer.apply(params, x, mask, deterministic=True),
            _reference(params, x, mask, bidirectional),
            jax.grad(loss, argnums=(0, 1))(params, x),
            jax.grad(ref_loss, argnums=(0, 1))(params, x))

  out, ref, grads, ref_grads = _run(run, params, x)
  assert params["params"]["C"].shape == (2 if bidirectional else 1, DIM, STATE // 2, 2)
  assert params["params"]["output_linear"]["kernel"].shape == (DIM, 2 * DIM)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=2e-3, atol=2e-4)
  # Every SSM parameter learns.
  assert all(np.any(grads[0]["params"][k] != 0) for k in ("log_dt", "log_A_re", "A_im", "B",
                                                          "C", "D"))
  if bidirectional:  # position 0 hears later positions only through the backward kernel
    one_way = dict(params["params"], C=params["params"]["C"].at[1].set(0.0))
    changed = mixer.apply({"params": one_way}, x, mask, deterministic=True)
    assert np.abs(np.asarray(changed - out)[0, 0]).max() > 1e-3


@pytest.mark.parametrize("A_init", ["lin", "inv"])
def test_vandermonde_kernel_equals_powers_in_a_loop(A_init):
  length = 50
  x, mask, rng = helpers.padded_inputs(LENGTH, DIM)
  mixer = S4D(state_size=STATE, A_init=A_init)
  p = _randomised(mixer.init(jax.random.PRNGKey(1), x, mask, deterministic=True), rng)["params"]
  kernel = np.asarray(_run(lambda p: ssm_kernel(p["log_dt"], p["log_A_re"], p["A_im"], p["B"],
                                                p["C"], length), p))
  q = {k: np.asarray(v, np.float64) for k, v in p.items() if k != "output_linear"}
  a = -np.exp(q["log_A_re"]) + 1j * q["A_im"]
  da = np.exp(np.exp(q["log_dt"])[:, None] * a)
  b, c = (q[k][..., 0] + 1j * q[k][..., 1] for k in ("B", "C"))
  cdb = c * (da - 1) / a * b
  expected = np.zeros((2, length, DIM))
  power = np.ones_like(da)
  for step in range(length):
    expected[:, step] = 2 * np.sum(cdb * power, -1).real
    power = power * da
  assert kernel.shape == (2, length, DIM)
  np.testing.assert_allclose(kernel, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_initialisations_follow_the_paper():
  x, mask, _ = helpers.padded_inputs(LENGTH, DIM)
  n, half = 8, np.arange(4)
  expected = {"lin": np.pi * half, "inv": n / np.pi * (n / (2 * half + 1) - 1)}
  mixers = {name: S4D(state_size=n, A_init=name, dt_min=0.01, dt_max=0.2) for name in expected}
  params = _run(lambda x: {k: m.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
                           for k, m in mixers.items()}, x)
  assert expected["inv"][0] == pytest.approx(8 / np.pi * 7)
  for name, p in params.items():
    p = p["params"]
    np.testing.assert_allclose(p["A_im"], np.broadcast_to(expected[name], (DIM, 4)), rtol=1e-6)
    np.testing.assert_allclose(-np.exp(p["log_A_re"]), -0.5, rtol=1e-6)
    np.testing.assert_array_equal(p["B"][..., 0], 1.0)
    np.testing.assert_array_equal(p["B"][..., 1], 0.0)
    dt = np.exp(p["log_dt"])
    assert dt.shape == (DIM,) and np.all((dt >= 0.01) & (dt <= 0.2)) and np.ptp(dt) > 0
    da_abs = np.exp(dt[:, None] * -np.exp(p["log_A_re"]))
    assert np.all(da_abs < 1)


def test_stays_stable_after_a_training_step():
  """Re A = -exp(log_A_re) < 0 whatever the step: |dA| < 1 after a large update too."""
  model = models.build(dict(name="s4d", emb_dim=8, num_heads=1, qkv_dim=8, mlp_dim=8,
                            num_layers=2, dropout_rate=0.0, attention_dropout_rate=0.0,
                            positions="none", attention=dict(state_size=4)),
                       vocab_size=12, num_classes=3, max_len=10, pair=False)
  config = listops.get_config("s4d,cpu")
  config.schedule, config.learning_rate, config.ssm_learning_rate = "constant", 0.01, 3.0
  tx = optim.optimizer(config)
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 12, size=(4, 10)))
  labels = jnp.asarray([0, 1, 2, 0])

  def run(tokens):
    params = model.init(jax.random.PRNGKey(0), tokens)
    loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(
        model.apply(p, tokens), labels).mean()
    updates, _ = tx.update(jax.grad(loss)(params), tx.init(params), params)
    return params, optax.apply_updates(params, updates)

  before, after = _run(run, tokens)
  for layer in ("block_0", "block_1"):
    old, new = (t["params"]["encoder"][layer]["mixer"] for t in (before, after))
    # A large step moved log A_re by about the SSM learning rate.
    assert np.abs(np.asarray(new["log_A_re"] - old["log_A_re"])).max() > 1.0
    da_abs = np.exp(np.exp(new["log_dt"])[:, None] * -np.exp(np.asarray(new["log_A_re"],
                                                                        np.float64)))
    assert np.all(da_abs < 1)


def test_no_array_of_length_squared_size():
  """Stricter than the contract's walk (no two axes of length L): no array of L x L elements
  at all; the largest is the D x N/2 x L Vandermonde matrix."""
  length = 64  # differs from DIM and STATE
  x, mask = jnp.ones((1, length, DIM), jnp.float32), jnp.ones((1, length), bool)
  mixer = S4D(state_size=STATE)
  params = jax.eval_shape(
      lambda x: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)
  jaxpr = jax.make_jaxpr(lambda p, x: mixer.apply(p, x, mask, deterministic=True))(
      params, x).jaxpr
  shapes = list(helpers.array_shapes(jaxpr))
  assert (DIM, STATE // 2, length) in shapes
  assert max(math.prod(s) for s in shapes) < length * length


def test_settings_and_errors():
  assert registry.default_settings("s4d") == dict(
      state_size=64, A_init="inv", dt_min=0.001, dt_max=0.1, bidirectional=True,
      tie_dropout=False)
  assert S4D.OPTIMIZER_GROUP == ("log_dt", "log_A_re", "A_im", "B")
  for bad in (5, 0, True, 4.0):
    with pytest.raises(SettingError, match="state_size"):
      S4D(state_size=bad)
  with pytest.raises(SettingError, match="one of 'lin', 'inv'"):
    S4D(A_init="legs")
  with pytest.raises(SettingError, match="dt_min=0.1 .* <= config.model.attention.dt_max"):
    S4D(dt_min=0.1, dt_max=0.01)
  with pytest.raises(SettingError, match="dt_min=0.0 .* > 0"):
    S4D(dt_min=0.0)
  with pytest.raises(SettingError, match="bidirectional='yes' is not valid: True or False"):
    S4D(bidirectional="yes")
  with pytest.raises(SettingError, match="A_init"):
    models.build(dict(name="s4d", attention=dict(init="lin")), vocab_size=4, num_classes=2,
                 max_len=8, pair=False)
