"""Mamba (Gu & Dao 2023): the selective scan against a sequential loop, the chunked scan against
the associative one (outputs and gradients), the whole block against an independent numpy
implementation, causality, padding, the bidirectional combination, the official
initialisation, and the old name of `form` refused."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.mamba  # noqa: F401  (registers "mamba")
from lra.training import optim
from lra.models import registry
from lra.models.mixers.mamba import Mamba
from lra.models.ops.selective_scan import chunked_selective_scan, selective_scan
from lra.rules import SettingError
from tests import helpers, naive
from tests.helpers import run_once as _run

WIDTH, LENGTH, STATE = 4, 7, 3  # odd length: the scan's tree is not a perfect power of two


def _scan_loop(u, dt, a, b, c, d):
  """y_t = C_t s_t + D u_t, s_t = exp(dt_t A) s_{t-1} + dt_t B_t u_t: one row, float64."""
  s = np.zeros(a.shape)
  y = np.zeros(u.shape)
  for t in range(u.shape[0]):
    s = np.exp(dt[t][:, None] * a) * s + (dt[t] * u[t])[:, None] * b[t][None, :]
    y[t] = s @ c[t] + d * u[t]
  return y


def test_selective_scan_matches_a_sequential_loop():
  rng = np.random.default_rng(0)
  batch, inner = 2, 5
  u, dt = rng.normal(size=(batch, LENGTH, inner)), rng.uniform(0.05, 1.0, (batch, LENGTH, inner))
  a = -rng.uniform(0.1, 2.0, (inner, STATE))
  b, c = rng.normal(size=(2, batch, LENGTH, STATE))
  d = rng.normal(size=inner)
  args = [jnp.asarray(v, jnp.float32) for v in (u, dt, a, b, c, d)]
  got = _run(selective_scan, *args)
  expected = np.stack([_scan_loop(u[i], dt[i], a, b[i], c[i], d) for i in range(batch)])
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  assert np.abs(expected - d * u).max() > 0.5  # the recurrence, not just the skip


def _scan_inputs(rng, batch=2, inner=5):
  """u, dt, A, B, C, D of a scan whose recurrence matters (dt large enough to decay)."""
  u, dt = rng.normal(size=(batch, LENGTH, inner)), rng.uniform(0.05, 1.0, (batch, LENGTH, inner))
  a = -rng.uniform(0.1, 2.0, (inner, STATE))
  b, c = rng.normal(size=(2, batch, LENGTH, STATE))
  return [jnp.asarray(v, jnp.float32) for v in (u, dt, a, b, c, rng.normal(size=inner))]


def _value_and_grads(fn, args, cotangent):
  """fn(*args) and the gradients of <fn(*args), cotangent> with respect to every argument."""
  loss = lambda *a: jnp.sum(fn(*a) * cotangent)
  return jax.value_and_grad(loss, argnums=tuple(range(len(args))))(*args), fn(*args)


@pytest.mark.parametrize("chunk, group", [(3, 512), (2, 4), (7, 512)])
def test_chunked_scan_equals_the_associative_scan(chunk, group):
  """The chunked scan computes selective_scan's function, outputs and the gradients of every
  input, at a length that is no multiple of the chunk (7 = 3 + 3 + 1, padded), with one group
  of chunks in the backward pass or several (chunks of 2, groups of 2 chunks: 2 groups), and
  with one chunk for the whole sequence."""
  rng = np.random.default_rng(10)
  args = _scan_inputs(rng)
  cotangent = jnp.asarray(rng.normal(size=args[0].shape), jnp.float32)
  chunked = lambda *a: chunked_selective_scan(*a, chunk, group=group)
  ((_, expected), y_expected), ((_, got), y) = _run(
      lambda *a: [_value_and_grads(f, a, cotangent) for f in (selective_scan, chunked)], *args)
  np.testing.assert_allclose(y, y_expected, rtol=1e-5, atol=1e-5)
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
  u, d = np.asarray(args[0]), np.asarray(args[5])
  assert np.abs(np.asarray(y_expected) - d * u).max() > 0.5  # the recurrence, not the skip
  assert all(np.abs(np.asarray(e)).max() > 1e-3 for e in expected[:5])  # gradients that matter


def test_chunked_mixer_equals_the_associative_mixer():
  """The bidirectional mixer with form "chunked" (the default) is the one with form
  "associative": the same parameters, and the same outputs and gradients (of the parameters
  and the input) on rows with trailing padding, by chunks of 2 (no divisor of the length)."""
  rng = np.random.default_rng(11)
  x = jnp.asarray(rng.normal(size=(3, LENGTH, WIDTH)), jnp.float32)
  mask = jnp.asarray(helpers.trailing_mask([LENGTH, 4, 1], LENGTH))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32) * mask[..., None]
  reference = Mamba(state_size=STATE, bidirectional=True, form="associative")
  chunked = Mamba(state_size=STATE, bidirectional=True, chunk_size=2)
  p, same = _run(lambda: [_init(reference, x, mask), _init(chunked, x, mask)])
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(
      lambda a, b: bool(np.array_equal(a, b)), p, same))  # the same initialisation, too
  p = _spread(p, seed=12)
  variables = {"params": jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), p)}

  def outputs_and_grads(mixer):
    fn = lambda v, x: mixer.apply(v, x, mask, deterministic=True)
    return _value_and_grads(fn, (variables, x), cotangent)

  ((_, expected), y_expected), ((_, got), y) = _run(
      lambda: [outputs_and_grads(m) for m in (reference, chunked)])
  np.testing.assert_allclose(y, y_expected, rtol=1e-5, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(y_expected)).max() > 0.1


def test_chunked_train_step_holds_no_state_per_position():
  """The chunked mixer's gradient program has no array of batch x length x inner x state
  numbers (the associative scan's has): at 4K tokens and the default chunk and group, the
  largest is a group's states, 512 positions of them (an eighth)."""
  batch, length, state, width = 2, 4096, 16, 64  # traced only: nothing runs
  x, mask = jnp.ones((batch, length, width)), jnp.ones((batch, length), bool)

  def largest(mixer):
    variables = jax.eval_shape(lambda: _init(mixer, x, mask))
    loss = lambda v, x: jnp.sum(mixer.apply(v, x, mask, deterministic=True))
    sizes = [0]

    def visit(jaxpr):
      for eqn in jaxpr.eqns:
        sizes.extend(int(np.prod(v.aval.shape)) for v in eqn.outvars if hasattr(v.aval, "shape"))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
          visit(sub)
    visit(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(variables, x).jaxpr)
    return max(sizes)

  states = batch * length * 2 * width * state  # expand 2
  assert largest(Mamba(state_size=state, form="associative")) >= states
  assert largest(Mamba(state_size=state, bidirectional=True)) <= states // 8


# --- the whole block against numpy ---

def _np_direction(p, x):
  """One direction over one row's real positions (L x E), float64, written from the paper."""
  w, bias = p["conv_weight"], p["conv_bias"]
  kernel, (length, _) = w.shape[0], x.shape
  conv = np.tile(bias, (length, 1))
  for t in range(length):
    for k in range(kernel):
      source = t - (kernel - 1) + k  # causal: the current and the K - 1 previous positions
      if source >= 0:
        conv[t] += w[k] * x[source]
  u = naive.silu(conv)
  rank, n = p["dt_proj"]["kernel"].shape[0], p["A_log"].shape[1]
  proj = u @ p["x_proj"]["kernel"]
  low, b, c = proj[:, :rank], proj[:, rank:rank + n], proj[:, rank + n:]
  dt = naive.softplus(low @ p["dt_proj"]["kernel"] + p["dt_bias"])
  return _scan_loop(u, dt, -np.exp(p["A_log"]), b, c, p["D"])


def _np_block(p, x, bidirectional):
  """out_proj(y * SiLU(z)) for one row; the backward direction over the reversed row."""
  xz = x @ p["in_proj"]["kernel"]
  inner = xz.shape[-1] // 2
  xs, z = xz[:, :inner], xz[:, inner:]
  y = _np_direction(p["forward"], xs)
  if bidirectional:
    y = 0.5 * (y + _np_direction(p["backward"], xs[::-1])[::-1])
  return (y * naive.silu(z)) @ p["out_proj"]["kernel"]


def _spread(params, seed):
  """Move dt, A and D away from their init and scale the projections up, so that the
  recurrence dominates an output of order 1."""
  rng = np.random.default_rng(seed)
  p = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params["params"])
  p["in_proj"]["kernel"] = 2 * p["in_proj"]["kernel"]
  p["out_proj"]["kernel"] = 3 * p["out_proj"]["kernel"]
  for name in ("forward", "backward"):
    if name in p:
      q = p[name]
      dt = rng.uniform(0.2, 1.0, q["dt_bias"].shape)
      q["dt_bias"] = dt + np.log(-np.expm1(-dt))
      q["A_log"] = np.log(rng.uniform(0.1, 2.0, q["A_log"].shape))
      q["D"] = 0.1 * rng.normal(size=q["D"].shape)
      q["x_proj"]["kernel"] = 3 * q["x_proj"]["kernel"]
  return p


