"""Transformer-XL (Dai et al. 2019): the parallel segment computation against independent
references (dense four-term relative attention, and a segment-by-segment recurrence with a
cached memory), no gradient into the memory, padding, and no L x L array."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
import lra.models.mixers.transformer_xl  # noqa: F401  (registers "transformer_xl")
from lra.models import registry
from lra.models.common import MASK_VALUE
from lra.models.encoder import MLP
from lra.models.mixers.transformer_xl import TransformerXLAttention
from lra.rules import SettingError
from tests import helpers
from tests.helpers import run_once as _run

HEADS, DIM = 2, 8  # head dim 4


def _mixer(**kw):
  return TransformerXLAttention(num_heads=HEADS, qkv_dim=DIM, **kw)


def _inputs(length, seed=0):
  """helpers.padded_inputs (a full row, trailing padding, an early hole: in later memories)
  with a second hole in row 2 halfway."""
  x, mask, rng = helpers.padded_inputs(length, DIM, seed)
  mask[2, length // 2] = False
  return x, jnp.asarray(mask), rng


def _randomise(params, rng, names=("u", "v", "relative_key")):
  """Larger random values for u, v and W_R so that every term of the logits matters."""
  def visit(tree):
    out = {}
    for key, value in tree.items():
      if isinstance(value, dict):
        out[key] = visit(value) if key not in names else jax.tree_util.tree_map(
            lambda a: jnp.asarray(rng.normal(size=a.shape), jnp.float32), value)
      else:
        out[key] = (jnp.asarray(rng.normal(size=value.shape), jnp.float32)
                    if key in names else value)
    return out
  return visit(params)


# ------------------------------------------------------------------ independent references
def _sinusoid(distance, dim):
  """R_d entry by entry: component m < ceil(dim/2) is sin(d f_m), the others cos(d f_(m-half)),
  with f_m = 10000^(-2m/dim)."""
  half = (dim + 1) // 2
  m = np.arange(dim)
  freq = 10000.0 ** (-2.0 * np.where(m < half, m, m - half) / dim)
  lead = (1,) * distance.ndim
  angle = distance[..., None].astype(jnp.float32) * jnp.asarray(freq, jnp.float32).reshape(
      *lead, dim)
  return jnp.where(jnp.asarray(m < half).reshape(*lead, dim), jnp.sin(angle), jnp.cos(angle))


def _reference_attention(p, u_HxK, v_HxK, xq_BxQxD, xk_BxTxD, posq_Q, posk_T, keep_BxT):
  """Queries at positions posq attend to keys at posk with the paper's four terms, written
  out term by term with R_{i-j} computed for every pair (dense, no shift trick)."""
  qkv = p["QKVProjection_0"]
  q = jnp.einsum("bqd,dhk->bqhk", xq_BxQxD, qkv["query"]["kernel"])
  k = jnp.einsum("btd,dhk->bthk", xk_BxTxD, qkv["key"]["kernel"])
  val = jnp.einsum("btd,dhk->bthk", xk_BxTxD, qkv["value"]["kernel"])
  r_QxTxD = _sinusoid(jnp.asarray(posq_Q)[:, None] - jnp.asarray(posk_T)[None, :],
                      xq_BxQxD.shape[-1])
  wr_QxTxHxK = jnp.einsum("qtd,dhk->qthk", r_QxTxD, p["relative_key"]["kernel"])
  terms = dict(
      a=jnp.einsum("bqhk,bthk->bhqt", q, k),
      b=jnp.einsum("bqhk,qthk->bhqt", q, wr_QxTxHxK),
      c=jnp.einsum("hk,bthk->bht", u_HxK, k)[:, :, None, :],
      d=jnp.einsum("hk,qthk->hqt", v_HxK, wr_QxTxHxK)[None])
  logits = (terms["a"] + terms["b"] + terms["c"] + terms["d"]) / np.sqrt(q.shape[-1])
  logits = jnp.where(keep_BxT[:, None, None, :], logits, -1e9)
  y = jnp.einsum("bhqt,bthk->bqhk", jax.nn.softmax(logits, axis=-1), val)
  out = p["OutputProjection_0"]["out"]
  return jnp.einsum("bqhk,hkd->bqd", y, out["kernel"]) + out["bias"][None, None], logits, terms


# ------------------------------------------------------------------ tests
def test_one_segment_without_memory_is_dense_relative_attention():
  """mem_len 0 / one segment: ordinary full attention with the four relative terms (outputs
  and gradients, with padding)."""
  length = 7
  x, mask, rng = _inputs(length)
  mixers = [_mixer(segment_len=16, mem_len=0, untie_biases=True),
            _mixer(segment_len=length, untie_biases=True)]  # default memory: nothing before
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  pos = np.arange(length)

  def run(x):
    params = mixers[0].init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
    params = _randomise(params, np.random.default_rng(1))
    outs = [jax.vjp(lambda p, x: m.apply({"params": p}, x, mask, deterministic=True),
                    params, x) for m in mixers]
    ref = lambda p, x: _reference_attention(p, p["u"], p["v"], x, x, pos, pos, mask)[0]
    ref_out, ref_pullback = jax.vjp(ref, params, x)
    return ([(o, pull(cotangent)) for o, pull in outs], (ref_out, ref_pullback(cotangent)))

  outs, (ref_out, ref_grads) = _run(run, x)
  for out, grads in outs:
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    for g, rg in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
      np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-5)


def test_logits_are_the_four_terms():
  """Every segment's logits (memory included, M > S and not a multiple of it) equal
  (a)+(b)+(c)+(d) computed pair by pair; masked keys (padding, before position 0) get
  MASK_VALUE."""
  seg, mem, length = 4, 6, 13  # padded internally to 16: 4 segments
  x, mask, _ = _inputs(length, seed=2)
  mixer = _mixer(segment_len=seg, mem_len=mem, untie_biases=True)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
    params = _randomise(params, np.random.default_rng(3))
    _, state = mixer.apply({"params": params}, x, mask, deterministic=True,
                           mutable=["intermediates"])
    logits = state["intermediates"]["logits"][0]
    # The reference sees the sequence zero-padded on both sides: M before, the rest after.
    x_pad = jnp.pad(x, [(0, 0), (mem, 16 - length), (0, 0)])
    keep_pad = jnp.pad(mask, [(0, 0), (mem, 16 - length)])
    refs = []
    for n in range(4):
      posq, posk = np.arange(n * seg, n * seg + seg), np.arange(n * seg - mem, n * seg + seg)
      _, ref_logits, terms = _reference_attention(
          params, params["u"], params["v"], x_pad[:, posq + mem], x_pad[:, posk + mem], posq,
          posk, keep_pad[:, posk + mem])
      refs.append((ref_logits, terms))
    return logits, refs, keep_pad

  logits, refs, keep_pad = _run(run, x)
  assert logits.shape == (3, 4, HEADS, seg, mem + seg)
  for n, (ref_logits, terms) in enumerate(refs):
    keep = np.asarray(keep_pad)[:, n * seg: n * seg + mem + seg][:, None, None, :]
    keep = np.broadcast_to(keep, ref_logits.shape)
    got = np.asarray(logits[:, n])
    np.testing.assert_allclose(got[keep], np.asarray(ref_logits)[keep], rtol=1e-5, atol=1e-5)
    assert np.all(got[~keep] == MASK_VALUE)
    if n == 3:  # every term matters, so a missing or misplaced one would fail above
      for name, term in terms.items():
        assert np.abs(np.broadcast_to(term, keep.shape)[keep]).max() > 0.5, name


def _tokens(length, seed=0):
  tokens = np.random.default_rng(seed).integers(1, 20, size=(2, length))
  tokens[1, length - 4:] = 0  # trailing padding (a fully padded part of the last segments)
  tokens[1, 2] = 0  # a hole early on: a padded key in later memories
  return jnp.asarray(tokens)


def _build(num_layers, attention, **model):
  settings = dict(name="transformer_xl", emb_dim=DIM, num_heads=HEADS, qkv_dim=DIM,
                  mlp_dim=16, num_layers=num_layers, dropout_rate=0.0,
                  attention_dropout_rate=0.0, attention=attention,
                  positions="none", pooling="MEAN")  # as the task configs set them
  settings.update(model)
  return models.build(settings, vocab_size=20, num_classes=3, max_len=13, pair=False)


def test_parallel_equals_segment_recurrence_with_cached_memory():
  """A 2-layer model equals the paper's recurrence: segment by segment, each layer's memory
  being the stored output of the layer below on the previous positions (stop-gradient), for
  the hidden states and for every parameter gradient (the embedding's included)."""
  seg, mem, layers = 4, 6, 2
  model = _build(layers, dict(segment_len=seg, mem_len=mem))
  tokens = _tokens(9)  # 10 positions with CLS: segments of 4, 4 and 2
  rng = np.random.default_rng(4)
  cotangent = jnp.asarray(rng.normal(size=(2, 10, DIM)), jnp.float32)
  is_final = lambda mdl, _: mdl.name == "final_norm"
  ln = lambda p, x: nn.LayerNorm().apply({"params": p}, x)

  def parallel(params):
    _, state = model.apply(params, tokens, capture_intermediates=is_final)
    return state["intermediates"]["encoder"]["final_norm"]["__call__"][0]

  def recurrent(params):
    enc = params["params"]["encoder"]
    u, v = enc["relative_biases"]["u"], enc["relative_biases"]["v"]
    x = enc["embed"]["embedding"][tokens]
    x = jnp.concatenate([jnp.broadcast_to(enc["cls"], (2, 1, DIM)), x], axis=1)
    keep = jnp.concatenate([jnp.ones((2, 1), bool), tokens != 0], axis=1)
    total = x.shape[1]
    cache = [[] for _ in range(layers)]  # per layer: its inputs h^{l-1}, segment by segment
    outputs = []
    for start in range(0, total, seg):
      posq = np.arange(start, min(start + seg, total))
      posm = np.arange(max(start - mem, 0), start)
      h = x[:, posq]
      for layer in range(layers):
        p = enc[f"block_{layer}"]
        memory = (jnp.concatenate(cache[layer], axis=1)[:, -len(posm):] if len(posm)
                  else h[:, :0])
        cache[layer].append(h)
        hq = ln(p["LayerNorm_0"], h)
        hm = jax.lax.stop_gradient(ln(p["LayerNorm_0"], memory))  # see the module docstring
        att, _, _ = _reference_attention(
            p["mixer"], u, v, hq, jnp.concatenate([hm, hq], axis=1), posq,
            np.concatenate([posm, posq]), keep[:, np.concatenate([posm, posq])])
        h = h + att
        h = h + MLP(16, 0.0, "float32").apply({"params": p["MLP_0"]},
                                              ln(p["LayerNorm_1"], h), deterministic=True)
      outputs.append(h)
    return ln(enc["final_norm"], jnp.concatenate(outputs, axis=1))

  no_mem = _build(layers, dict(segment_len=seg, mem_len=0))

  def run(tokens):
    params = model.init(jax.random.PRNGKey(0), tokens)
    params = _randomise(params, np.random.default_rng(5))
    loss = lambda f: lambda p: jnp.sum(f(p) * cotangent)
    _, alone = no_mem.apply(params, tokens, capture_intermediates=is_final)
    return (parallel(params), recurrent(params), jax.grad(loss(parallel))(params),
            jax.grad(loss(recurrent))(params),
            alone["intermediates"]["encoder"]["final_norm"]["__call__"][0])

  out, ref_out, grads, ref_grads, alone = _run(run, tokens)
  assert out.shape == (2, 10, DIM)
  np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
  flat, ref_flat = (jax.tree_util.tree_leaves_with_path(g) for g in (grads, ref_grads))
  for (path, g), (_, rg) in zip(flat, ref_flat):
    np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-5, err_msg=jax.tree_util.keystr(path))
  # The memory carries information: without it, only the first segment is the same.
  np.testing.assert_allclose(alone[:, :seg], out[:, :seg], rtol=1e-5, atol=1e-5)
  assert np.abs(alone[:, seg:] - out[:, seg:]).max() > 1e-2


