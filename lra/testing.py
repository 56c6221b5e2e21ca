"""The contract every token mixer meets, as a public check for your own mixer's tests:

  import lra.testing, my_attention        # my_attention registers "relu_linear"
  def test_contract():
    lra.testing.check_mixer("relu_linear")  # or the class, or with settings={...}

The one implementation of the contract: tests/test_mixer_contract.py runs it over every mixer
of models/. It builds the mixer as the encoder does (registry.make with the encoder's fields,
its shared module from make_shared) at a tiny size, compiles one program that holds every
check's computation, and raises AssertionError naming each failed property with its numbers:
  shape     float32 BxLxD out for BxLxD in;             finite   outputs finite, padding too
  padding   real outputs ignore the padded content;     truncation  trailing padding = cut
  dropout   finite, and two keys differ where the mixer has attention weights to drop
  gradients finite for an all-padding row; padded inputs get none from real outputs; every
            parameter gets one
  bf16      a bfloat16 run within BF16_TOLERANCE of float32; length1  one token works
  jit       no-jit equals jit;                          subquadratic  a mixer that claims
            SUBQUADRATIC forms no array with two sequence-length axes (forward or backward)
LENGTH (13) is odd and a multiple of no small block size; the tiny encoder fields are HEADS,
QKV and WIDTH. Also the shared pieces of the project's tests: one-shot compiles, contract masks
and the jaxpr shape walk.
"""
from __future__ import annotations

import contextlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.models import registry

HEADS, QKV, WIDTH = 2, 8, 8
LENGTH, SHORT = 13, 5  # not a multiple of the tiny blocks (4 or 3); row 1 real up to SHORT
SQUARE_LENGTH = 37  # for the shape walk: no other dimension (batch, width, blocks) is 37
DROPOUT = 0.3
# bfloat16 keeps 8 bits of mantissa (relative step 2^-8 = 0.4%); after the projections,
# softmax or scan of a tiny mixer the real outputs stay within 5% of their float32 scale.
BF16_TOLERANCE = 0.05


def run_once(fn, *args):
  """Compiles fn once (XLA backend optimisation off: each graph runs once) and runs it."""
  return compile_once(fn, *args)(*args)


def compile_once(fn, *args):
  """The compiled fn for these arguments, at the cheapest XLA optimisation level."""
  return jax.jit(fn).lower(*args).compile({"xla_backend_optimization_level": 0})


def contract_mask(length: int, short: int) -> np.ndarray:
  """4xL (True = a real token): full; trailing padding after `short`; a hole at 2 (when
  L > 2); all padding."""
  mask = np.ones((4, length), bool)
  mask[1, short:] = False
  if length > 2:
    mask[2, 2] = False
  mask[3] = False
  return mask


def noise_where_padded(x_BxLxD, mask_BxL, rng, scale: float = 100.0):
  """x with large random values at the padded positions (what must not leak)."""
  noise = jnp.asarray(rng.normal(size=x_BxLxD.shape) * scale, x_BxLxD.dtype)
  return jnp.where(jnp.asarray(mask_BxL)[..., None], x_BxLxD, noise)


def array_shapes(jaxpr):
  """Every intermediate shape in a jaxpr, nested calls included (scan, cond, remat, pjit,
  custom_vjp bodies: any parameter that is or holds a (closed) jaxpr)."""
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      yield tuple(getattr(var.aval, "shape", ()))
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from array_shapes(inner)


def length_squared_shapes(fn, *args, length: int) -> list:
  """The shapes in fn's traced program (forward and whatever fn differentiates) that have two
  or more axes of at least `length` (a mixer may pad the length up to whole blocks first).
  Pick a length that no other dimension reaches."""
  jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
  return sorted({s for s in array_shapes(jaxpr) if sum(d >= length for d in s) >= 2})


class Findings:
  """Collects every failed check (its key, what failed, the numbers), so one run reports them
  all: `assert_none` raises one AssertionError listing them."""

  def __init__(self, label: str):
    self.label, self.failed = label, {}

  def check(self, ok, key: str, what: str):
    if not bool(ok):
      self.failed[key] = what

  def close(self, a, b, key: str, what: str, rtol=1e-5, atol=1e-5):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    err = np.abs(a - b) - rtol * np.abs(b)
    self.check(np.all(err <= atol), key, f"{what}: max |diff| {np.max(np.abs(a - b)):.3g}")

  def assert_none(self, level: str):
    assert not self.failed, f"{self.label} breaks the {level} contract:\n  " + \
        "\n  ".join(f"[{k}] {v}" for k, v in self.failed.items())


def finite(tree) -> bool:
  return all(np.all(np.isfinite(np.asarray(leaf, np.float32)))
             for leaf in jax.tree_util.tree_leaves(tree))


def takes_dropout(mixer) -> bool:
  """Whether the mixer (a name or a class) has attention weights to drop."""
  cls = mixer if isinstance(mixer, type) else registry.get(mixer)
  return bool(cls.ATTENTION_DROPOUT)


def _dropout(mixer) -> float:
  return DROPOUT if takes_dropout(mixer) else 0.0


