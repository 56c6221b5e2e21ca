"""Encoder block options: chunked feed-forward, post-norm, no feed-forward, batch norm (and its
statistics in the trainer and checkpoints), Zoology's Hybrid with BaseConv layers, the
embedding's initial scale, and their validation."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax.training import train_state

from lra import models
from lra.data import tasks
from lra.training import checkpoint, steps, trainer
from lra.models import encoder, registry
from lra.models.settings import EncoderConfig
from lra.rules import SettingError
from tests import helpers
from tests.helpers import layer_norm, perturb, run_once as _run

VOCAB, LENGTH, DIM = 20, 12, 8


def _tokens(seed=0, batch=4):
  return helpers.padded_tokens(VOCAB, LENGTH, seed, batch)


def _model(**kw):
  settings = dict(name="transformer", emb_dim=DIM, num_heads=2, qkv_dim=DIM, mlp_dim=2 * DIM,
                  num_layers=2, dropout_rate=0.0, attention_dropout_rate=0.0)
  settings.update(kw)
  return models.build(settings, vocab_size=VOCAB, num_classes=3, max_len=LENGTH, pair=False)


# ----------------------------------------------------------------------------- chunked MLP


def test_chunked_mlp_equals_plain_mlp():
  """Same parameters, outputs and gradients; 7 positions in 3 chunks (the last one short)."""
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 7, 4)), jnp.float32)
  cotangent = jnp.asarray(np.random.default_rng(1).normal(size=(2, 7, 4)), jnp.float32)
  plain, chunked = encoder.MLP(8, 0.1, "float32"), encoder.MLP(8, 0.1, "float32", chunks=3)

  def run(x):
    params = plain.init(jax.random.PRNGKey(0), x, deterministic=True)
    chunked_params = chunked.init(jax.random.PRNGKey(0), x, deterministic=True)
    outs = []
    for mlp in (plain, chunked):
      loss = lambda p, x: jnp.sum(mlp.apply(p, x, deterministic=True) * cotangent)
      outs.append((mlp.apply(params, x, deterministic=True), jax.grad(loss, (0, 1))(params, x)))
    dropped = chunked.apply(params, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    return params, chunked_params, outs, dropped

  params, chunked_params, ((out, grads), (c_out, c_grads)), dropped = _run(run, x)
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(chunked_params)
  assert sorted(params["params"]) == ["Dense_0", "Dense_1"]
  np.testing.assert_allclose(c_out, out, rtol=1e-6, atol=1e-6)
  for g, r in zip(jax.tree_util.tree_leaves(c_grads), jax.tree_util.tree_leaves(grads)):
    np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
  assert np.all(np.isfinite(dropped)) and not np.allclose(dropped, out)


def test_chunked_mlp_hidden_exists_one_chunk_at_a_time():
  """Forward and backward: no L x mlp_dim hidden, nor all chunks' hiddens stacked."""
  length, chunks, hidden = 12, 4, 16
  x = jnp.ones((2, length, 4), jnp.float32)
  mlp = encoder.MLP(hidden, 0.1, "float32", chunks=chunks)
  params = mlp.init(jax.random.PRNGKey(0), x, deterministic=True)
  loss = lambda p, x: jnp.sum(mlp.apply(p, x, deterministic=False,
                                        rngs={"dropout": jax.random.PRNGKey(1)}))
  shapes = set(helpers.array_shapes(jax.make_jaxpr(jax.grad(loss, (0, 1)))(params, x).jaxpr))
  wide = [s for s in shapes if len(s) >= 3 and s[-1] == hidden]
  assert wide and all(np.prod(s[:-1]) <= 2 * length // chunks for s in wide), wide


def test_chunked_ffn_model_equals_plain_model():
  plain, chunked = _model(), _model(ffn_chunks=5)  # 13 positions (with CLS) in 5 chunks
  tokens = _tokens()

  def run(tokens):
    params = perturb(plain.init(jax.random.PRNGKey(0), tokens))
    loss = lambda m: lambda p: jnp.sum(m.apply(p, tokens) ** 2)
    return [(m.apply(params, tokens), jax.grad(loss(m))(params)) for m in (plain, chunked)]

  (out, grads), (c_out, c_grads) = _run(run, tokens)
  np.testing.assert_allclose(c_out, out, rtol=1e-5, atol=1e-6)
  for g, r in zip(jax.tree_util.tree_leaves(c_grads), jax.tree_util.tree_leaves(grads)):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- block structure


def _block(**kw):
  config = EncoderConfig(num_heads=2, qkv_dim=DIM, mlp_dim=2 * DIM, dropout_rate=0.0,
                         attention_dropout_rate=0.0, dtype="float32", **kw)
  return encoder.Block(0, "transformer", {}, None, config)


def test_post_norm_and_no_feed_forward_blocks_are_the_formulas():
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(3, LENGTH, DIM)), jnp.float32)
  mask = _tokens(3, batch=3) != 0
  mixer = registry.make("transformer", {}, num_heads=2, qkv_dim=DIM)
  blocks = {"post": _block(prenorm=False), "post_no_ffn": _block(prenorm=False, feedforward=False),
            "pre_no_ffn": _block(feedforward=False)}

  def mlp(p, h):
    hidden = jax.nn.gelu(h @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"][None, None])
    return hidden @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"][None, None]

  def by_hand(name, p):
    mix = lambda h: mixer.apply({"params": p["mixer"]}, h, mask, deterministic=True)
    if name == "pre_no_ffn":
      return x + mix(layer_norm(p["LayerNorm_0"], x))
    h = layer_norm(p["LayerNorm_0"], x + mix(x))
    return h if name == "post_no_ffn" else layer_norm(p["LayerNorm_1"], h + mlp(p["MLP_0"], h))

  def run(x):
    out = {}
    for name, block in blocks.items():
      params = perturb(block.init(jax.random.PRNGKey(0), x, mask, deterministic=True))
      out[name] = (params, block.apply(params, x, mask, deterministic=True),
                   by_hand(name, params["params"]))
    return out

  for name, (params, got, ref) in jax.device_get(_run(run, x)).items():
    expected = {"post": ["LayerNorm_0", "LayerNorm_1", "MLP_0", "mixer"]}.get(
        name, ["LayerNorm_0", "mixer"])
    assert sorted(params["params"]) == expected, name
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)


