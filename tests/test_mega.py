"""Mega (Ma et al. 2023): the damped EMA against its step-by-step recurrence, the gated attention
(full and chunked) against a dense numpy version, padding, and the block's gated residual."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special

from lra import models
import lra.models.mixers.mega  # noqa: F401  (registers "mega")
from lra.models import registry
from lra.models.encoder import Block
from lra.models.mixers.mega import DampedEMA, chunk_attention
from lra.models.settings import EncoderConfig
from lra.rules import SettingError
from tests import helpers, naive

WIDTH, LENGTH = 4, 11  # 11: not a multiple of the chunk (4)
SETTINGS = dict(z_dim=3, v_dim=5, ema_dim=3, max_positions=6)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _randomised(params, seed: int, scale: float = 0.7):
  """The same tree with every leaf N(0, scale): no parameter at its special initial value."""
  leaves, tree = jax.tree_util.tree_flatten(params)
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_unflatten(tree, [
      jnp.asarray(rng.normal(size=leaf.shape) * scale, jnp.float32) for leaf in leaves])


def _init(module, seed: int, *args, **kwargs):
  """The parameters of module.init (their shapes traced, nothing compiled), every one drawn
  from N(0, 0.7)."""
  shapes = jax.eval_shape(lambda *a: module.init(jax.random.PRNGKey(0), *a, **kwargs), *args)
  return _randomised(shapes, seed)


def _mask():
  """Row 0 full, row 1 trailing padding after 6, row 2 a hole at 3."""
  mask = np.ones((3, LENGTH), bool)
  mask[1, 6:] = False
  mask[2, 3] = False
  return mask


# --- the EMA ---------------------------------------------------------------------------------

def _ema_recurrence(p, x_LxD, bidirectional: bool):
  """silu(EMA(x) + omega x), the EMA run step by step: h_t = alpha beta x_t + q h_{t-1},
  y_t = eta^T h_t / sqrt(h); the backward direction the same from the end."""
  alpha, delta = _sigmoid(np.asarray(p["alpha"])), _sigmoid(np.asarray(p["delta"]))
  beta, eta = np.asarray(p["beta"]), np.asarray(p["eta"])
  length, width = x_LxD.shape
  y = np.zeros((length, width))
  for k, order in enumerate([range(length), range(length - 1, -1, -1)][:1 + bidirectional]):
    h = np.zeros((width, alpha.shape[-1]))
    for t in order:
      h = alpha[k] * beta[k] * x_LxD[t][:, None] + (1 - alpha[k] * delta[k]) * h
      y[t] += np.sum(eta[k] * h, axis=-1) / np.sqrt(alpha.shape[-1])
  return naive.silu(y + np.asarray(p["omega"]) * x_LxD)


def _ema_truncated(p, x_LxD, lags: int):
  """The bidirectional EMA as an explicit sum over the first `lags` lags of each kernel."""
  alpha, delta = _sigmoid(np.asarray(p["alpha"])), _sigmoid(np.asarray(p["delta"]))
  q, n = 1 - alpha * delta, alpha.shape[-1]
  weight = alpha * np.asarray(p["beta"]) * np.asarray(p["eta"]) / np.sqrt(n)
  kernel = lambda k, l: np.sum(weight[k] * q[k] ** l, axis=-1)  # D
  length = x_LxD.shape[0]
  y = np.zeros_like(x_LxD)
  for t in range(length):
    for s in range(length):
      if 0 <= t - s < lags:
        y[t] += kernel(0, t - s) * x_LxD[s]
      if 0 <= s - t < lags:
        y[t] += kernel(1, s - t) * x_LxD[s]
  return naive.silu(y + np.asarray(p["omega"]) * x_LxD)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_ema_equals_the_step_by_step_recurrence(bidirectional):
  ema = DampedEMA(ema_dim=3, bidirectional=bidirectional, truncation=0)
  x = np.random.default_rng(0).normal(size=(2, LENGTH, WIDTH))
  later = x.copy()
  later[:, 6:] += 1.0
  params = _init(ema, 1, jnp.asarray(x, jnp.float32))
  got, changed = helpers.run_once(jax.vmap(lambda x: ema.apply(params, x)),
                                  jnp.asarray(np.stack([x, later]), jnp.float32))
  for b in range(2):
    want = _ema_recurrence(params["params"], x[b], bidirectional)
    np.testing.assert_allclose(got[b], want, rtol=1e-4, atol=1e-5)
  # Forward only: an output never depends on a later input; bidirectional: it does.
  assert np.allclose(changed[:, :6], got[:, :6], atol=1e-6) != bidirectional


def test_truncated_ema_keeps_the_first_lags_of_each_kernel():
  ema = DampedEMA(ema_dim=2, bidirectional=True, truncation=3)
  x = np.random.default_rng(2).normal(size=(1, LENGTH, WIDTH))
  params = _init(ema, 3, jnp.asarray(x, jnp.float32))
  # Truncation longer than the input: the whole kernel, as the recurrence.
  long = DampedEMA(ema_dim=2, bidirectional=True, truncation=100)
  got, whole = helpers.run_once(lambda x: (ema.apply(params, x), long.apply(params, x)),
                                jnp.asarray(x, jnp.float32))
  np.testing.assert_allclose(got[0], _ema_truncated(params["params"], x[0], 3), rtol=1e-4,
                             atol=1e-5)
  np.testing.assert_allclose(whole[0], _ema_recurrence(params["params"], x[0], True),
                             rtol=1e-4, atol=1e-5)


# --- gated attention against a dense numpy version -------------------------------------------

def _dense_attention(q, k, v, keep_L, table, chunk: int, fn: str):
  """One row, L x L: the block-diagonal pattern (chunks of `chunk`) as a dense mask."""
  length, span = len(keep_L), (len(table) + 1) // 2
  pos = np.arange(length)
  allowed = (pos[:, None] // chunk == pos[None, :] // chunk) & keep_L[None, :]
  bias = table[np.clip(pos[None, :] - pos[:, None], 1 - span, span - 1) + span - 1]
  logits = q @ k.T
  if fn == "softmax":  # (a padded query in a chunk of padding only gets NaN: not compared)
    s = np.where(allowed, logits / np.sqrt(q.shape[-1]) + bias, -np.inf)
    with np.errstate(invalid="ignore"):
      w = np.exp(s - s.max(axis=1, keepdims=True))
      w = w / w.sum(axis=1, keepdims=True)
  else:
    x = logits / np.maximum(allowed.sum(axis=1, keepdims=True), 1) + bias
    f = 0.5 * (1 + scipy.special.erf((x - np.sqrt(0.5)) / (np.sqrt(0.25 / np.pi) * np.sqrt(2))))
    w = np.where(allowed, f if fn == "laplace" else np.maximum(x, 0) ** 2, 0.0)
  return w @ v


def _mega_reference(p, x_BxLxD, mask_BxL, *, chunk: int, fn: str):
  """(H^, phi) of eqs. 6-14, dense, row by row, in float64."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), p)
  dense = lambda name, h: h @ p[name]["kernel"] + p[name]["bias"]
  width, z = x_BxLxD.shape[-1], p["query_scale"].shape[0]
  v_dim = p["value"]["bias"].shape[0]
  hs, phis = [], []
  for x, keep in zip(np.asarray(x_BxLxD, np.float64), mask_BxL):
    value = naive.silu(dense("value", x))
    base = dense("ema_projection", _ema_recurrence(p["ema"], np.where(keep[:, None], x, 0),
                                                   True))
    phi, zz = _sigmoid(base[:, :width]), naive.silu(base[:, width:width + z])
    gamma, hx = naive.silu(base[:, width + z:width + z + v_dim]), base[:, width + z + v_dim:]
    q = zz * p["query_scale"] + p["query_offset"]
    k = zz * p["key_scale"] + p.get("key_offset", 0.0)
    o = _dense_attention(q, k, value, keep, p["relative_bias"], chunk or len(keep), fn)
    hs.append(naive.silu(hx + dense("out", gamma * o)))
    phis.append(phi)
  return np.stack(hs), np.stack(phis)


