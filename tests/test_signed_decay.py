"""Signed decays (Grazzi et al. 2025, "Unlocking State-Tracking in Linear RNNs Through Negative
Eigenvalues"; models/ops/signed.py): the core's both forms, given log|a| and the signs, against
a float64 loop over the signed numbers themselves (scalar, vector, delta rule with a scalar
decay, exponential write gate; both directions; decays of exactly 0, -1 and 1), with the
chunked gradients equal to the recurrent ones and finite; padding inert under negative decays;
the extension a -> 2a - 1 from log a; Mamba's signed selective scan in both forms; each mixer's
allow_neg_eigval (both forms equal, the transitions formed reaching below 0); and the
construction: a GLA layer with hand-set weights whose decay is -1 on a "1" and +1 on a "0"
reads the parity of every prefix of random strings of 64 bits, which the same weights with
decays in [0, 1] cannot."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.blocks import recurrent
from lra.models.ops import selective_scan as scan
from lra.models.ops.matrix_recurrence import recurrence
from lra.models.ops.signed import LOG_ZERO, extended
from tests import helpers, naive
from tests.helpers import run_once

B, L, H, K, V = 2, 11, 2, 3, 4  # 11: no multiple of the chunk, 4


def _signed_inputs(seed: int, kind: str):
  """q, k, v, the signed decays a (exact 0, -1 and 1 among them) and the other gates."""
  rng = np.random.default_rng(seed)
  q, k, v = rng.normal(size=(B, L, H, K)), rng.normal(size=(B, L, H, K)), rng.normal(
      size=(B, L, H, V))
  a = rng.uniform(-1.0, 1.0, size=(B, L, H, K) if kind == "vector" else (B, L, H))
  a.flat[::7], a.flat[3::11], a.flat[5::13] = -1.0, 0.0, 1.0
  gates = {}
  if kind == "delta":  # stable for |k| = 1 and beta in (0, 1)
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    gates["beta"] = rng.uniform(0.05, 1.0, size=(B, L, H))
  if kind == "write":
    gates["log_write"] = rng.normal(size=(B, L, H)) * 3
  return q, k, v, a, gates


def _mask():
  mask = np.ones((B, L), bool)
  mask[1, 7:] = False
  mask[1, 2] = False  # a hole
  return mask


def _true(o, m):
  return o if m is None else o * jnp.exp(m)[..., None]


def _signed_run(mask, a, form, reverse, q, k, v, log_a, gates):
  """The core's true outputs under the signed decays a (log magnitudes log_a)."""
  return _true(*recurrence(q, k, v, jnp.asarray(mask), log_decay=log_a,
                           negative=jnp.asarray(a < 0), form=form, chunk_size=4,
                           reverse=reverse, **gates))


def _log_magnitude(a):
  with np.errstate(divide="ignore"):
    return np.log(np.abs(a))  # -inf at the zeros


def _check_outputs(outputs, q, k, v, a, gates):
  """outputs: [recurrent, chunked] forward, then the same from the end."""
  for i, reverse in enumerate((False, True)):
    expected = naive.signed_loop(q, k, v, _mask(), a, reverse=reverse, **gates)
    for o in outputs[2 * i:2 * i + 2]:
      np.testing.assert_allclose(o, expected, atol=2e-5 * np.abs(expected).max(), rtol=2e-4)


@pytest.mark.parametrize("kind", ["scalar", "vector", "write"])
def test_both_forms_equal_the_signed_loop(kind):
  """Both forms, both directions, equal the float64 loop over the signed decays (exact 0, -1
  and 1 among them: a log magnitude of -inf included). The delta rule's: below."""
  q, k, v, a, gates = _signed_inputs(0, kind)
  run = functools.partial(_signed_run, _mask(), a)
  outputs = run_once(lambda *args: [run(f, r, *args) for r in (False, True)
                                    for f in ("recurrent", "chunked")],
                     q, k, v, _log_magnitude(a), gates)
  _check_outputs(outputs, q, k, v, a, gates)


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow(
    reason="the delta rule's, the hardest, runs by default")) for k in ("scalar", "vector",
                                                                           "write")] + ["delta"])
