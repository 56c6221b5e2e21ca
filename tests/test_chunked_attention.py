"""Memory-efficient attention (Rabe and Staats 2021) as the Transformer's implementation:
the same parameters and the same results as dense attention, in O(N) memory."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import registry
from lra.models.mixers import transformer
from lra.models.ops.chunked_attention import balanced_chunk, chunked_attention
from lra.models.mixers.transformer import FullAttention, resolve_implementation
from lra.rules import SettingError
from tests.helpers import masked_softmax_attention, padded_inputs, run_once as _run

HEADS, DIM, LENGTH = 2, 8, 11  # 11: a multiple of none of the chunk sizes below
CHUNKS = ((4, 3), (1, 5), (16, 64))  # several blocks each way; one block each way


def _inputs(seed=0):
  """A full row, trailing padding, a hole, and a row with every key padded."""
  x, mask, rng = padded_inputs(LENGTH, DIM, seed, batch=4)
  mask[3, :] = False
  return x, jnp.asarray(mask), rng


def _reference(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, mask_BxM):
  """The dense Transformer's formula: softmax over the real keys; a row with every key masked
  (all logits -1e9) averages every value uniformly."""
  out = masked_softmax_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, mask_BxM[:, None, None, :])
  empty_B = ~jnp.any(mask_BxM, -1)
  return jnp.where(empty_B[:, None, None, None], jnp.mean(v_BxMxHxK, 1, keepdims=True), out)


def _dropped_reference(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, mask_BxM, keep_BxHxLxM, rate):
  """The dense formula with attention dropout by a given keep mask: masked keys get logit
  -1e9, weights are dropped (and rescaled) after the softmax."""
  logits_BxHxLxM = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK, k_BxMxHxK) / np.sqrt(
      q_BxLxHxK.shape[-1])
  logits_BxHxLxM = jnp.where(mask_BxM[:, None, None, :], logits_BxHxLxM, -1e9)
  weights_BxHxLxM = jax.nn.softmax(logits_BxHxLxM, -1)
  weights_BxHxLxM = jnp.where(keep_BxHxLxM, weights_BxHxLxM / (1 - rate), 0.0)
  return jnp.einsum("bhlm,bmhk->blhk", weights_BxHxLxM, v_BxMxHxK)


def test_chunked_equals_dense_outputs_and_gradients():
  x, mask, rng = _inputs()
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  dense = FullAttention(num_heads=HEADS, qkv_dim=DIM)
  mixers = [FullAttention(num_heads=HEADS, qkv_dim=DIM, implementation="chunked",
                          query_chunk=qc, key_chunk=kc) for qc, kc in CHUNKS]
  auto = FullAttention(num_heads=HEADS, qkv_dim=DIM, implementation="auto",
                       query_chunk=4, key_chunk=3)

  def run(x):
    params = dense.init(jax.random.PRNGKey(0), x, mask, deterministic=True)

    def grads(mixer):
      out, pullback = jax.vjp(lambda p, x: mixer.apply(p, x, mask, deterministic=True),
                              params, x)
      return out, pullback(cotangent)

    def reference(p, x):  # the independent formula on the same projections
      mods = p["params"]
      q, k, v = (jnp.einsum("bld,dhk->blhk", x, mods["QKVProjection_0"][n]["kernel"])
                 for n in ("query", "key", "value"))
      y = _reference(q, k, v, mask)
      out = mods["OutputProjection_0"]["out"]
      return jnp.einsum("blhk,hkd->bld", y, out["kernel"]) + out["bias"][None, None]

    out, pullback = jax.vjp(reference, params, x)
    return (out, pullback(cotangent)), grads(dense), [grads(m) for m in mixers], grads(auto)

  reference, dense_result, chunked_results, auto_result = _run(run, x)
  assert np.all(np.isfinite(reference[0]))
  for result in [dense_result, *chunked_results, auto_result]:
    for got, want in zip(jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(reference)):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The fully padded row is the dense formula's uniform average over its (masked) keys.
  assert np.std(reference[0][3], axis=0).max() < 1e-5
  # On this CPU "auto" is "chunked": the very same computation.
  for got, want in zip(jax.tree_util.tree_leaves(auto_result),
                       jax.tree_util.tree_leaves(chunked_results[0])):
    np.testing.assert_array_equal(got, want)


def _assembled_keep(rng, shape_BxHxLxM, query_chunk, key_chunk, rate):
  """The documented per-block dropout masks, drawn block by block and laid side by side."""
  b, h, length, keys = shape_BxHxLxM
  q, c = balanced_chunk(length, query_chunk), balanced_chunk(keys, key_chunk)
  rows = []
  for i in range(-(-length // q)):
    row_rng = jax.random.fold_in(rng, i)
    rows.append(jnp.concatenate(
        [jax.random.bernoulli(jax.random.fold_in(row_rng, j), 1 - rate, (b, h, q, c))
         for j in range(-(-keys // c))], axis=-1))
  return jnp.concatenate(rows, axis=-2)[:, :, :length, :keys]


def test_dropout_is_the_dense_formula_with_the_per_block_masks():
  _, mask, rng = _inputs(seed=2)
  q, k, v = (jnp.asarray(rng.normal(size=(4, LENGTH, HEADS, 4)), jnp.float32)
             for _ in range(3))
  cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.float32)
  rate, key = 0.3, jax.random.PRNGKey(7)

  def run(q, k, v):
    results = []
    for qc, kc in (CHUNKS[0], CHUNKS[2]):
      chunked = lambda q, k, v: chunked_attention(q, k, v, mask, query_chunk=qc, key_chunk=kc,
                                                  dropout_rng=key, dropout_rate=rate)
      keep = _assembled_keep(key, (4, HEADS, LENGTH, LENGTH), qc, kc, rate)
      ref = lambda q, k, v: _dropped_reference(q, k, v, mask, keep, rate)
      results.append([(out, pullback(cotangent)) for out, pullback in
                      (jax.vjp(chunked, q, k, v), jax.vjp(ref, q, k, v))])
    return results

  for got, want in _run(run, q, k, v):
    assert not np.allclose(got[0], _reference(q, k, v, mask), atol=1e-3)  # dropout did act
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_train_step_memory_is_linear_in_length():
  """XLA's compiled temp memory of value_and_grad at L and 4L: ~4x chunked, ~16x dense."""
  def temp_bytes(implementation, length):
    mixer = FullAttention(num_heads=1, qkv_dim=4, implementation=implementation,
                          query_chunk=128, key_chunk=128)
    x = jnp.ones((1, length, 4), jnp.float32)
    mask = jnp.ones((1, length), bool)
    params = jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x, mask,
                                               deterministic=True))
    loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True) ** 2)
    compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(params, x).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  chunked = temp_bytes("chunked", 2048) / temp_bytes("chunked", 512)
  dense = temp_bytes("dense", 2048) / temp_bytes("dense", 512)
  assert chunked < 6 and dense > 10, (chunked, dense)