class Harness(nn.Module):
  """The mixer as the encoder builds it (registry.make with the encoder's fields), its shared
  module (registry.make_shared, e.g. Linformer's layer-shared E) made in this scope."""
  mixer: str | type
  settings: dict
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    shared = registry.make_shared(self.mixer, self.settings, num_heads=HEADS, qkv_dim=QKV,
                                  dtype=self.dtype)
    module = registry.make(self.mixer, self.settings, num_heads=HEADS, qkv_dim=QKV,
                           dropout_rate=_dropout(self.mixer), dtype=self.dtype, layer_index=1,
                           shared=shared, name="mixer")
    return module(x_BxLxD, mask_BxL, deterministic=deterministic)


def _inputs(length: int, seed: int):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(4, length, WIDTH)), jnp.float32)
  mask = contract_mask(length, min(SHORT, length))
  return x, jnp.asarray(mask), noise_where_padded(x, mask, rng)


def _mixer_program(harness, harness16, truncate: bool):
  """Everything the checks need, as one function of the inputs (one compile). Each call of
  the mixer inlines another copy of it into the program, so the calls are few: the clean and
  noisy rows share one batch, and vmap runs two dropout keys through one copy."""

  def program(x, mask, noisy, cotangent, x1, mask1):
    key = jax.random.PRNGKey(0)
    mask2 = jnp.concatenate([mask, mask])
    out2, params = harness.init_with_output({"params": key, "dropout": key},
                                            jnp.concatenate([x, noisy]), mask2,
                                            deterministic=True)
    r = dict(params=params, out=out2[:4], noisy=out2[4:])
    if truncate:
      r["truncated"] = harness.apply(params, x[1:2, :SHORT], mask[1:2, :SHORT],
                                     deterministic=True)
    r["dropped"] = jax.vmap(lambda k: harness.apply(
        params, x, mask, deterministic=False, rngs={"dropout": k}))(
            jax.random.split(jax.random.PRNGKey(1)))
    # Cotangents: of sum(real outputs^2), what pooling sees (row 3 is all padding), and a
    # random one on every output, so no NaN hides behind a zero cotangent. (vmap over the
    # vjp function only: vmap over a whole vjp of Nystromformer fails XLA's HLO verifier in
    # jax 0.10.2.)
    y, vjp = jax.vjp(lambda p, x: harness.apply(p, x, mask, deterministic=True), params, x)
    r["grads"] = jax.vmap(vjp)(jnp.stack([2 * jnp.where(mask[..., None], y, 0.0), cotangent]))
    r["bf16"] = harness16.apply(params, x.astype(jnp.bfloat16), mask, deterministic=True)
    r["one"] = harness.init_with_output(key, x1, mask1, deterministic=True)[0]
    return r

  return program


def _relative_error(a, b, mask):
  """max |a - b| over real positions, relative to max |b| there."""
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  keep = np.asarray(mask)[..., None]
  return float(np.max(np.abs(a - b) * keep) / max(np.max(np.abs(b) * keep), 1e-30))


def _check_outputs(f: Findings, r: dict, x, mask, mixer, truncate: bool) -> None:
  """shape, finite, padding, truncation, dropout."""
  out = r["out"]
  f.check(out.shape == x.shape and out.dtype == jnp.float32, "shape",
          f"float32 output {out.shape} {out.dtype}, want {x.shape} float32")
  f.check(finite(out), "finite", "non-finite outputs (padded positions included)")
  real = np.asarray(mask)[..., None]
  f.close(np.where(real, r["noisy"], 0), np.where(real, out, 0), "padding",
          "real outputs change with the padded content")
  if truncate:
    f.close(r["truncated"][0], out[1, :SHORT], "truncation",
            "trailing padding differs from truncation")
  dropped = r["dropped"]  # finite, and (where the mixer has any) seeded by its key
  f.check(finite(dropped), "dropout_finite", "non-finite outputs with dropout")
  if takes_dropout(mixer):
    f.check(not np.allclose(dropped[0], dropped[1]), "dropout",
            f"two dropout keys give the same output (dropout_rate={DROPOUT})")


def _check_gradients(f: Findings, r: dict, mask) -> None:
  grads_p, grads_x = r["grads"]  # each [real-output loss, random cotangent]
  f.check(finite(grads_p) and finite(grads_x), "gradients",
          f"non-finite gradients (row 3 is all padding): parameters {finite(grads_p)}, "
          f"inputs {finite(grads_x)}")
  padded_grad = np.abs(np.asarray(grads_x[0]))[~np.asarray(mask)]
  f.check(np.all(padded_grad == 0), "padding_gradient",
          f"padded inputs get a gradient from real outputs (max {np.max(padded_grad):.3g})")
  dead = [jax.tree_util.keystr(path) for path, g in jax.tree_util.tree_flatten_with_path(
      grads_p)[0] if not np.any(np.asarray(g)[1] != 0)]  # the random cotangent's gradient
  f.check(not dead, "dead_parameters", f"parameters that get no gradient: {dead}")