def test_chunked_gradients_equal_the_recurrent_ones_under_signs(kind):
  """The chunked form's gradients (of q, k, v, the log magnitudes and the gates) equal the
  recurrent form's and are finite, decays of exactly 0 included (from the end: reverse); and
  both forms' outputs equal the float64 loop (the delta rule's only here)."""
  q, k, v, a, gates = _signed_inputs(0, kind)
  cotangent = np.random.default_rng(1).normal(size=(B, L, H, V))
  run = functools.partial(_signed_run, _mask(), a)
  loss = lambda form, *args: jnp.sum(run(form, True, *args) * cotangent)

  def program(*args):
    outputs = [run(f, r, *args) for r in (False, True) for f in ("recurrent", "chunked")]
    return outputs, [jax.grad(functools.partial(loss, f), argnums=(0, 1, 2, 3, 4))(*args)
                     for f in ("recurrent", "chunked")]

  outputs, (grad_r, grad_c) = run_once(program, q, k, v, _log_magnitude(a), gates)
  _check_outputs(outputs, q, k, v, a, gates)
  for r, c in zip(*(jax.tree_util.tree_leaves(g) for g in (grad_r, grad_c))):
    assert np.all(np.isfinite(c)) and np.all(np.isfinite(r))
    np.testing.assert_allclose(c, r, atol=1e-4 * max(1.0, np.abs(r).max()), rtol=1e-3)


@pytest.mark.parametrize("kind", ["vector", pytest.param("delta", marks=pytest.mark.slow(
    reason="the padding's signs are the same code for every kind: one runs by default"))])
def test_padding_is_inert_under_negative_decays(kind):
  """Padded positions inside the rows (holes) and at their end, with decays -1 and -0.5 that
  would flip the state, leave it alone (a = +1): in both forms the real outputs equal those of
  the rows with the padded positions deleted, and padded ones are 0."""
  q, k, v, a, gates = _signed_inputs(2, kind)
  mask = np.ones((B, L), bool)
  mask[:, [2, 5, 9, 10]] = False
  a[:, [2, 9]], a[:, [5, 10]] = -1.0, -0.5
  real = np.flatnonzero(mask[0])
  cut = lambda x: x[:, real]

  def program():
    out = []
    for form in ("recurrent", "chunked"):
      run = functools.partial(_signed_run, form=form, reverse=False)
      out.append((run(mask, a, q=q, k=k, v=v, log_a=_log_magnitude(a), gates=gates),
                  run(np.ones((B, real.size), bool), cut(a), q=cut(q), k=cut(k), v=cut(v),
                      log_a=_log_magnitude(cut(a)), gates={n: cut(g) for n, g in gates.items()})))
    return out

  for padded, deleted in run_once(program):
    np.testing.assert_allclose(np.asarray(padded)[:, real], deleted, atol=1e-5, rtol=1e-5)
    assert np.all(np.asarray(padded)[:, ~mask[0]] == 0)


def test_extension_is_two_a_minus_one_with_no_nan_at_zero():
  """extended(log a) = (log|2a - 1|, 2a - 1 < 0) to float32's precision at both ends (a near
  1 and near 0); at a = 1/2 the log magnitude is LOG_ZERO and its gradient finite."""
  log_a = np.concatenate([-np.logspace(-7, 2, 40), [np.log(0.5), 0.0]])
  got_log, got_negative = jax.jit(extended)(jnp.asarray(log_a, jnp.float32))
  exact = 2.0 * np.exp(log_a) - 1.0
  nonzero = exact != 0
  np.testing.assert_allclose(np.asarray(got_log)[nonzero], np.log(np.abs(exact[nonzero])),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(got_negative), exact < 0)
  assert float(got_log[-2]) == LOG_ZERO and float(got_log[-1]) == 0.0
  grad = jax.jit(jax.grad(lambda x: jnp.sum(extended(x)[0])))(jnp.asarray(log_a, jnp.float32))
  assert np.all(np.isfinite(np.asarray(grad)))


def _scan_loop(u, dt, A, Bm, C, D):
  """One row of Mamba's signed scan: s_t = (2 exp(dt_t A) - 1) s_{t-1} + dt_t B_t u_t, float64."""
  s, y = np.zeros(A.shape), np.zeros(u.shape)
  for t in range(u.shape[0]):
    s = (2 * np.exp(dt[t][:, None] * A) - 1) * s + (dt[t] * u[t])[:, None] * Bm[t][None, :]
    y[t] = s @ C[t] + D * u[t]
  return y