@functools.lru_cache(maxsize=None)
def _jitted(mixer):
  """mixer.apply, jitted once per mixer (compiled again for each new shape only)."""
  return jax.jit(lambda v, x, mask: mixer.apply(v, x, mask, deterministic=True))


def _apply(mixer, p, x, mask):
  variables = {"params": jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float32), p)}
  return np.asarray(_jitted(mixer)(variables, jnp.asarray(x, jnp.float32), jnp.asarray(mask)),
                    np.float64)


def _init(mixer, x, mask, seed=1):
  return mixer.init(jax.random.PRNGKey(seed), x, jnp.asarray(mask), deterministic=True)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_block_matches_a_numpy_implementation(bidirectional):
  """Rows with trailing padding (LRA's) equal the numpy block on their real tokens alone."""
  rng = np.random.default_rng(2)
  x = rng.normal(size=(3, LENGTH, WIDTH))
  mask = helpers.trailing_mask([LENGTH, 4, 1], LENGTH)
  mixer = Mamba(state_size=STATE, conv_kernel=3, dt_rank=2, bidirectional=bidirectional)
  p = _spread(_run(lambda: _init(mixer, jnp.zeros((1, LENGTH, WIDTH)), mask[:1])), seed=3)
  got = _apply(mixer, p, x, mask)
  for row, real in enumerate(mask.sum(1)):
    expected = _np_block(p, x[row, :real], bidirectional)
    np.testing.assert_allclose(got[row, :real], expected, rtol=1e-4, atol=1e-5)
  assert np.abs(got[0]).max() > 0.1  # not a trivially small output