CASES = [("softmax", 0, 6), ("softmax", 4, 6), ("softmax", 0, 3), ("laplace", 4, 3),
         ("laplace", 20, 6), ("relu2", 4, 6)]


@pytest.mark.parametrize("fn,chunk,span", CASES)
def test_gated_attention_equals_the_dense_reference(fn, chunk, span):
  """Full attention (chunk 0), Mega-chunk (4, over 11 positions) as block-diagonal dense
  attention, relative distances clipped beyond span - 1 (3 < 10), and a chunk longer than the
  input (20: one chunk)."""
  settings = dict(SETTINGS, attention_fn=fn, chunk_size=chunk, max_positions=span)
  mixer = registry.make("mega", settings, dropout_rate=0.0, dtype="float32")
  x = jnp.asarray(np.random.default_rng(4).normal(size=(3, LENGTH, WIDTH)), jnp.float32)
  mask = _mask()
  params = _init(mixer, 5, x, jnp.asarray(mask), deterministic=True)
  h, phi = helpers.run_once(lambda p, x: mixer.apply(
      p, x, jnp.asarray(mask), deterministic=True, method="candidate_and_gate"), params, x)
  want_h, want_phi = _mega_reference(params["params"], x, mask, chunk=chunk, fn=fn)
  real = mask[..., None]
  np.testing.assert_allclose(np.where(real, h, 0), np.where(real, want_h, 0), rtol=2e-4,
                             atol=2e-5)
  np.testing.assert_allclose(np.where(real, phi, 0), np.where(real, want_phi, 0), rtol=2e-4,
                             atol=2e-5)
  assert params["params"]["relative_bias"].shape == (2 * min(span, chunk or span) - 1,)
  assert ("key_offset" in params["params"]) == (fn != "softmax")  # under softmax it cancels