def test_signed_selective_scan_both_forms():
  """The associative and the chunked signed scan (chunks of 3, backward groups of 2 chunks)
  equal a float64 loop, and the chunked one's custom gradients the associative one's."""
  rng = np.random.default_rng(3)
  batch, length, inner, state = 2, 7, 3, 2
  u, dt = rng.normal(size=(batch, length, inner)), rng.uniform(0.05, 2.0, (batch, length, inner))
  A = -rng.uniform(0.5, 2.0, (inner, state))
  Bm, C = rng.normal(size=(2, batch, length, state))
  D = rng.normal(size=inner)
  args = [jnp.asarray(x, jnp.float32) for x in (u, dt, A, Bm, C, D)]
  cotangent = rng.normal(size=u.shape)
  forms = (functools.partial(scan.selective_scan, signed=True),
           functools.partial(scan.chunked_selective_scan, chunk=3, group=6, signed=True))

  def program(*args):
    value_and_grads = lambda f: jax.value_and_grad(
        lambda *a: jnp.sum(f(*a) * cotangent), argnums=tuple(range(6)))(*args)
    return [f(*args) for f in forms], [value_and_grads(f)[1] for f in forms]

  (y_assoc, y_chunk), (g_assoc, g_chunk) = run_once(program, *args)
  expected = np.stack([_scan_loop(u[i], dt[i], A, Bm[i], C[i], D) for i in range(batch)])
  for y in (y_assoc, y_chunk):
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
  for got, want in zip(g_chunk, g_assoc):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  assert np.min(2 * np.exp(dt[..., None] * A) - 1) < -0.5  # decays well below 0


# Each mixer with a decay the flag extends: its reference form, and parameters that push the
# decays below 1/2 (so 2a - 1 < 0): a strong dt or a closed forget gate.
MIXERS = {"mamba": "associative", "mamba2": "recurrent", "gla": "recurrent",
          "mlstm": "recurrent"}


def _push(name: str, params):
  p = helpers.perturb({"params": params}, seed=4, scale=0.3)["params"]
  if name == "mamba":
    p["forward"]["dt_bias"] = jnp.full_like(p["forward"]["dt_bias"], 0.5)
  if name == "mamba2":  # heads of decays e^-0.13 and e^-2.6
    p["dt_bias"], p["A_log"] = jnp.full_like(p["dt_bias"], 1.0), jnp.log(jnp.asarray([0.1, 2.0]))
  if name == "gla":
    p["gk_proj_up"]["bias"] = p["gk_proj_up"]["bias"].at[..., 0].set(-20.0)  # alpha 0.29
  if name == "mlstm":
    p["fgate_bias"] = jnp.asarray([-3.0, 3.0])
  return {"params": p}


def _transitions(monkeypatch):
  """Records the transitions each mixer forms (a list that a traced program returns): the
  signed decays handed to the core (sign times exp of the log magnitude), or those of Mamba's
  scan (2 exp(dt A) - 1 when signed, else exp(dt A))."""
  seen = []
  core = recurrent.recurrence

  def spy_core(*args, log_decay=None, negative=None, **kwargs):
    sign = 1.0 if negative is None else 1.0 - 2.0 * negative.astype(jnp.float32)
    seen.append(sign * jnp.exp(log_decay))
    return core(*args, log_decay=log_decay, negative=negative, **kwargs)

  def spy_scan(real):
    def spy(u, dt, A, *args, signed=False, **kwargs):
      a = jnp.exp(dt[..., None] * A[None, None])
      seen.append(2.0 * a - 1.0 if signed else a)
      return real(u, dt, A, *args, signed=signed, **kwargs)
    return spy

  monkeypatch.setattr(recurrent, "recurrence", spy_core)
  mamba = registry.get("mamba").__module__
  module = __import__(mamba, fromlist=["selective_scan"])
  for name in ("selective_scan", "chunked_selective_scan"):
    monkeypatch.setattr(module, name, spy_scan(getattr(module, name)))
  return seen


def _make(name: str, **settings):
  settings = {**helpers.tiny_settings(name), "chunk_size": 4, **settings}
  return registry.make(name, settings, num_heads=2, qkv_dim=8)


@pytest.mark.parametrize("name", ["mamba", "mamba2"] + [pytest.param(n, marks=pytest.mark.slow(
    reason="the core's vector decay and write gate are tested signed above, and GLA's flag by "
    "the parity construction below")) for n in ("gla", "mlstm")])
