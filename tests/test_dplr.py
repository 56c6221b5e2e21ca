"""The core's diagonal-plus-rank-one kind (models/ops/dplr.py through matrix_recurrence's
`recurrence(dplr=(e, f))`): both forms against an independent float64 numpy loop for every decay
kind with erase and write vectors apart, vector decays strong enough to underflow a chunk's
product, gradients of the chunked form against the recurrent one, padding inert, the reverse
direction, and the delta rule as its special case."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.ops import vector_decay
from lra.models.ops.matrix_recurrence import recurrence
from tests.helpers import run_once

B, L, H, K, V = 2, 11, 2, 3, 4  # 11: not a multiple of the chunk sizes 4 and 8


def _unit(a):
  return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _inputs(seed, decay, strength=(0.01, 2.0)):
  """q, k, v, log_decay, e, f; e = -beta k1, f = k2 for unit k1 != k2 (erase and write apart:
  RWKV-7's and Comba's case), beta in (0, 1)."""
  rng = np.random.default_rng(seed)
  q, k = rng.normal(size=(B, L, H, K)), rng.normal(size=(B, L, H, K))
  v = rng.normal(size=(B, L, H, V))
  shapes = {"fixed": (H,), "scalar": (B, L, H), "vector": (B, L, H, K)}
  g = None if decay == "none" else -rng.uniform(*strength, size=shapes[decay])
  beta = rng.uniform(0.05, 1.0, size=(B, L, H, 1))
  e = -beta * _unit(rng.normal(size=(B, L, H, K)))
  f = _unit(rng.normal(size=(B, L, H, K)))
  return q, k, v, g, e, f


def _numpy_loop(q, k, v, mask, g, e, f, reverse=False):
  """o_t = S_t^T q_t with S_t = (diag(a_t) + e_t f_t^T) S_{t-1} + k_t v_t^T, float64."""
  o = np.zeros(q.shape[:3] + (v.shape[-1],))
  order = range(L - 1, -1, -1) if reverse else range(L)
  for b in range(B):
    for h in range(H):
      S = np.zeros((K, V))
      for t in order:
        if not mask[b, t]:
          continue
        if g is None:
          a = np.ones(K)
        elif g.ndim == 1:
          a = np.full(K, np.exp(g[h]))
        elif g.ndim == 3:
          a = np.full(K, np.exp(g[b, t, h]))
        else:
          a = np.exp(g[b, t, h])
        S = (a[:, None] * S + np.outer(e[b, t, h], f[b, t, h] @ S)
             + np.outer(k[b, t, h], v[b, t, h]))
        o[b, t, h] = S.T @ q[b, t, h]
  return o


def _mask():
  mask = np.ones((B, L), bool)
  mask[1, 7:] = False  # row 1: 7 real tokens, then padding
  mask[0, 3] = False  # row 0: a hole
  return mask


def _core(form, chunk, reverse=False):
  def run(q, k, v, mask, g, e, f):
    o, _ = recurrence(q, k, v, mask, log_decay=g, dplr=(e, f), form=form, chunk_size=chunk,
                      reverse=reverse)
    return o
  return run


_SLOW = pytest.mark.slow(reason="the same code path as a default case, another decay kind")


@pytest.mark.parametrize("decay,reverse", [pytest.param("none", False, marks=_SLOW),
                                           pytest.param("fixed", False, marks=_SLOW),
                                           ("scalar", True), ("vector", False),
                                           pytest.param("vector", True, marks=_SLOW)])
def test_both_forms_equal_the_numpy_loop(decay, reverse):
  q, k, v, g, e, f = _inputs(0, decay)
  mask = _mask()
  expected = _numpy_loop(q, k, v, mask, g, e, f, reverse)
  for form, chunk in (("recurrent", 4), ("chunked", 4), ("chunked", 8)):
    got = run_once(jax.jit(_core(form, chunk, reverse)), *(jnp.asarray(a, jnp.float32)
                   if a is not None else None for a in (q, k, v, mask, g, e, f)))
    np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-4, atol=2e-5,
                               err_msg=f"{form} {chunk}")


def test_decays_that_underflow_a_chunk_stay_exact():
  """log a = -30 per channel and position: a chunk's product exp(-120 or less) underflows
  float32, as do exp(G_t) and any factorised exp(-G_j); the chunked form must still be exact."""
  q, k, v, g, e, f = _inputs(1, "vector", strength=(25.0, 35.0))
  g[:, 5:] = -0.05  # strong, then ordinary decays: the state must carry over exactly
  mask = _mask()
  expected = _numpy_loop(q, k, v, mask, g, e, f)
  got = run_once(jax.jit(_core("chunked", 8)), *(jnp.asarray(a, jnp.float32)
                                                 for a in (q, k, v, mask, g, e, f)))
  assert np.all(np.isfinite(np.asarray(got)))
  np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-4, atol=2e-5)


def test_each_route_is_taken_where_it_should_be():
  """Ordinary decays take the factorised route, strong ones the exact one (both tested for
  values and gradients below), so neither route is dead code; the guard measures from the
  middle of G's and Gx's range together (Gx, the decay up to t - 1, starts at 0)."""
  def factorisable(g):
    g = jnp.asarray(g, jnp.float32).reshape(1, 1, 1, 8, 1)
    G = jnp.cumsum(g, 3)
    return bool(vector_decay.factorisable(G, G - g))

  wide = 2 * vector_decay.BOUND
  assert factorisable(np.full(8, -0.5))
  assert not factorisable(np.full(8, -30.0))
  assert factorisable([0, 0, 0, 0, 1 - wide, 0, 0, 0])
  assert not factorisable([0, 0, 0, 0, -1 - wide, 0, 0, 0])
  assert not factorisable([-1 - wide, 0, 0, 0, 0, 0, 0, 0])  # G alone spans nothing


@pytest.mark.parametrize("decay,strength", [pytest.param("scalar", (0.01, 2.0), marks=_SLOW),
                                            ("vector", (0.01, 2.0)), ("vector", (25.0, 35.0))])
def test_chunked_gradients_equal_the_recurrent_ones(decay, strength):
  q, k, v, g, e, f = (jnp.asarray(a, jnp.float32) for a in _inputs(2, decay, strength))
  mask = jnp.asarray(_mask())
  cot = jnp.asarray(np.random.default_rng(3).normal(size=(B, L, H, V)), jnp.float32)

  def loss(form, *args):
    return jnp.sum(_core(form, 4)(args[0], args[1], args[2], mask, *args[3:]) * cot)

  grads = lambda form: jax.grad(functools.partial(loss, form), argnums=range(6))(
      q, k, v, g, e, f)
  both = run_once(jax.jit(lambda: (grads("chunked"), grads("recurrent"))))
  for name, a, b in zip("q k v g e f".split(), *both):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("form", ["chunked", pytest.param("recurrent", marks=_SLOW)])
def test_padding_equals_truncation_and_gets_no_gradient(form):
  q, k, v, g, e, f = (jnp.asarray(a, jnp.float32) for a in _inputs(4, "vector"))
  mask = jnp.asarray(np.arange(L)[None, :] < 7).repeat(B, axis=0)
  junk = lambda a: a.at[:, 7:].set(5.0)  # padded inputs must not matter

  def outputs(q, k, v, g, e, f):
    return _core(form, 4)(q, k, v, mask, g, e, f)

  def program():
    full = outputs(*(junk(a) for a in (q, k, v, g, e, f)))
    cut = _core(form, 4)(*(a[:, :7] for a in (q, k, v, mask, g, e, f)))
    return full, cut, jax.grad(lambda *a: jnp.sum(outputs(*a)), argnums=range(6))(
        q, k, v, g, e, f)

  full, cut, grads = run_once(jax.jit(program))
  np.testing.assert_allclose(full[:, :7], cut, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(full[:, 7:]) == 0)
  for name, d in zip("q k v g e f".split(), grads):
    assert np.all(np.asarray(d[:, 7:]) == 0), name


@pytest.mark.parametrize("form", ["chunked", pytest.param("recurrent", marks=_SLOW)])
def test_the_delta_rule_is_a_special_case(form):
  """e = -a beta k, f = k, the write beta k v^T with a scalar decay a: the delta kind."""
  q, k, v, g, _, _ = _inputs(5, "scalar")
  k = _unit(k)
  beta = np.random.default_rng(6).uniform(0.05, 1.0, size=(B, L, H))
  mask = jnp.asarray(_mask())
  as_delta, _ = recurrence(*(jnp.asarray(a, jnp.float32) for a in (q, k, v)), mask,
                           log_decay=jnp.asarray(g, jnp.float32),
                           beta=jnp.asarray(beta, jnp.float32), form=form, chunk_size=4)
  e = -(np.exp(g) * beta)[..., None] * k
  as_dplr = _core(form, 4)(*(jnp.asarray(a, jnp.float32) for a in
                             (q, beta[..., None] * k, v, mask, g, e, k)))
  np.testing.assert_allclose(as_dplr, as_delta, rtol=1e-4, atol=1e-5)


def test_refuses_gates_it_does_not_combine():
  q, k, v, g, e, f = (jnp.asarray(a, jnp.float32) for a in _inputs(7, "scalar"))
  mask = jnp.ones((B, L), bool)
  with pytest.raises(ValueError, match="dplr"):
    recurrence(q, k, v, mask, dplr=(e, f), beta=g)
  with pytest.raises(ValueError, match="dplr"):
    recurrence(q, k, v, mask, dplr=(e[..., :2], f))
