"""The recurrent family's core (models/ops/matrix_recurrence.py): both forms against an independent
numpy loop of the recurrence for every decay kind, with and without the delta rule and the
exponential write gate; the chunked form against the recurrent one for gradients; padding
inert (a padded row equals the truncated row, a hole is skipped); the reverse direction; the
stabilised outputs finite under huge gates."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.ops import vector_decay
from lra.models.ops.matrix_recurrence import recurrence
from tests.helpers import run_once

B, L, H, K, V = 2, 11, 2, 3, 4  # 11: not a multiple of the chunk sizes 4 and 3


def _inputs(seed, decay, delta=False, write=False):
  rng = np.random.default_rng(seed)
  q, k = rng.normal(size=(B, L, H, K)), rng.normal(size=(B, L, H, K))
  if delta:  # the delta rule is stable for |k| = 1 and beta in (0, 1) (DeltaNet's l2 norm)
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
  v = rng.normal(size=(B, L, H, V))
  gates = {}
  shapes = {"fixed": (H,), "scalar": (B, L, H), "vector": (B, L, H, K)}
  if decay != "none":
    gates["log_decay"] = -rng.uniform(0.01, 2.0, size=shapes[decay])
  if delta:
    gates["beta"] = rng.uniform(0.05, 1.0, size=(B, L, H))
  if write:
    gates["log_write"] = rng.normal(size=(B, L, H)) * 3
  return q, k, v, gates


def _numpy_loop(q, k, v, mask, log_decay=None, beta=None, log_write=None, reverse=False):
  """The true outputs o_t = S_t^T q_t, one position at a time, unstabilised (float64)."""
  o = np.zeros(q.shape[:3] + (v.shape[-1],))
  order = range(L - 1, -1, -1) if reverse else range(L)
  for b in range(B):
    for h in range(H):
      S = np.zeros((K, V))
      for t in order:
        if not mask[b, t]:
          continue
        if log_decay is None:
          a = np.ones(K)
        elif log_decay.ndim == 1:
          a = np.full(K, np.exp(log_decay[h]))
        elif log_decay.ndim == 3:
          a = np.full(K, np.exp(log_decay[b, t, h]))
        else:
          a = np.exp(log_decay[b, t, h])
        kt, vt = k[b, t, h], v[b, t, h]
        S = a[:, None] * S
        if beta is not None:
          S = S - beta[b, t, h] * np.outer(kt, kt @ S) + beta[b, t, h] * np.outer(kt, vt)
        else:
          w = 1.0 if log_write is None else np.exp(log_write[b, t, h])
          S = S + w * np.outer(kt, vt)
        o[b, t, h] = S.T @ q[b, t, h]
  return o


def _mask():
  mask = np.ones((B, L), bool)
  mask[1, 7:] = False
  mask[1, 2] = False  # a hole: skipped as if absent
  return mask


def _true_output(o, m):
  return o if m is None else o * np.exp(m)[..., None]


CASES = [("none", False, False), ("fixed", False, False), ("scalar", False, False),
         ("vector", False, False), ("scalar", False, True), ("none", True, False),
         ("scalar", True, False)]


@pytest.mark.parametrize("decay,delta,write", CASES)
@pytest.mark.parametrize("reverse", [False, True])
def test_both_forms_equal_the_numpy_loop(decay, delta, write, reverse):
  q, k, v, gates = _inputs(0, decay, delta, write)
  mask = _mask()

  def both(q, k, v, gates):
    run = functools.partial(recurrence, q, k, v, jnp.asarray(mask), reverse=reverse, **gates)
    return run(form="recurrent"), run(form="chunked", chunk_size=4)

  (o_r, m_r), (o_c, m_c) = run_once(both, q, k, v, gates)
  expected = _numpy_loop(q, k, v, mask, reverse=reverse, **gates)
  scale = np.abs(expected).max()
  for o, m in ((o_r, m_r), (o_c, m_c)):
    got = _true_output(np.asarray(o, np.float64), None if m is None else np.asarray(m))
    np.testing.assert_allclose(got, expected, atol=2e-5 * scale, rtol=2e-4)


@pytest.mark.parametrize("decay,delta,write", CASES)
def test_chunked_gradients_equal_the_recurrent_ones(decay, delta, write):
  q, k, v, gates = _inputs(1, decay, delta, write)
  mask = jnp.asarray(_mask())
  cotangent = np.random.default_rng(2).normal(size=(B, L, H, V))

  def loss(form, q, k, v, gates):
    o, m = recurrence(q, k, v, mask, form=form, chunk_size=3, **gates)
    o = o if m is None else o * jnp.exp(m)[..., None]
    return jnp.sum(o * cotangent)

  def grads(q, k, v, gates):
    return [jax.grad(functools.partial(loss, f), argnums=(0, 1, 2, 3))(q, k, v, gates)
            for f in ("recurrent", "chunked")]

  rec, chunk = run_once(grads, q, k, v, gates)
  for a, b in zip(jax.tree_util.tree_leaves(rec), jax.tree_util.tree_leaves(chunk)):
    assert np.all(np.isfinite(b))
    np.testing.assert_allclose(b, a, atol=1e-4 * max(1.0, np.abs(a).max()), rtol=1e-3)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_padding_equals_truncation_and_gets_no_gradient(form):
  q, k, v, gates = _inputs(3, "vector")
  mask = np.ones((B, L), bool)
  mask[:, 6:] = False

  def outputs(q, k, v, g):
    padded, _ = recurrence(q, k, v, jnp.asarray(mask), log_decay=g, form=form, chunk_size=4,
                           reverse=True)
    cut, _ = recurrence(q[:, :6], k[:, :6], v[:, :6], jnp.ones((B, 6), bool),
                        log_decay=g[:, :6], form=form, chunk_size=4, reverse=True)
    grad = jax.grad(lambda v: jnp.sum(recurrence(q, k, v, jnp.asarray(mask), log_decay=g,
                                                 form=form, chunk_size=4)[0]))(v)
    return padded, cut, grad

  padded, cut, grad = run_once(outputs, q, k, v, gates["log_decay"])
  np.testing.assert_allclose(padded[:, :6], cut, atol=1e-5, rtol=1e-5)
  assert np.all(np.asarray(padded)[:, 6:] == 0)
  assert np.all(np.asarray(grad)[:, 6:] == 0)


def test_huge_write_gates_stay_finite():
  q, k, v, gates = _inputs(4, "scalar", write=True)
  gates["log_write"] = gates["log_write"] + 200.0  # exp(200) overflows float32
  ones = np.ones((B, L, H, 1))

  def normalised(form):
    o, m = recurrence(q, k, np.concatenate([v, ones], -1), jnp.asarray(_mask()), form=form,
                      chunk_size=4, **gates)
    return o[..., :-1] / (jnp.maximum(jnp.abs(o[..., -1:]), jnp.exp(-m)[..., None]) + 1e-6)

  rec, chunk = run_once(lambda: (normalised("recurrent"), normalised("chunked")))
  assert np.all(np.isfinite(rec)) and np.all(np.isfinite(chunk))
  # A ratio of sums whose terms cancel: float32 rounding of exponents near 200 shows.
  np.testing.assert_allclose(chunk, rec, atol=1e-4, rtol=2e-3)


@pytest.mark.parametrize("sub", [2, 3])
def test_vector_decay_sub_chunks(monkeypatch, sub):
  """A chunk of 6 in sub-chunks of 2 or 3 (the default 16 needs longer inputs): values and
  gradients equal the loop's, under decays of e^-60 per step in one head (the factorised
  form's overflow: its guard takes the sub-chunked form)."""
  monkeypatch.setattr(vector_decay, "SUB", sub)
  q, k, v, gates = _inputs(5, "vector")
  gates["log_decay"][0, :, 0] = -60.0
  mask = _mask()
  cotangent = np.random.default_rng(6).normal(size=(B, L, H, V))

  def outputs(q, k, v, g):
    run = lambda form, k: recurrence(q, k, v, jnp.asarray(mask), log_decay=g, form=form,
                                     chunk_size=6)[0]
    grad = lambda form: jax.grad(lambda k: jnp.sum(run(form, k) * cotangent))(k)
    return run("chunked", k), grad("chunked"), grad("recurrent")

  o, grad_c, grad_r = run_once(outputs, q, k, v, gates["log_decay"])
  expected = _numpy_loop(q, k, v, mask, **gates)
  np.testing.assert_allclose(o, expected, atol=2e-5 * np.abs(expected).max(), rtol=2e-4)
  assert np.all(np.isfinite(grad_c))
  np.testing.assert_allclose(grad_c, grad_r, atol=1e-4 * np.abs(grad_r).max(), rtol=1e-3)