def test_implementation_choice_and_errors():
  choose = lambda impl, **kw: resolve_implementation(
      impl, **{**dict(backend="gpu", dtype="bfloat16", dropout_rate=0.0, head_dim=64), **kw})
  assert choose("auto") == "cudnn" and choose("auto", dtype="float16") == "cudnn"
  for reason in (dict(backend="cpu"), dict(backend="tpu"), dict(dtype="float32"),
                 dict(dropout_rate=0.1), dict(head_dim=12), dict(head_dim=256)):
    assert choose("auto", **reason) == "chunked", reason
    with pytest.raises(SettingError, match="'cudnn' needs"):
      choose("cudnn", **reason)
  assert choose("cudnn") == "cudnn"
  assert choose("dense", backend="cpu") == "dense" and choose("chunked") == "chunked"
  assert resolve_implementation("auto", backend=jax.default_backend(), dtype="bfloat16",
                                dropout_rate=0.0, head_dim=64) == "chunked"  # this CPU

  x, mask, _ = _inputs()
  with pytest.raises(SettingError, match="needs a GPU .*backend is 'cpu'.*'chunked'"):
    FullAttention(num_heads=HEADS, qkv_dim=DIM, dtype="bfloat16", implementation="cudnn")

  assert registry.default_settings("transformer") == dict(
      implementation="dense", query_chunk=256, key_chunk=256, causal=False)
  with pytest.raises(SettingError, match="'dense', 'chunked', 'cudnn', 'auto'"):
    FullAttention(num_heads=HEADS, qkv_dim=DIM, implementation="flash")
  for bad in (0, -1, 2.5, True):
    with pytest.raises(SettingError, match="query_chunk=.* an integer >= 1"):
      FullAttention(num_heads=HEADS, qkv_dim=DIM, query_chunk=bad)
  with pytest.raises(SettingError, match="key_chunk=0 .* an integer >= 1"):
    FullAttention(num_heads=HEADS, qkv_dim=DIM, key_chunk=0)
  with pytest.raises(SettingError, match="attention.implementation='Chunked' is not valid"):
    models.build(dict(name="transformer", num_heads=2, qkv_dim=16,
                      attention=dict(implementation="Chunked")),
                 vocab_size=20, num_classes=5, max_len=24, pair=False)


