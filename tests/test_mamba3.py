"""Mamba-3 SISO (Lahoti et al. 2026): the layer against an independent step-by-step reference
written here from the authors' recurrence (their mamba3_siso_step_ref's form: the state, the
previous position's rotated B and x, the angle sums wrapped at each step), outputs and input
gradients (along random directions, by central differences of the float64 reference),
bidirectional (the reference also run over the reversed row) and causal (`-m slow`), on rows
with leading, inner and trailing padding (the reference given the real tokens alone); the
reference without the trapezoid's second term is another function (the comparison can
fail); the angle sums round as the authors' running wrap over long rows; the authors'
initialisation; the optimiser group; its defaults and one-line errors. What the family shares (chunked equals
recurrent, causality, the state count) is tests/test_recurrent_family.py's; the figures
against the authors' own code are in docs/models.md."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers.mamba3 import Mamba3, cumulative_angles
from lra.rules import SettingError
from lra.testing import cheap_compiles
from lra.training import optim
from tests import helpers
from tests.helpers import run_once as _run

# E = 2 x 4 = 8 inner channels, H = 4 heads of P = 2, G = 2 groups of B and C, N = 5 with
# rope_fraction 1: A_r = 2 angles turn channels 0-3, channel 4 stays.
WIDTH, LENGTH = 4, 9
SMALL = dict(d_state=5, head_dim=2, groups=2, rope_fraction=1.0, chunk_size=4)


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


def _reference(p, x, bidirectional, second=1.0):
  """The layer on one row's real tokens (L x D), position by position; `second` scales the
  trapezoid's previous-position term (0: the Euler-like write alone). Float64 numpy."""
  xp = np
  n, head, groups, angles = SMALL["d_state"], SMALL["head_dim"], SMALL["groups"], 2
  length, inner = x.shape[0], p["out_proj"]["kernel"].shape[0]
  heads = inner // head
  proj = x @ p["in_proj"]["kernel"]
  cuts = np.cumsum([inner, inner, groups * n, groups * n, heads, heads, heads])
  z, xs, B, C, dd_dt, dd_A, trap, ang = (proj[:, a:b] for a, b in
                                         zip([0, *cuts], [*cuts, proj.shape[1]]))
  dt = xp.log1p(xp.exp(dd_dt + p["dt_bias"][None]))
  A = xp.minimum(-xp.where(dd_A >= 0, 1 + dd_A, 1 / (1 - xp.minimum(dd_A, 0.0))), -1e-4)
  group_of = np.arange(heads) // (heads // groups)

  def normed(a, w, bias):  # RMS norm per group, then the per-head bias
    a = a.reshape(length, groups, n)
    a = a / xp.sqrt(xp.mean(a * a, -1, keepdims=True) + 1e-5) * w[None, None]
    return a[:, group_of] + bias[None]

  B, C = normed(B, p["B_norm"], p["B_bias"]), normed(C, p["C_norm"], p["C_bias"])
  xs, lam = xs.reshape(length, heads, head), 1 / (1 + xp.exp(-trap))
  phi = (math.pi * xp.tanh(ang))[:, None, :] * dt[:, :, None]  # L x H x A_r

  def turn(v, theta):  # pairs (2i, 2i + 1) by theta_i; channels from 2 A_r as they are
    c, s = xp.cos(theta), xp.sin(theta)
    pairs = [xp.stack([v[:, 2 * i] * c[:, i] - v[:, 2 * i + 1] * s[:, i],
                       v[:, 2 * i] * s[:, i] + v[:, 2 * i + 1] * c[:, i]], -1)
             for i in range(angles)]
    return xp.concatenate(pairs + [v[:, 2 * angles:]], -1)

  def scan(order):
    S, k_prev, x_prev = xp.zeros((heads, n, head)), xp.zeros((heads, n)), xp.zeros((heads, head))
    theta, y = xp.zeros((heads, angles)), [None] * length
    for t in order:
      theta = (theta + phi[t]) % (2 * math.pi)
      q, k = turn(C[t], theta), turn(B[t], theta)
      decay = xp.exp(dt[t] * A[t])[:, None, None]
      S = (decay * S + second * ((1 - lam[t]) * dt[t])[:, None, None] * decay
           * k_prev[:, :, None] * x_prev[:, None, :]
           + (lam[t] * dt[t])[:, None, None] * k[:, :, None] * xs[t][:, None, :])
      y[t], k_prev, x_prev = xp.einsum("hnp,hn->hp", S, q), k, xs[t]
    return xp.stack(y)

  y = scan(range(length))
  if bidirectional:
    y = 0.5 * (y + scan(range(length - 1, -1, -1)))
  y = (y + p["D"][None, :, None] * xs) * z.reshape(length, heads, head)
  y = y / (1 + xp.exp(-z.reshape(length, heads, head)))  # times SiLU(z) = z sigmoid(z)
  return y.reshape(length, inner) @ p["out_proj"]["kernel"]