@pytest.mark.parametrize("write", [False, True])
def test_grouped_queries_and_keys_equal_repeated_ones(write):
  """q and k of one group read by both heads (Mamba-2's shared B and C) equal the same q and
  k given to each head, in both forms."""
  q, k, v, gates = _inputs(7, "scalar", write=write)
  q1, k1 = q[:, :, :1], k[:, :, :1]
  mask = jnp.asarray(_mask())

  def outputs(q1, k1, v, gates):
    grouped = [recurrence(q1, k1, v, mask, form=f, chunk_size=4, **gates)[0]
               for f in ("chunked", "recurrent")]
    q2, k2 = (jnp.concatenate([a, a], axis=2) for a in (q1, k1))
    return grouped, recurrence(q2, k2, v, mask, form="recurrent", **gates)[0]

  (chunked, recurrent), expected = run_once(outputs, q1, k1, v, gates)
  for o in (chunked, recurrent):
    np.testing.assert_allclose(o, expected, atol=1e-5, rtol=1e-4)


def _spy_forms(monkeypatch):
  """The names of the vector decay's score forms as they run (not as they are traced: a
  lax.cond traces both branches)."""
  ran = []
  for name in ("factorised", "sub_chunked"):
    def spy(*args, form=getattr(vector_decay, name), name=name):
      jax.debug.callback(lambda: ran.append(name))
      return form(*args)
    monkeypatch.setattr(vector_decay, name, spy)
  return ran