def _check_precision(f: Findings, r: dict, x, mask, x1) -> None:
  """bf16, length1."""
  out, out16 = r["out"], r["bf16"]
  f.check(out16.shape == x.shape and out16.dtype == jnp.bfloat16, "bf16",
          f"bfloat16 output {out16.shape} {out16.dtype}, want bfloat16")
  err16 = _relative_error(out16, out, mask)
  f.check(finite(out16) and err16 <= BF16_TOLERANCE, "bf16",
          f"bfloat16 off float32 by {err16:.3g} of the output scale (> {BF16_TOLERANCE})")
  one = r["one"]
  f.check(one.shape == x1.shape and finite(one), "length1", f"length 1: output {one.shape}, "
          f"finite={finite(one)}")


def _check_jit(f: Findings, harness, params, x, mask, out) -> None:
  """jit and no-jit agree: the same parameters applied op by op (`out`: jitted)."""
  eager = harness.apply(params, x, mask, deterministic=True)
  f.close(eager, out, "jit", "no-jit differs from jit", rtol=1e-4, atol=1e-5)


def square_shapes(harness: Harness, length: int = SQUARE_LENGTH) -> list:
  """Shapes with two `length` axes in init + forward + backward of the mixer at that length."""
  x = jnp.zeros((1, length, WIDTH), jnp.float32)
  mask = jnp.ones((1, length), bool)

  def train_step(x):
    params = harness.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    loss = lambda p, x: jnp.sum(harness.apply(p, x, mask, deterministic=False,
                                              rngs={"dropout": jax.random.PRNGKey(1)}))
    return jax.grad(loss, (0, 1))(params, x)

  return length_squared_shapes(train_step, x, length=length)


@contextlib.contextmanager
def cheap_compiles():
  """Every program of the contract runs once or twice on tiny shapes: XLA's expensive passes
  (also of the op-by-op compiles of the no-jit run) cost more than they save."""
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before)


def check_mixer(mixer: str | type, settings: dict | None = None, *,
                length_dependent: bool = False, label: str | None = None,
                op_by_op: bool = True) -> None:
  """Checks the mixer contract (this module's docstring) for `mixer`, a registered name or a
  mixer class, built with `settings` (its config.model.attention; default: its defaults,
  which should suit LENGTH 13 and width 8: pass small block sizes here). A mixer whose real
  outputs depend by design on the padded length (a DFT over all L positions, landmarks over
  segments of the padded sequence) passes `length_dependent=True`, which skips the truncation
  check only. `op_by_op=False` leaves out the jit check, whose op-by-op run compiles each
  primitive on its own and takes about as long as the rest (check_op_by_op runs it alone).
  Raises AssertionError listing every failed property; returns None when all hold.
  """
  settings = dict(settings or {})
  label = label or (mixer if isinstance(mixer, str) else mixer.__name__)
  harness = Harness(mixer, settings)
  x, mask, noisy = _inputs(LENGTH, seed=0)
  cotangent = jnp.asarray(np.random.default_rng(1).normal(size=x.shape), jnp.float32)
  x1, mask1, _ = _inputs(1, seed=1)  # one token (rows: real, real, real, padding)
  f = Findings(label)
  unruled = registry.unruled_settings(mixer)
  f.check(not unruled, "settings", f"setting(s) {', '.join(unruled)} have no rule, so any "
          f"value trains unchecked: declare each as NAME: float = lra.rules.setting(default, "
          f"lra.rules.Float(0.0, open='low'), 'one-line doc')")
  with cheap_compiles():
    r = run_once(_mixer_program(harness, Harness(mixer, settings, dtype="bfloat16"),
                                not length_dependent), x, mask, noisy, cotangent, x1, mask1)
    _check_outputs(f, r, x, mask, mixer, not length_dependent)
    _check_gradients(f, r, mask)
    _check_precision(f, r, x, mask, x1)
    if op_by_op:
      _check_jit(f, harness, r["params"], x, mask, r["out"])
    module = registry.make(mixer, settings, num_heads=HEADS, qkv_dim=QKV,
                           dropout_rate=_dropout(mixer), dtype="float32", layer_index=1)
    if module.SUBQUADRATIC:  # where the mixer claims it
      squares = square_shapes(harness)
      f.check(not squares, "subquadratic", f"claims SUBQUADRATIC but forms {squares[:3]}")
  f.assert_none("mixer")


def check_op_by_op(mixer: str | type, settings: dict | None = None, *,
                   label: str | None = None) -> None:
  """check_mixer's jit check alone: the mixer applied op by op equals its jitted run."""
  settings = dict(settings or {})
  harness = Harness(mixer, settings)
  x, mask, _ = _inputs(LENGTH, seed=0)
  f = Findings(label or (mixer if isinstance(mixer, str) else mixer.__name__))
  with cheap_compiles():
    key = jax.random.PRNGKey(0)
    init = lambda x, mask: harness.init_with_output({"params": key, "dropout": key}, x, mask,
                                                    deterministic=True)
    out, params = run_once(init, x, mask)
    _check_jit(f, harness, params, x, mask, out)
  f.assert_none("mixer")