@pytest.mark.parametrize("fn,chunk", [("laplace", 0), ("relu2", 4), ("laplace", 4)])
def test_padding_is_inert_and_trailing_padding_is_truncation(fn, chunk):
  """The contract test checks softmax; here the element-wise functions, whose tau counts the
  real keys of a chunk."""
  mixer = registry.make("mega", dict(SETTINGS, attention_fn=fn, chunk_size=chunk),
                        dropout_rate=0.0, dtype="float32")
  rng = np.random.default_rng(6)
  x = jnp.asarray(rng.normal(size=(3, LENGTH, WIDTH)), jnp.float32)
  mask = _mask()
  noisy = helpers.noise_where_padded(x, mask, rng)
  params = _init(mixer, 7, x, jnp.asarray(mask), deterministic=True)

  def program(p, x, noisy):
    run = lambda x, m: mixer.apply(p, x, m, deterministic=True)
    m = jnp.asarray(mask)
    return run(x, m), run(noisy, m), run(x[1:2, :6], m[1:2, :6])

  clean, dirty, truncated = helpers.run_once(program, params, x, noisy)
  real = mask[..., None]
  np.testing.assert_allclose(np.where(real, dirty, 0), np.where(real, clean, 0), atol=1e-5)
  np.testing.assert_allclose(truncated[0], clean[1, :6], rtol=1e-5, atol=1e-5)


def test_attention_dropout_drops_element_wise_weights():
  rng = np.random.default_rng(8)
  q, k = (jnp.asarray(rng.normal(size=(1, 8, 3)), jnp.float32) for _ in range(2))
  v = jnp.asarray(rng.normal(size=(1, 8, 2)), jnp.float32)
  mask, table = jnp.ones((1, 8), bool), jnp.zeros((7,), jnp.float32)
  run = lambda key: chunk_attention(q, k, v, mask, table, chunk=4, fn="laplace",
                                    dropout_rng=key, dropout_rate=0.5)
  plain, one, other = helpers.run_once(lambda: (
      chunk_attention(q, k, v, mask, table, chunk=4, fn="laplace"),
      run(jax.random.PRNGKey(0)), run(jax.random.PRNGKey(1))))
  assert not np.allclose(one, plain) and not np.allclose(one, other)


# --- the block --------------------------------------------------------------------------------

