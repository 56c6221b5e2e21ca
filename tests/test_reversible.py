"""Reversible residual layers: the custom VJP equals ordinary autodiff, the outputs follow the
formula, and activation memory does not grow with depth."""
import functools
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.linformer  # noqa: F401  (registers "linformer")
import lra.models.mixers.local  # noqa: F401  (registers "local")
from lra.models import registry, reversible
from lra.models.settings import EncoderConfig
from lra.rules import SettingError
from tests import helpers
from tests.helpers import layer_norm, run_once as _run

VOCAB, LENGTH, DIM = 20, 12, 16
_STACK = reversible.stack


def _tokens(seed=0, batch=3):
  return helpers.padded_tokens(VOCAB, LENGTH, seed, batch)


def _model(name="transformer", attention=None, **kw):
  settings = dict(name=name, attention=attention or {}, emb_dim=DIM, num_heads=2, qkv_dim=DIM,
                  mlp_dim=2 * DIM, num_layers=2, dropout_rate=0.1, attention_dropout_rate=0.1,
                  reversible=True, pooling="MEAN")
  settings.update(kw)
  return models.build(settings, vocab_size=VOCAB, num_classes=3, max_len=LENGTH, pair=False)


def _assert_trees_close(a, b, rtol, atol):
  flat_a, flat_b = (jax.tree_util.tree_leaves_with_path(t) for t in (a, b))
  assert [p for p, _ in flat_a] == [p for p, _ in flat_b]
  for (path, x), (_, y) in zip(flat_a, flat_b):
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=jax.tree_util.keystr(path))


def _custom_and_autodiff(model, tokens):
  """Loss and gradients with the custom VJP, and by autodiff of the same forward pass."""
  weights = jnp.asarray(np.random.default_rng(7).normal(size=(tokens.shape[0], 3)), jnp.float32)

  def loss(params):
    logits = model.apply(params, tokens, deterministic=False,
                         rngs={"dropout": jax.random.PRNGKey(5)})
    return jnp.sum(logits * weights)

  def run(tokens):
    params = model.init(jax.random.PRNGKey(0), tokens)
    custom = jax.value_and_grad(loss)(params)
    # The same forward pass, differentiated by JAX (storing every layer's activations).
    with mock.patch.object(reversible, "stack", functools.partial(_STACK, recompute=False)):
      autodiff = jax.value_and_grad(loss)(params)
    return custom, autodiff

  return _run(run, tokens)


# The reversible stack's gradient is the same code whatever the mixer: Local Attention (a
# second mixer, blocked) `-m slow`.
@pytest.mark.parametrize("name,attention", [
    ("transformer", {}), pytest.param("local", {"block_size": 4}, marks=pytest.mark.slow)])
def test_gradients_equal_ordinary_autodiff_with_dropout_and_padding(name, attention):
  (loss, grads), (ref_loss, ref_grads) = _custom_and_autodiff(_model(name, attention),
                                                              _tokens())
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-6, atol=1e-6)
  _assert_trees_close(grads, ref_grads, rtol=1e-4, atol=1e-6)
  # Every block gets a gradient (dropout is on, so equal masks in both passes matter).
  for i in range(2):  # the lower block's inputs recomputed from the upper block's outputs
    block = grads["params"]["encoder"][f"block_{i}"]
    assert float(jnp.abs(block["mixer"]["QKVProjection_0"]["query"]["kernel"]).max()) > 0
    assert float(jnp.abs(block["MLP_0"]["Dense_0"]["kernel"]).max()) > 0


def test_shared_module_of_linformer_layer_sharing():
  model = _model("linformer", {"k": 4, "sharing": "layer"})
  (loss, grads), (ref_loss, ref_grads) = _custom_and_autodiff(model, _tokens(1))
  encoder = grads["params"]["encoder"]
  assert "shared_projection" in encoder and "E" not in encoder["block_0"]["mixer"]
  assert float(jnp.abs(encoder["shared_projection"]["E"]).max()) > 0
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-6, atol=1e-6)
  _assert_trees_close(grads, ref_grads, rtol=1e-4, atol=1e-6)