def test_no_gradient_into_the_memory():
  """One layer, two segments: segment 1's output depends on segment 0's input (through the
  memory) but its gradient with respect to it is exactly zero; without the stop-gradient (the
  dense reference over the same keys) that gradient is not zero. W_k and W_v still learn from
  the memory: their gradients match the reference with a stop-gradient memory."""
  seg = 4
  x, _, rng = _inputs(2 * seg, seed=6)
  mask = jnp.ones(x.shape[:2], bool)
  mixer = _mixer(segment_len=seg, mem_len=seg, untie_biases=True)
  cotangent = jnp.asarray(rng.normal(size=(3, seg, DIM)), jnp.float32)
  bump = jnp.zeros_like(x).at[:, :seg].set(1.0)
  pos = np.arange(2 * seg)

  def run(x):
    params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)["params"]
    params = _randomise(params, np.random.default_rng(7))
    second = lambda p, x: jnp.sum(
        mixer.apply({"params": p}, x, mask, deterministic=True)[:, seg:] * cotangent)

    def reference(p, x, stop):
      keys = jnp.concatenate([jax.lax.stop_gradient(x[:, :seg]) if stop else x[:, :seg],
                              x[:, seg:]], axis=1)
      out, _, _ = _reference_attention(p, p["u"], p["v"], x[:, seg:], keys, pos[seg:], pos,
                                       mask)
      return jnp.sum(out * cotangent)

    return (second(params, x), second(params, x + bump), jax.grad(second, (0, 1))(params, x),
            jax.grad(reference, (0, 1))(params, x, True),
            jax.grad(reference, 1)(params, x, False))

  value, bumped, (p_grads, x_grads), (ref_p_grads, ref_x_grads), sg_free_x_grads = _run(run, x)
  assert all(np.any(g != 0) for g in jax.tree_util.tree_leaves(p_grads))  # all params learn
  assert abs(float(value - bumped)) > 1e-3  # the memory is read
  assert np.all(np.asarray(x_grads)[:, :seg] == 0.0)  # but takes no gradient
  assert np.abs(sg_free_x_grads[:, :seg]).max() > 1e-2  # which a plain dense path would
  np.testing.assert_allclose(x_grads, ref_x_grads, rtol=1e-4, atol=1e-5)
  for g, rg in zip(jax.tree_util.tree_leaves(p_grads), jax.tree_util.tree_leaves(ref_p_grads)):
    np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-5)