@pytest.mark.parametrize("prenorm", [True, False])
def test_block_makes_the_gated_residual(prenorm):
  """Pre-norm: x + phi (H^ - x) with H^, phi from LayerNorm(x); post-norm: LayerNorm of
  x + phi (H^ - x) with H^, phi from x (the official MovingAverageGatedAttention)."""
  config = EncoderConfig(emb_dim=WIDTH, dropout_rate=0.0, attention_dropout_rate=0.0,
                         positions="none", pooling="MEAN", use_cls=False, feedforward=False,
                         prenorm=prenorm)
  block = Block(0, "mega", SETTINGS, None, config)
  x = jnp.asarray(np.random.default_rng(9).normal(size=(3, LENGTH, WIDTH)), jnp.float32)
  mask = jnp.asarray(_mask())
  params = _init(block, 10, x, mask, deterministic=True)
  mixer = registry.make("mega", SETTINGS, dropout_rate=0.0, dtype="float32")

  def both(params):
    p = params["params"]
    norm = lambda h: nn.LayerNorm().apply({"params": p["LayerNorm_0"]}, h)
    h, phi = mixer.apply({"params": p["mixer"]}, norm(x) if prenorm else x, mask,
                         deterministic=True, method="candidate_and_gate")
    want = x + phi * (h - x)
    return block.apply(params, x, mask, deterministic=True), want if prenorm else norm(want)

  got, want = helpers.run_once(both, params)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_settings_and_encoder_rules():
  mixer = registry.make("mega", dict(z_dim=2, ema_dim=1), dropout_rate=0.0, dtype="float32")
  x, mask = jnp.ones((1, 5, 3)), jnp.ones((1, 5), bool)
  shapes = jax.tree_util.tree_map(jnp.shape, jax.eval_shape(
      lambda: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)))["params"]
  assert shapes["value"]["kernel"] == (3, 6)  # v_dim 0: twice the width
  assert shapes["relative_bias"] == (2 * 1024 - 1,)
  assert not mixer.SUBQUADRATIC
  assert registry.make("mega", dict(chunk_size=8), dropout_rate=0.0).SUBQUADRATIC
  assert not registry.get("mega").reversible() and registry.get("transformer").reversible()
  with pytest.raises(SettingError, match="config.model.reversible=True .*Mega.residual"):
    models.build(helpers.tiny_model("mega", reversible=True), vocab_size=5, num_classes=2,
                 max_len=8, pair=False)


def test_a_chunk_at_or_above_the_length_is_said_at_start_and_noted_in_the_table(listops_dir,
                                                                                tmp_path,
                                                                                capsys):
  """Mega-chunk whose one chunk holds every position is Mega: one warning
  line as the run starts, results.json's idle_settings, and the note under eval.py's table;
  a chunk below the length says nothing."""
  import importlib
  import json
  from lra.training import trainer
  from tests.tiny import tiny_config
  short = {"num_train_steps": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1,
           "warmup_steps": 1}
  whole = trainer.train_and_evaluate(
      tiny_config(listops_dir, "mega", **{"model.attention.chunk_size": 40}, **short),
      str(tmp_path / "runs" / "whole"))
  line = ("config.model.attention.chunk_size=40 is at or above the input length (40): one chunk "
          "holds every position, so Mega-chunk attends as Mega does; give a chunk_size below 40 "
          "to chunk")
  assert capsys.readouterr().out.count(f"warning: {line}\n") == 1
  assert whole["idle_settings"] == [line]
  chunked = tiny_config(listops_dir, "mega", **{"model.attention.chunk_size": 39})
  assert models.idle_settings(models.build(chunked.model.to_dict(), vocab_size=20,
                                           num_classes=10, max_len=40, pair=False)) == []
  out = tmp_path / "table"
  importlib.import_module("eval").main(["accuracy", str(tmp_path / "runs"), f"--out={out}"])
  (row,) = json.loads((out / "accuracy.json").read_text())["rows"]
  assert row["model"] == "mega_chunk"
  assert f"a setting did nothing: {line}" in row["cells"]["listops"]["not_comparable"]
  assert "a setting did nothing: config.model.attention.chunk_size=40" in (
      out / "accuracy.md").read_text()