def test_unidirectional_outputs_ignore_future_tokens():
  rng = np.random.default_rng(4)
  x = rng.normal(size=(1, LENGTH, WIDTH))
  mask = np.ones((1, LENGTH), bool)
  for bidirectional in (False, True):
    mixer = Mamba(state_size=STATE, bidirectional=bidirectional)
    p = _spread(_run(lambda: _init(mixer, jnp.asarray(x), mask)), seed=5)
    for t in (1, 3, LENGTH - 1):
      changed = x.copy()
      changed[:, t:] += 10 * rng.normal(size=changed[:, t:].shape)
      before, after = _apply(mixer, p, x, mask), _apply(mixer, p, changed, mask)
      past = np.abs(after[:, :t] - before[:, :t]).max()
      if bidirectional:
        assert past > 1e-3  # the backward scan does see the future
      else:
        assert past < 1e-5, (t, past)
      assert np.abs(after[:, t:] - before[:, t:]).max() > 1e-3


@pytest.mark.parametrize("bidirectional", [False, True])
def test_padding_is_inert(bidirectional):
  """Noise in the trailing padding changes nothing at real positions, and every row equals its
  truncation to its real tokens (the backward direction starts at the last real token)."""
  rng = np.random.default_rng(6)
  x = rng.normal(size=(4, LENGTH, WIDTH))
  mask = helpers.trailing_mask([LENGTH, 5, 2, 1], LENGTH)
  noisy = np.where(mask[..., None], x, 100 * rng.normal(size=x.shape))
  mixer = Mamba(state_size=STATE, conv_kernel=3, bidirectional=bidirectional)
  p = _spread(_run(lambda: _init(mixer, jnp.asarray(x), mask)), seed=7)
  got, got_noisy = _apply(mixer, p, x, mask), _apply(mixer, p, noisy, mask)
  np.testing.assert_allclose(got_noisy[mask], got[mask], rtol=1e-5, atol=1e-6)
  for row, real in enumerate(mask.sum(1)):
    alone = _apply(mixer, p, x[row:row + 1, :real], np.ones((1, real), bool))
    np.testing.assert_allclose(got[row, :real], alone[0], rtol=1e-5, atol=1e-6)