# Vector decays and the score form their guard must take (chunks of 4 positions).
GUARD_CASES = {"ordinary": "factorised",  # at most e^-8 over a chunk
               "strong": "sub_chunked",  # e^-60 a position: a chunk's product underflows
               "one_strong_chunk": "sub_chunked",  # e^-60 in positions 4-7 of one row only
               "signed": "factorised"}  # decays in [-1, -0.2] and [0.2, 1]


@pytest.mark.parametrize("case", list(GUARD_CASES))
def test_vector_decay_guard_takes_the_right_form_and_stays_exact(monkeypatch, case):
  """The chunked form equals the recurrent one (values and gradients of q, k, v and the log
  decays), whichever score form the guard takes; and it takes the factorised one under
  ordinary and signed decays, the sub-chunked one once any chunk's decay exceeds the
  factorised form's range (one predicate a call: one strong chunk is enough)."""
  ran = _spy_forms(monkeypatch)
  q, k, v, gates = _inputs(8, "vector")
  g, negative = gates["log_decay"], None
  if case == "strong":
    g = np.full_like(g, -60.0)
  if case == "one_strong_chunk":
    g[0, 4:8, 1] = -60.0
  if case == "signed":
    a = np.random.default_rng(9).uniform(0.2, 1.0, size=g.shape)
    a[::2] = -a[::2]
    g, negative = np.log(np.abs(a)), jnp.asarray(a < 0)
  mask = jnp.asarray(_mask())
  cotangent = np.random.default_rng(10).normal(size=(B, L, H, V))

  def program(q, k, v, g):
    run = lambda form, *args: recurrence(*args[:3], mask, log_decay=args[3], form=form,
                                         negative=negative, chunk_size=4)[0]
    loss = lambda form, *args: jnp.sum(run(form, *args) * cotangent)
    return [(run(f, q, k, v, g), jax.grad(functools.partial(loss, f), argnums=(0, 1, 2, 3))(
        q, k, v, g)) for f in ("recurrent", "chunked")]

  (o_r, grad_r), (o_c, grad_c) = run_once(program, q, k, v, g)
  assert set(ran) == {GUARD_CASES[case]}
  np.testing.assert_allclose(o_c, o_r, atol=2e-5 * np.abs(o_r).max(), rtol=2e-4)
  for r, c in zip(grad_r, grad_c):
    assert np.all(np.isfinite(c))
    np.testing.assert_allclose(c, r, atol=1e-4 * max(1.0, np.abs(r).max()), rtol=1e-3)


def test_vector_decay_guard_bound_is_about_the_chunk_middle():
  """factorisable: the exponents are measured from the middle of each chunk's range of G,
  so a range of 2 BOUND passes and a little more does not, wherever the range lies (a large
  common decay before it costs nothing); a NaN never passes."""
  bound = vector_decay.BOUND
  chunks = lambda *values: jnp.asarray(values, jnp.float32).reshape(1, 1, 1, -1, 1)
  assert vector_decay.factorisable(chunks(0.0, -bound, -2 * bound))
  assert vector_decay.factorisable(chunks(-1000.0, -1000.0 - 2 * bound))
  assert not vector_decay.factorisable(chunks(0.0, -2 * bound - 1.0))
  assert not vector_decay.factorisable(chunks(0.0, jnp.nan))