def test_logits_are_per_segment_and_nothing_is_length_squared():
  """Stricter than the contract's walk (no two axes of length L): the logits are S x (M + S)
  per segment and no array, forward or backward, holds L x L elements."""
  length, seg, mem = 256, 32, 32
  x, mask = jnp.ones((1, length, DIM), jnp.float32), jnp.ones((1, length), bool)
  mixer = _mixer(segment_len=seg, mem_len=mem, untie_biases=True)
  params = jax.eval_shape(
      lambda x: mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True), x)
  loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True))
  shapes = list(helpers.array_shapes(jax.make_jaxpr(jax.grad(loss, (0, 1)))(params, x).jaxpr))
  assert (1, length // seg, HEADS, seg, mem + seg) in shapes
  assert max(int(np.prod(s)) for s in shapes) < length * length


def test_settings_and_errors():
  assert registry.default_settings("transformer_xl") == {
      "segment_len": 256, "mem_len": -1, "untie_biases": False}
  with pytest.raises(SettingError, match="segment_len=0 .* >= 1"):
    _mixer(segment_len=0)
  with pytest.raises(SettingError, match="segment_len=True .* >= 1"):
    _mixer(segment_len=True)
  with pytest.raises(SettingError, match="mem_len=-2 .* >= -1"):
    _mixer(mem_len=-2)
  with pytest.raises(SettingError, match="True or False"):
    _mixer(untie_biases="yes")
  with pytest.raises(SettingError, match="segment_len, mem_len, untie_biases"):
    _build(1, dict(block_size=4))
  with pytest.raises(SettingError, match="segment_len=-1 .* >= 1"):
    _build(1, dict(segment_len=-1))
  x, mask, _ = _inputs(6)
  with pytest.raises(ValueError, match="needs the encoder's shared"):
    jax.eval_shape(lambda: _mixer().init(jax.random.PRNGKey(0), x, mask, deterministic=True))
  assert registry.make_shared("transformer_xl", {"untie_biases": True}, num_heads=2,
                              qkv_dim=8) is None


def test_built_encoder_shares_u_and_v_and_pools_every_segment():
  """Through models.build: no absolute positions, shared (or per-layer) u and v; MEAN pooling
  reads every segment, CLS pooling only the first."""
  tokens = _tokens(13)
  shared = _build(2, dict(segment_len=4))
  untied = _build(2, dict(segment_len=4, untie_biases=True))
  cls_pooled = _build(2, dict(segment_len=4), pooling="CLS")
  assert shared.encoder.config.positions == "none" and shared.encoder.config.pooling == "MEAN"

  def run(tokens):
    params = shared.init(jax.random.PRNGKey(0), tokens)
    # The second segment onwards changed (padding kept). CLS pooling reads position 0, which
    # only ever sees the first segment: the reason for MEAN pooling.
    changed = tokens.at[:, 4:].set(jnp.where(tokens[:, 4:] > 0, 20 - tokens[:, 4:], 0))
    both = jnp.concatenate([tokens, changed])
    return params, shared.apply(params, both), cls_pooled.apply(params, both)

  params, logits, cls_logits = _run(run, tokens)
  untied_params = jax.eval_shape(lambda: untied.init(jax.random.PRNGKey(0), tokens))
  enc, untied_enc = params["params"]["encoder"], untied_params["params"]["encoder"]
  assert "pos_embed" not in enc
  assert enc["relative_biases"]["u"].shape == enc["relative_biases"]["v"].shape == (HEADS, 4)
  assert all(not {"u", "v"} & set(enc[f"block_{i}"]["mixer"]) for i in range(2))
  assert "relative_biases" not in untied_enc
  assert all({"u", "v"} <= set(untied_enc[f"block_{i}"]["mixer"]) for i in range(2))
  assert logits.shape == (4, 3) and logits.dtype == jnp.float32
  assert not np.allclose(logits[:2], logits[2:], atol=1e-4)  # MEAN pooling reads them all
  np.testing.assert_allclose(cls_logits[:2], cls_logits[2:], rtol=1e-6, atol=1e-6)