def test_bidirectional_is_the_mean_of_two_causal_blocks():
  """Bidirectional = (forward block(x) + reversed(backward block(reversed x))) / 2, where each
  block is the causal mixer with the shared in_proj / out_proj and that direction's own
  parameters (out_proj is linear and the gate is per position)."""
  rng = np.random.default_rng(8)
  x = rng.normal(size=(2, LENGTH, WIDTH))
  mask = np.ones((2, LENGTH), bool)
  both = Mamba(state_size=STATE, bidirectional=True)
  p = _spread(_run(lambda: _init(both, jnp.asarray(x), mask)), seed=9)
  assert set(p["forward"]) == set(p["backward"])
  one = Mamba(state_size=STATE)
  causal = lambda direction, x: _apply(one, dict(in_proj=p["in_proj"], out_proj=p["out_proj"],
                                                 forward=p[direction]), x, mask)
  expected = 0.5 * (causal("forward", x) + causal("backward", x[:, ::-1])[:, ::-1])
  np.testing.assert_allclose(_apply(both, p, x, mask), expected, rtol=1e-5, atol=1e-6)
  assert np.abs(causal("forward", x) - expected).max() > 1e-2  # the backward part counts


def test_official_initialisation():
  width, state = 256, 16
  x, mask = jnp.zeros((1, 3, width)), jnp.ones((1, 3), bool)
  # The parameters do not depend on the scan (test_chunked_mixer_equals_the_associative_mixer):
  # the associative one is cheaper to compile.
  mixers = (Mamba(state_size=state, bidirectional=True, form="associative"),
            Mamba(state_size=state, dt_min=1e-6, dt_max=1e-3, dt_rank=8, form="associative"))
  params = _run(lambda: [m.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
                         for m in mixers])
  p = params[0]
  inner, rank = 2 * width, 16  # expand 2; dt_rank "auto" = ceil(256 / 16)
  assert sorted(p) == ["backward", "forward", "in_proj", "out_proj"]
  for q in (p["forward"], p["backward"]):
    assert q["x_proj"]["kernel"].shape == (inner, rank + 2 * state)
    assert q["dt_proj"]["kernel"].shape == (rank, inner) and q["conv_weight"].shape == (4, inner)
    np.testing.assert_allclose(q["A_log"], np.log(np.tile(np.arange(1, state + 1), (inner, 1))))
    np.testing.assert_array_equal(q["D"], 1.0)
  dt = naive.softplus(np.float64(p["forward"]["dt_bias"]))  # log-uniform in [0.001, 0.1]
  assert np.all((dt > 0.001 * (1 - 1e-4)) & (dt < 0.1 * (1 + 1e-4)))
  quartiles = (np.quantile(np.log(dt), [0.25, 0.5, 0.75]) - np.log(1e-3)) / np.log(100)
  np.testing.assert_allclose(quartiles, [0.25, 0.5, 0.75], atol=0.1)
  # Vim's backward dt_proj_b gets no dt init and _init_weights zeroes its bias: dt = ln 2.
  np.testing.assert_array_equal(p["backward"]["dt_bias"], 0.0)
  # PyTorch's defaults, uniform in +-1/sqrt(fan_in); dt_proj in +-1/sqrt(R).
  for kernel, fan_in in ((p["in_proj"]["kernel"], width), (p["out_proj"]["kernel"], inner),
                         (p["forward"]["x_proj"]["kernel"], inner),
                         (p["forward"]["conv_weight"], 4), (p["forward"]["conv_bias"], 4),
                         (p["forward"]["dt_proj"]["kernel"], rank)):
    bound = fan_in ** -0.5
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound
  assert abs(np.var(p["in_proj"]["kernel"]) * 3 * width - 1) < 0.05
  # out_proj / sqrt(n_layer) (the peers' rescale_prenorm_residual, one residual per layer).
  deep = _run(lambda: Mamba(state_size=state, num_layers=4, form="associative").init(
      jax.random.PRNGKey(0), x, mask, deterministic=True)["params"])
  assert abs(np.var(deep["out_proj"]["kernel"]) * 3 * inner * 4 - 1) < 0.05
  assert np.abs(deep["out_proj"]["kernel"]).max() <= inner ** -0.5 / 2
  # dt_min below the floor: dt starts at 1e-4 or more.
  dt = naive.softplus(np.float64(params[1]["forward"]["dt_bias"]))
  assert np.all(dt >= 1e-4 * (1 - 1e-3)) and np.all(dt <= 1e-3 * (1 + 1e-3))
  assert params[1]["forward"]["dt_proj"]["kernel"].shape == (8, inner)