def test_allow_neg_eigval_runs_both_forms_equal_with_decays_below_zero(name, monkeypatch):
  """allow_neg_eigval: the chunked form equals the reference form, and the transitions both
  form reach well below 0 and stay in [-1, 1] (without the flag they are the decays in
  [0, 1] themselves, and the outputs bit for bit the unsigned ones: tests/fingerprint.py)."""
  seen = _transitions(monkeypatch)
  x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 9, 8)), jnp.float32)
  mask = jnp.ones((2, 9), bool)
  mixers = [_make(name, form=form, allow_neg_eigval=True) for form in (MIXERS[name], "chunked")]

  def program(x):
    variables = _push(name, mixers[1].init(jax.random.PRNGKey(0), x, mask,
                                           deterministic=True)["params"])
    del seen[:]  # the initialisation's transitions
    return [m.apply(variables, x, mask, deterministic=True) for m in mixers], list(seen)

  (reference, chunked), transitions = run_once(program, x)
  np.testing.assert_allclose(chunked, reference, atol=1e-5, rtol=1e-4)
  assert len(transitions) == 2
  for a in map(np.asarray, transitions):
    assert a.min() < -0.2 and a.max() > 0.0 and a.min() >= -1.0 and a.max() <= 1.0


# The parity construction: tokens BOS, "0", "1" as features (1, is BOS, is "1", is "0").
TOKENS = np.asarray([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 1, 0]], np.float32)  # BOS, "0", "1"


def _parity_weights(params):
  """A one-head GLA (K = V = 1) set by hand: the state is written once, 1 at BOS (k = is BOS,
  v = 1), and read by q = 1; the gate gk = 6400 (is BOS + is "0" - is "1") gives log alpha =
  logsigmoid(gk) / 16 = 0 on BOS and "0" and -400 on "1": alpha 1 and 0, so 2 alpha - 1 is
  +1 on a "0" and -1 on a "1". The state is then (-1)^(ones so far), RMSNorm keeps its sign,
  the gate swish(10) > 0 and o_proj copies it to channel 0."""
  one = lambda shape, index, value=1.0: jnp.zeros(shape).at[index].set(value)
  p = jax.tree_util.tree_map(jnp.zeros_like, params)
  p["q_proj"]["kernel"] = one((4, 1, 1), (0, 0, 0))
  p["k_proj"]["kernel"] = one((4, 1, 1), (1, 0, 0))
  p["v_proj"]["kernel"] = one((4, 1, 1), (0, 0, 0))
  p["g_proj"]["kernel"] = one((4, 1, 1), (0, 0, 0), 10.0)
  p["gk_proj_down"]["kernel"] = jnp.asarray([[0.0], [1.0], [-1.0], [1.0]])
  p["gk_proj_up"]["kernel"] = jnp.full((1, 1, 1), 6400.0)
  p["output"]["norm"]["scale"] = jnp.ones_like(params["output"]["norm"]["scale"])
  p["output"]["o_proj"]["kernel"] = one((1, 1, 4), (0, 0, 0))
  return {"params": p}


def test_hand_set_gla_solves_parity_only_with_negative_decays(monkeypatch):
  """Random strings of 64 bits after BOS: with allow_neg_eigval the hand-set GLA's decays are
  exactly -1 on a "1" and +1 on a "0" and the sign of its output is the parity of every
  prefix (100%); the same weights with decays in [0, 1] (alpha itself: 0 and 1) never
  output a negative number, and no threshold on their output beats chance by much."""
  seen = _transitions(monkeypatch)
  bits = np.random.default_rng(6).integers(0, 2, size=(256, 64))
  tokens = np.concatenate([np.zeros((256, 1), int), 1 + bits], axis=1)
  x, mask = jnp.asarray(TOKENS[tokens]), jnp.ones(tokens.shape, bool)
  layers = [registry.make("gla", dict(expand_k=0.25, expand_v=0.25, gate_low_rank_dim=1,
                                      allow_neg_eigval=allow, chunk_size=16), num_heads=1,
                          qkv_dim=4) for allow in (True, False)]

  def program(x):
    variables = _parity_weights(layers[0].init(jax.random.PRNGKey(0), x[:1], mask[:1],
                                               deterministic=True)["params"])
    del seen[:]
    return [m.apply(variables, x, mask, deterministic=True)[..., 0] for m in layers], seen[0]

  (signed, unsigned), decays = run_once(program, x)
  odd = np.cumsum(bits, axis=1) % 2 == 1  # the parity of each prefix
  np.testing.assert_array_equal(np.asarray(decays)[:, 1:, 0, 0], 1.0 - 2.0 * bits)
  np.testing.assert_array_equal(np.asarray(signed)[:, 1:] < 0, odd)
  out = np.asarray(unsigned)[:, 1:]
  assert out.min() >= 0.0
  accuracy = [max(np.mean((out > c) == odd), np.mean((out > c) != odd))
              for c in np.unique(out)]
  assert max(accuracy) < 0.55