def _spread(params, seed):
  """dt near 0.2-1, biases, D and norms away from 1 and the projections scaled up: every
  parameter and the rotation matter in an output of order 1."""
  rng = np.random.default_rng(seed)
  p = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params)
  dt = rng.uniform(0.2, 1.0, p["D"].shape)
  p["dt_bias"] = dt + np.log(-np.expm1(-dt))
  p["D"] = rng.normal(size=p["D"].shape)
  for name in ("B_norm", "C_norm", "B_bias", "C_bias"):
    p[name] = rng.uniform(0.5, 1.5, p[name].shape)
  p["in_proj"]["kernel"] = 2 * p["in_proj"]["kernel"]
  return p


# Both passes by default (the forward one among them); one pass alone `-m slow`.
@pytest.mark.parametrize("bidirectional", [pytest.param(False, marks=pytest.mark.slow), True])
def test_layer_matches_the_step_reference_outputs_and_input_gradients(bidirectional):
  """Row 0 full, row 1 padded at the start, inside (two holes) and at the end, row 2 after
  4 tokens, their padded inputs noise: each row's real outputs and the gradients of
  <real outputs, cotangent> (along random directions: the reference's central differences)
  equal the reference on its real tokens alone; padded positions output 0. Without the
  trapezoid's second term the reference is another function."""
  rng = np.random.default_rng(2)
  x = rng.normal(size=(3, LENGTH, WIDTH))
  mask = helpers.trailing_mask([LENGTH, LENGTH - 1, 4], LENGTH)
  mask[1, [0, 3, 5]] = False
  x[~mask] = 50 * rng.normal(size=x[~mask].shape)
  cotangent = rng.normal(size=x.shape) * mask[..., None]
  mixer = Mamba3(bidirectional=bidirectional, **SMALL)
  p = _spread(_run(lambda: mixer.init(jax.random.PRNGKey(1), jnp.zeros((1, 3, WIDTH)),
                                      jnp.ones((1, 3), bool), deterministic=True))["params"], 3)
  p32 = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), p)
  rows = [x[r][mask[r]] for r in range(len(x))]

  def program(p, x):
    out, pullback = jax.vjp(lambda x: mixer.apply({"params": p}, x, jnp.asarray(mask),
                                                  deterministic=True), x)
    return out, pullback(jnp.asarray(cotangent, jnp.float32))[0]

  got, grads = (np.asarray(a) for a in _run(program, p32, jnp.asarray(x, jnp.float32)))
  for row, real in enumerate(rows):
    np.testing.assert_allclose(got[row][mask[row]], _reference(p, real, bidirectional),
                               rtol=1e-4, atol=1e-4)
    # The input gradient along random directions: the reference's central difference.
    grad, weights = grads[row][mask[row]], cotangent[row][mask[row]]
    for d in rng.normal(size=(2,) + real.shape):
      loss = lambda e: np.sum(_reference(p, real + e * d, bidirectional) * weights)
      want = (loss(1e-6) - loss(-1e-6)) / 2e-6
      assert abs(np.sum(grad * d) - want) < 1e-4 * np.sum(np.abs(grad * d)), (row, want)
  assert np.abs(got[~mask]).max() == 0.0
  assert np.abs(got[0]).max() > 0.5 and np.abs(grads[0]).max() > 0.5
  euler = _reference(p, rows[0], bidirectional, second=0.0)
  assert np.abs(euler - got[0]).max() > 0.05