def test_post_norm_encoder_has_no_final_norm():
  tokens = _tokens()
  params = jax.eval_shape(lambda: _model(prenorm=False).init(jax.random.PRNGKey(0), tokens))
  assert "final_norm" not in params["params"]["encoder"]
  params = jax.eval_shape(lambda: _model().init(jax.random.PRNGKey(0), tokens))
  assert "final_norm" in params["params"]["encoder"]


# ----------------------------------------------------------------------------- batch norm


def test_batch_norm_statistics_count_real_tokens_only():
  model = _model(norm="batch", positions="learned")
  tokens = _tokens(4)
  mask = tokens != 0
  noise = jnp.where(mask, tokens, jnp.asarray(np.random.default_rng(5).integers(1, VOCAB,
                                                                               tokens.shape)))

  def run(tokens, noise):
    variables = model.init(jax.random.PRNGKey(0), tokens)
    params = perturb({"params": variables["params"]})
    train = lambda t: model.apply({**params, "batch_stats": variables["batch_stats"]}, t, mask,
                                  deterministic=False, mutable=["batch_stats"])
    return params, variables["batch_stats"], train(tokens), train(noise)

  params, stats, (logits, new), (noise_logits, noise_new) = jax.device_get(_run(run, tokens, noise))
  names = sorted(stats["encoder"]["block_0"])
  assert names == ["BatchNorm_0", "BatchNorm_1"] and "final_norm" in stats["encoder"]
  # Whatever sits at padded positions changes neither the outputs nor the statistics.
  np.testing.assert_allclose(noise_logits, logits, rtol=1e-5, atol=1e-5)
  for a, b in zip(jax.tree_util.tree_leaves(noise_new), jax.tree_util.tree_leaves(new)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The first norm sees the embedded tokens (CLS included): its running averages move 10% of
  # the way from (0, 1) to the mean and variance over the real tokens.
  p = params["params"]["encoder"]
  x = np.concatenate([np.broadcast_to(p["cls"], (len(tokens), 1, DIM)),
                      p["embed"]["embedding"][np.asarray(tokens)]], 1) + p["pos_embed"][None]
  real = x[np.concatenate([np.ones((len(tokens), 1), bool), np.asarray(mask)], 1)]
  first = new["batch_stats"]["encoder"]["block_0"]["BatchNorm_0"]
  np.testing.assert_allclose(first["mean"], 0.1 * real.mean(0), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(first["var"], 0.9 + 0.1 * real.var(0), rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_train_step_updates_batch_stats_and_evaluation_uses_them(tmp_path):
  config = ml_collections.ConfigDict(dict(
      seed=0, model=dict(name="transformer", attention={}, emb_dim=DIM, num_heads=2, qkv_dim=DIM,
                         mlp_dim=2 * DIM, num_layers=1, dropout_rate=0.1,
                         attention_dropout_rate=0.1, norm="batch"),
      learning_rate=0.01, warmup_steps=1, num_train_steps=10, schedule="constant",
      weight_decay=0.0, adam_b1=0.9, adam_b2=0.98, adam_eps=1e-9, grad_clip_norm=0.0))
  rng = np.random.default_rng(0)
  split = {"inputs": np.asarray(_tokens(6, batch=8)), "labels": rng.integers(0, 3, 8)}
  task = tasks.Task("tiny", 3, VOCAB, LENGTH, False, {s: split for s in tasks.SPLITS})
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh(jax.devices()[:1])
  train_step, eval_step, sharding = steps.make_steps(model, False, mesh)
  state = trainer.create_state(model, task, config, mesh)
  init_stats = jax.device_get(state.batch_stats)
  assert sorted(state.params) == ["params"]  # gradients and updates are for these only
  batch = trainer.to_global(dict(split), sharding)
  new_state, _ = train_step(state, batch, jax.random.PRNGKey(1))
  stats = jax.device_get(new_state.batch_stats)
  moved = [not np.allclose(a, b) for a, b in zip(jax.tree_util.tree_leaves(stats),
                                                 jax.tree_util.tree_leaves(init_stats))]
  assert all(moved)

  sums = jax.device_get(eval_step(new_state, trainer.to_global(
      dict(split, weights=np.ones(8, np.float32)), sharding)))
  logits = lambda s: model.apply({**jax.device_get(new_state.params), "batch_stats": s},
                                 split["inputs"])
  loss = lambda s: float(np.sum(-jax.nn.log_softmax(logits(s))[np.arange(8), split["labels"]]))
  np.testing.assert_allclose(sums["loss_sum"], loss(stats), rtol=1e-5)
  assert abs(loss(init_stats) - loss(stats)) > 1e-3  # so the stored statistics mattered

  ckpts = checkpoint.Checkpoints(str(tmp_path), 1)
  ckpts.save_latest(1, new_state, {})
  restored, _ = ckpts.restore_latest(state)
  ckpts.close()
  leaves = jax.tree_util.tree_leaves
  for a, b in zip(leaves(restored.batch_stats), leaves(stats)):
    np.testing.assert_array_equal(a, b)


def test_models_without_batch_norm_keep_their_checkpoint_layout():
  """No batch statistics: the state's tree (and so the checkpoint fingerprint) is as before."""
  config = ml_collections.ConfigDict(dict(
      seed=0, model=dict(name="transformer", attention={}, emb_dim=DIM, num_heads=2, qkv_dim=DIM,
                         mlp_dim=2 * DIM, num_layers=1),
      learning_rate=0.01, warmup_steps=1, num_train_steps=10, schedule="constant",
      weight_decay=0.0, adam_b1=0.9, adam_b2=0.98, adam_eps=1e-9, grad_clip_norm=0.0))
  task = tasks.Task("tiny", 3, VOCAB, LENGTH, False, {})
  model = trainer.build_model(config, task)
  state = trainer.create_state(model, task, config, trainer.make_mesh(jax.devices()[:1]))
  assert state.batch_stats == {}
  old = train_state.TrainState.create(apply_fn=model.apply, params=state.params, tx=state.tx,
                                     ).replace(step=state.step)
  assert checkpoint.fingerprint(state) == checkpoint.fingerprint(old)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("option,message", [
    (dict(norm="group"), "norm='group' is not valid: one of 'layer', 'batch'"),
    (dict(ffn_chunks=0), "ffn_chunks=0 is not valid: an integer >= 1"),
    (dict(ffn_chunks=2.5), "ffn_chunks=2.5 is not valid: an integer >= 1"),
    (dict(prenorm="no"), "prenorm='no' is not valid: True or False"),
    (dict(feedforward=None), "feedforward=None is not valid: True or False"),
    (dict(reversible=1), "reversible=1 is not valid: True or False"),
    (dict(hybrid_conv=3, num_layers=1), "hybrid_conv=3 is not valid: 0 with .*num_layers=1"),
    (dict(embed_init=0.0), "embed_init=0.0 is not valid"),
    (dict(embed_init=0.02, input_encoder="linear"),
     "embed_init=0.02 is not valid: its default 1.0 unless .*input_encoder='embedding'")])
def test_bad_options_are_errors_naming_the_valid_values(option, message):
  with pytest.raises(SettingError, match=message):
    _model(**option)


# ----------------------------------------------------------------------------- hybrid, embedding


def test_hybrid_conv_makes_even_layers_baseconv_and_counts_their_state():
  """Zoology's Hybrid [BaseConv, mixer]: layers 0 and 2 are Based's conv kind (its parameters,
  its state of (k - 1) D), layer 1 the mixer; the embedding starts at the std asked for."""
  from lra.training import run_record
  recurrent = dict(name="gla", num_layers=3, num_heads=2, use_cls=False, pooling="MEAN")
  model = _model(**recurrent, hybrid_conv=3, embed_init=0.02)
  params = _run(lambda: model.init(jax.random.PRNGKey(0), _tokens()))["params"]["encoder"]
  kinds = [sorted(params[f"block_{i}"]["mixer"]) for i in range(3)]
  assert kinds[0] == kinds[2] == ["base_conv"] and "q_proj" in kinds[1]
  assert abs(float(np.std(params["embed"]["embedding"])) - 0.02) < 0.005
  state = run_record.carried_state(model)
  plain = run_record.carried_state(_model(**recurrent))
  assert state["per_layer"] == [2 * DIM, plain["per_layer"][1], 2 * DIM]