def test_cudnn_wrapper_takes_key_counts_and_falls_back_on_other_masks():
  """The "cudnn" call made through XLA (the same jax.nn.dot_product_attention call, any
  backend): trailing padding uses the fused call; a hole or an all-padded row the fallback."""
  _, _, rng = _inputs(seed=4)
  q, k, v = (jnp.asarray(rng.normal(size=(3, LENGTH, HEADS, 8)), jnp.float32) for _ in range(3))
  trailing = jnp.asarray(np.arange(LENGTH)[None, :] < np.array([[LENGTH], [7], [1]]))
  hole = trailing.at[0, 3].set(False)
  empty = trailing.at[2].set(False)
  sentinel = lambda: jnp.full(q.shape, 7.0, q.dtype)

  def run(q, k, v):
    wrapped = lambda mask, fallback: transformer.cudnn_attention(
        q, k, v, mask, fallback=fallback, implementation="xla")
    exact = lambda mask: lambda: chunked_attention(q, k, v, mask, query_chunk=4, key_chunk=3)
    return ([wrapped(m, sentinel) for m in (trailing, hole, empty)],
            [wrapped(m, exact(m)) for m in (trailing, hole, empty)],
            [_reference(q, k, v, m) for m in (trailing, hole, empty)])

  with_sentinel, with_exact, references = _run(run, q, k, v)
  np.testing.assert_allclose(with_sentinel[0], references[0], rtol=1e-5, atol=1e-5)
  assert np.all(with_sentinel[1] == 7.0) and np.all(with_sentinel[2] == 7.0)
  for got, want in zip(with_exact, references):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_checkpoint_compatibility():
  """The same parameter tree as dense: a checkpoint of one implementation runs with the other
  and gives the same logits."""
  settings = lambda **attn: dict(
      name="transformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32, num_layers=2,
      dropout_rate=0.1, attention_dropout_rate=0.1, attention=attn)
  build = lambda **attn: models.build(settings(**attn), vocab_size=20, num_classes=5,
                                      max_len=24, pair=False)
  chunked = build(implementation="chunked", query_chunk=8, key_chunk=8)
  dense = build()
  tokens = np.random.default_rng(0).integers(1, 20, size=(2, 24))
  tokens[1, 5:] = 0
  tokens = jnp.asarray(tokens)

  def run(tokens):
    params = chunked.init(jax.random.PRNGKey(0), tokens)
    return params, chunked.apply(params, tokens), dense.apply(params, tokens)

  params, logits, dense_logits = _run(run, tokens)
  dense_params = jax.eval_shape(lambda: dense.init(jax.random.PRNGKey(0), tokens))
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(dense_params)
  shapes = lambda tree: jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.shape, tree))
  assert shapes(params) == shapes(dense_params)
  np.testing.assert_allclose(logits, dense_logits, rtol=1e-5, atol=1e-5)
  assert transformer.IMPLEMENTATIONS == ("dense", "chunked", "cudnn", "auto")