def test_angle_sums_stay_in_a_turn_and_round_as_the_authors_running_wrap():
  """20,000 steps of 0 to 0.3 radians: the sums, wrapped in a tree, stay in [0, 2 pi] and are
  as close to the float64 sum mod 2 pi as a float32 sum wrapped at every step (the authors'
  step reference and kernel), about 1e-4; unwrapped, float32 step by step is 160x off."""
  phi = np.random.default_rng(0).uniform(0.0, 0.3, size=20000).astype(np.float32)
  theta = np.asarray(_run(cumulative_angles, jnp.asarray(phi)[None, :, None, None]))[0, :, 0, 0]
  want, turn = np.cumsum(np.float64(phi)) % (2 * np.pi), np.float32(2 * np.pi)
  running, step = np.float32(0.0), []
  for angle in phi:
    running = running + angle
    step.append(running - turn * np.floor(running / turn))
  off = lambda a: np.minimum(np.abs(a - want), 2 * np.pi - np.abs(a - want)).max()
  assert off(theta) < 1.5 * off(np.asarray(step)) + 1e-6 and off(theta) < 2e-4
  assert theta.min() >= 0.0 and theta.max() <= 2 * np.pi
  assert off(np.float64(np.cumsum(phi)) % (2 * np.pi)) > 50 * off(theta)


def test_authors_initialisation():
  width, num_layers = 64, 4
  mixer = Mamba3(d_state=16, head_dim=8, num_layers=num_layers)  # E = 128, H = 16
  p = _run(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 3, width)),
                              jnp.ones((1, 3), bool), deterministic=True))["params"]
  inner, heads, n, angles = 128, 16, 16, 4  # rope_fraction 0.5: 8 channels turn
  assert sorted(p) == ["B_bias", "B_norm", "C_bias", "C_norm", "D", "dt_bias", "in_proj",
                       "out_proj"]
  assert p["in_proj"]["kernel"].shape == (width, 2 * inner + 2 * n + 3 * heads + angles)
  for name, shape in (("B_bias", (heads, n)), ("C_bias", (heads, n)), ("B_norm", (n,)),
                      ("C_norm", (n,)), ("D", (heads,))):
    assert p[name].shape == shape
    np.testing.assert_array_equal(p[name], 1.0)
  dt = np.log1p(np.exp(np.float64(p["dt_bias"])))  # log-uniform in [0.001, 0.1]
  assert np.all((dt > 0.001 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  kernel, bound = np.asarray(p["in_proj"]["kernel"]), width ** -0.5  # PyTorch's default
  assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound
  out = np.asarray(p["out_proj"]["kernel"])  # / sqrt(num_layers): mamba_ssm's _init_weights
  assert np.abs(out).max() <= inner ** -0.5 / 2 and abs(np.var(out) * 3 * inner * 4 - 1) < 0.1
  assert mixer.head_sizes(width) == (heads, n, 8) and mixer.rope_angles == angles
  # S (N x P), the previous B (N) and x (P), the angle sums, per head.
  assert mixer.carried_state(width, 100) == heads * (n * 8 + n + 8 + angles)


def test_optimizer_group_takes_d_and_dt_bias():
  model = models.build(helpers.tiny_model("mamba3"), vocab_size=10, num_classes=2, max_len=6,
                       pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, Mamba3.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  assert len(group) == 4 and all("['mixer']" in k for k in group)  # 2 layers x 2
  assert {k.rsplit("'", 2)[-2] for k in group} == {"D", "dt_bias"}


def test_defaults_and_errors():
  """The authors' defaults (the core's chunk size; head_dim 0: their 64 where 64 divides E,
  else the widest divisor); dt_min above dt_max, a d_state with no pair to turn and a head_dim
  that does not divide E are one line each."""
  assert registry.default_settings("mamba3") == dict(
      form="chunked", chunk_size=64, bidirectional=False, combine="mean", d_state=128,
      head_dim=0, expand=2, groups=1, rope_fraction=0.5, dt_min=0.001, dt_max=0.1,
      A_floor=1e-4, A_activation="heavy_tail", outproj_norm=False)
  for bad, match in ((dict(dt_min=0.1, dt_max=0.01), r"<= config.model.attention.dt_max"),
                     (dict(d_state=3), r"d_state=3 is not valid: at least 4 with "
                      r"config.model.attention.rope_fraction=0.5")):
    with pytest.raises(SettingError, match=match) as error:
      Mamba3(**bad)
    assert "\n" not in str(error.value)
  with pytest.raises(SettingError, match=r"head_dim=8 is not valid: a divisor of the inner "
                     r"width expand x width = 12") as error:
    Mamba3(head_dim=8).init(jax.random.PRNGKey(0), jnp.zeros((1, 3, 6)),
                            jnp.ones((1, 3), bool), deterministic=True)
  assert str(error.value).splitlines()[0].startswith("config.model.attention.head_dim")
  assert Mamba3().check_width(128) == (256, 4) and Mamba3().check_width(16) == (32, 1)