def test_optimizer_group_takes_a_log_d_and_dt_bias_of_both_directions():
  model = models.build(helpers.tiny_model("mamba", attention=dict(bidirectional=True)),
                       vocab_size=10, num_classes=2, max_len=6, pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = optim.param_labels(params, Mamba.OPTIMIZER_GROUP)
  group = sorted(jax.tree_util.keystr(k) for k, v in
                 jax.tree_util.tree_flatten_with_path(labels)[0] if v == optim.SSM)
  # 2 layers x 2 directions x (A_log, D, dt_bias), nothing else.
  assert len(group) == 12 and all("['mixer']" in k for k in group)
  assert {k.rsplit("'", 2)[-2] for k in group} == {"A_log", "D", "dt_bias"}


def test_settings_and_errors():
  assert registry.default_settings("mamba") == dict(
      state_size=16, expand=2, conv_kernel=4, dt_rank="auto", dt_min=0.001, dt_max=0.1,
      bidirectional=False, form="chunked", chunk_size=32, allow_neg_eigval=False)
  for bad, match in ((dict(state_size=0), "state_size=0 .* >= 1"),
                     (dict(expand=1.5), "expand=1.5 .* >= 1"),
                     (dict(conv_kernel=0), "conv_kernel=0 .* >= 1"),
                     (dict(dt_rank="big"), "dt_rank='big' .* 'auto' or an integer"),
                     (dict(dt_rank=0), "dt_rank=0 .* 'auto' or an integer"),
                     (dict(dt_rank=True), "dt_rank=True"),
                     (dict(dt_min=0.1, dt_max=0.01), "<= config.model.attention.dt_max"),
                     (dict(dt_min=0.0), "dt_min=0.0 .* > 0"),
                     (dict(bidirectional=1), "True or False"),
                     (dict(form="fast"), "form='fast' .* 'chunked', 'associative'"),
                     (dict(chunk_size=0), "chunk_size=0 .* >= 1")):
    with pytest.raises(SettingError, match=match):
      Mamba(**bad)
  with pytest.raises(SettingError, match="attention_dropout_rate"):
    Mamba(dropout_rate=0.1)
  with pytest.raises(SettingError, match="state_size"):
    registry.make("mamba", dict(d_state=8))


def test_the_old_name_scan_is_refused_naming_form():
  """`scan` is the family's `form` now (one name for one idea): a config file that sets it,
  a --config override that asks for it and the registry's make each refuse it in one line
  naming the new setting."""
  from lra.configs import listops
  line = ("config.model.attention.scan was renamed: set config.model.attention.form "
          "instead")
  config = listops.get_config("mamba,cpu")
  attempts = [lambda: registry.make("mamba", {"scan": "associative"}),
              lambda: registry.check_settings("mamba", list(config.model.attention) + ["scan"]),
              lambda: config.model.attention.scan]  # how an override reaches it
  for attempt in attempts:
    with pytest.raises(SettingError) as error:
      attempt()
    assert str(error.value) == line
  assert registry.make("mamba", {"form": "associative"}).form == "associative"