def test_stack_with_layers_of_different_shapes():
  """The stack alone: per-layer parameters of different sizes, shared ones, a key."""
  rng = np.random.default_rng(3)
  widths = [3, 5]
  layers = [{"a": jnp.asarray(rng.normal(size=(4, w)), jnp.float32),
             "b": jnp.asarray(rng.normal(size=(w, 4)), jnp.float32)} for w in widths]
  shared = {"s": jnp.asarray(rng.normal(size=(4,)), jnp.float32)}
  x = jnp.asarray(rng.normal(size=(2, 6, 4)), jnp.float32)
  mask = jnp.asarray(rng.random((2, 6)) < 0.7)

  def f(i, p, s, x, mask, key):
    noise = jax.random.bernoulli(key, 0.8, x.shape)  # a stand-in for dropout
    y = jnp.tanh(x @ p["a"]) @ p["b"] * s["s"][None, None]
    return jnp.where(mask[..., None] & noise, y, 0.0)

  def g(i, p, s, x, mask, key):
    return jnp.sin(x * (i + 1)) * s["s"][None, None]

  def loss(recompute, shared, layers, x):
    y1, y2 = reversible.stack(f, g, shared, layers, x, 2 * x, mask, jax.random.PRNGKey(1),
                              recompute=recompute)
    return jnp.sum(y1 * jnp.cos(y2))

  def run(shared, layers, x):
    grad = lambda r: jax.value_and_grad(lambda *a: loss(r, *a), argnums=(0, 1, 2))(
        shared, layers, x)
    return grad(True), grad(False)

  custom, autodiff = _run(run, shared, layers, x)
  _assert_trees_close(custom, autodiff, rtol=1e-5, atol=1e-6)


def test_outputs_follow_the_formula():
  """y1 = x1 + F(x2), y2 = x2 + G(y1) from x1 = x2 = embedding; then LN((y1 + y2) / 2)."""
  config = EncoderConfig(emb_dim=DIM, num_heads=2, qkv_dim=DIM, mlp_dim=2 * DIM, num_layers=2,
                         reversible=True, pooling="MEAN", positions="learned", use_cls=False)
  encoder = models.Encoder(vocab_size=VOCAB, max_len=LENGTH, mixer="transformer",
                           mixer_settings={}, config=config)
  mixer = registry.make("transformer", {}, num_heads=2, qkv_dim=DIM)
  tokens = _tokens(2)
  mask = tokens != 0

  def by_hand(params):
    p = params["params"]
    x = p["embed"]["embedding"][tokens] + p["pos_embed"][None, :LENGTH]
    x1 = x2 = x
    for i in range(2):
      b = p[f"block_{i}"]
      x1 = x1 + mixer.apply({"params": b["mixer"]}, layer_norm(b["LayerNorm_0"], x2), mask,
                            deterministic=True)
      mlp = b["MLP_0"]
      h = jax.nn.gelu(layer_norm(b["LayerNorm_1"], x1) @ mlp["Dense_0"]["kernel"]
                      + mlp["Dense_0"]["bias"][None, None])
      x2 = x2 + h @ mlp["Dense_1"]["kernel"] + mlp["Dense_1"]["bias"][None, None]
    out = layer_norm(p["final_norm"], (x1 + x2) / 2)
    w = mask[..., None].astype(jnp.float32)
    return jnp.sum(out * w, 1) / jnp.sum(w, 1)

  def run(tokens):
    params = encoder.init(jax.random.PRNGKey(0), tokens)
    params = helpers.perturb(params)  # non-trivial norms: wiring cannot hide behind 1 and 0
    return encoder.apply(params, tokens), by_hand(params)

  out, ref = _run(run, tokens)
  assert out.shape == (3, DIM)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def _train_step_temp_bytes(reversible_layers: bool, num_layers: int) -> int:
  length = 1024
  model = models.build(dict(name="transformer", emb_dim=32, num_heads=2, qkv_dim=32, mlp_dim=64,
                            num_layers=num_layers, reversible=reversible_layers),
                       vocab_size=VOCAB, num_classes=3, max_len=length, pair=False)
  tokens = jnp.ones((1, length), jnp.int32)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens))

  def step(params, tokens, key):
    loss = lambda p: jnp.sum(model.apply(p, tokens, deterministic=False, rngs={"dropout": key}))
    return jax.value_and_grad(loss)(params)

  compiled = helpers.compile_once(step, params, tokens, jax.random.PRNGKey(0))
  return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.slow  # heavy; `pytest -m slow`
def test_activation_memory_does_not_grow_with_depth():
  """XLA's compiled memory analysis of a train step (with dropout) at 1K tokens: 12 layers
  against 2. Each layer's attention weights alone are 2 x 1025^2 floats (8 MB)."""
  plain = _train_step_temp_bytes(False, 12) / _train_step_temp_bytes(False, 2)
  rev = _train_step_temp_bytes(True, 12) / _train_step_temp_bytes(True, 2)
  assert plain > 4, plain
  assert rev <= 1.3, rev


@pytest.mark.parametrize("option,error", [
    (dict(norm="batch"), "norm='batch' is not valid: 'layer' with"),
    (dict(prenorm=False), "prenorm=False is not valid: True with"),
    (dict(feedforward=False), "feedforward=False is not valid: True with")])
def test_combinations_reversible_layers_cannot_take(option, error):
  with pytest.raises(SettingError, match=error):
    _model(**option)
