"""What the model tests share: tiny settings for every mixer, one-shot compiles, padded inputs,
independent references (masked softmax attention, a sequential linear recurrence) and the
jaxpr shape walk. The one-shot compiles, the contract's masks and the shape walk are
lra.testing's (where the mixer contract lives), imported here. Nothing here imports a mixer's
code: references stay independent of it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
# The contract's pieces, shared with the tests of single mixers (one implementation).
from lra.testing import (array_shapes, compile_once, contract_mask,  # noqa: F401
                         length_squared_shapes, noise_where_padded, run_once)

# Recurrent-family members whose core kind another member runs in the default suite: HGRN2
# (GLA's vector decay), DeltaNet and DeltaProduct (Gated DeltaNet's delta rule; DeltaProduct's
# interleaved steps: tests/test_deltaproduct.py), Mamba-3 (Mamba-2's scalar decay), KDA and
# Comba (RWKV-7's diagonal-plus-rank-one kind; tests/test_dplr.py for both decay kinds). The
# checks that run for every mixer (the contract, export, the recipes) run these `-m slow`;
# each keeps its own reference test (tests/test_<name>.py) in the default suite.
SAME_CORE_KIND = ("hgrn2", "deltanet", "deltaproduct", "mamba3", "kda", "comba")


def slow_if_same_kind(params, mixer_of=lambda p: p):
  """pytest parameters: those whose mixer (`mixer_of(p)`: a registered name or a variant's
  id, "name-variant") is of SAME_CORE_KIND marked slow, the others as they are."""
  return [pytest.param(*(p if isinstance(p, tuple) else (p,)), marks=pytest.mark.slow)
          if mixer_of(p).split("-")[0] in SAME_CORE_KIND else p for p in params]


def one_of_each_encoder_kind() -> set:
  """The mixers the encoder builds around differently: the first of each base class, and each
  that sets the encoder's shape (post-norm, more than one layer at least, one fixed length)."""
  kinds, chosen = set(), set()
  for name in registry.names():
    mixer = registry.get(name)
    if mixer.__mro__[1] not in kinds:
      kinds.add(mixer.__mro__[1])
      chosen.add(name)
    if (registry.encoder_settings(name).get("prenorm") is False or mixer.MIN_LAYERS > 1
        or mixer.FIXED_LENGTH):
      chosen.add(name)
  return chosen


# Tiny settings per mixer (config.model.attention), the one table the contract test and
# tiny_model() read. Block, chunk and segment sizes are 4 and projection sizes small, so the
# test lengths (7, 13) span several blocks and are a multiple of none; a mixer missing here
# runs with its defaults, so a new mixer is tested with no edit.
TINY_SETTINGS = {
    "based": dict(feature_dim=4, window=3, chunk_size=4),
    "bigbird": dict(block_size=4, num_random_blocks=1, num_extra_global=4),
    "comba": dict(chunk_size=4),
    "deltanet": dict(chunk_size=4),
    "deltaproduct": dict(chunk_size=4),
    "gated_deltanet": dict(chunk_size=4),
    "gla": dict(chunk_size=4, gate_low_rank_dim=4),
    "hgrn2": dict(chunk_size=4),
    "hyena": dict(l_max=40, filter_order=8),
    "kda": dict(chunk_size=4),
    "linformer": dict(k=4),
    "local": dict(block_size=4),
    "longformer": dict(window=4),
    "lru": dict(state_size=8),
    "mamba": dict(state_size=4),
    "mamba2": dict(d_state=4, head_dim=4, expand=1, chunk_size=4),
    "mamba3": dict(d_state=4, head_dim=4, expand=1, chunk_size=4),
    "mega": dict(z_dim=4, v_dim=8, ema_dim=2, max_positions=6),
    "mlstm": dict(chunk_size=4),
    "nystromformer": dict(num_landmarks=4, conv_kernel=3),
    "performer": dict(nb_features=8),
    "reformer": dict(n_buckets=4, chunk_len=4),
    "retnet": dict(chunk_size=4),
    # zero_init False: the authors' zero o_proj and LoRA downs give the other parameters no
    # gradient at init, which the contract cannot tell from a disconnected parameter.
    "rwkv7": dict(chunk_size=4, decay_low_rank_dim=4, a_low_rank_dim=4, gate_low_rank_dim=4,
                  zero_init=False),
    "s4d": dict(state_size=8),
    "s5": dict(state_size=8, blocks=2),
    "sinkhorn": dict(block_size=4),
    "sparse_transformer": dict(block_size=4, c=2),
    "transformer_xl": dict(segment_len=4, mem_len=3),
}

# The encoder around a tiny mixer: 2 layers (so shared modules are shared), dropout on.
TINY_ENCODER = dict(emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=16, num_layers=2,
                    dropout_rate=0.1, attention_dropout_rate=0.1)


def tiny_settings(name: str) -> dict:
  """The tiny config.model.attention of mixer `name` ({} = its defaults)."""
  return dict(TINY_SETTINGS.get(name, {}))


def tiny_model(name: str, **overrides) -> dict:
  """A tiny config.model dict for ANY mixer (for models.build): the tiny encoder, the encoder
  settings the model needs on every task (its ENCODER_SETTINGS, e.g. no positions for the
  SSMs) and the mixer's tiny settings. `overrides` replace top-level keys; `attention=`
  entries update the tiny settings."""
  model = dict(name=name, **TINY_ENCODER)
  if not registry.takes_attention_dropout(name):
    model["attention_dropout_rate"] = 0.0  # it has no attention weights to drop
  model.update(registry.encoder_settings(name))
  attention = tiny_settings(name)
  attention.update(overrides.pop("attention", None) or {})
  model.update(overrides)
  # At least the mixer's MIN_LAYERS, as the configs give it (Based: one layer is BaseConv alone).
  model["num_layers"] = max(model["num_layers"], registry.get(name).MIN_LAYERS)
  model["attention"] = attention
  return model


# --- masks and padded inputs (True = a real token) ---

def trailing_mask(lengths, length: int) -> np.ndarray:
  """BxL: row b real for its first lengths[b] positions (LRA pads at the end)."""
  return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def random_mask(rng, batch: int, length: int, *, full_first: bool = True,
                hole: bool = False) -> np.ndarray:
  """Trailing padding of random length (>= 1 real token per row); row 0 unpadded when
  `full_first`; with `hole`, the last row also loses one inner position (not its first)."""
  lengths = rng.integers(1, length + 1, size=batch)
  if full_first:
    lengths[0] = length
  mask = trailing_mask(lengths, length)
  if hole and length > 2:
    mask[-1, :] = True
    mask[-1, rng.integers(1, length)] = False
  return mask


def padded_inputs(length: int, width: int, seed: int = 0, batch: int = 3):
  """Random BxLxD inputs and a numpy mask: one full row, one with trailing padding after 4 (as
  LRA pads), one with a hole at 2; and the generator, for noise."""
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, length, width)), jnp.float32)
  mask = np.ones((batch, length), bool)
  mask[1, 4:] = False
  mask[2, 2] = False
  return x, mask, rng


def padded_tokens(vocab: int, length: int, seed: int = 0, batch: int = 3):
  """Token ids (0 = padding): trailing padding after 7 in row 1, a hole at 3 in row 2."""
  tokens = np.random.default_rng(seed).integers(1, vocab, size=(batch, length))
  tokens[1, 7:] = 0
  tokens[2, 3] = 0
  return jnp.asarray(tokens, jnp.int32)


# --- independent references ---

def masked_softmax_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, allowed_BxHxLxM):
  """Softmax attention over the allowed keys, head by head in plain jnp (scaled by
  1/sqrt(K)); a query with no allowed key outputs zeros. `allowed` broadcasts to BxHxLxM."""
  num_heads = q_BxLxHxK.shape[2]
  allowed_BxHxLxM = jnp.broadcast_to(
      allowed_BxHxLxM, (q_BxLxHxK.shape[0], num_heads, q_BxLxHxK.shape[1], k_BxMxHxK.shape[1]))
  heads = []
  for h in range(num_heads):
    q, k, v = q_BxLxHxK[:, :, h], k_BxMxHxK[:, :, h], v_BxMxHxK[:, :, h]
    allowed = allowed_BxHxLxM[:, h]
    scores = q @ jnp.swapaxes(k, 1, 2) / np.sqrt(q.shape[-1])
    top = jnp.max(jnp.where(allowed, scores, -jnp.inf), -1, keepdims=True)
    e = jnp.where(allowed, jnp.exp(scores - jnp.where(jnp.isfinite(top), top, 0.0)), 0.0)
    total = jnp.sum(e, -1, keepdims=True)
    heads.append((e / jnp.where(total > 0, total, 1.0)) @ v)
  return jnp.stack(heads, 2)


def projected_attention(params, x_BxLxD, allowed_BxHxLxL):
  """Multi-head attention with the Transformer's parameter layout (QKVProjection_0/{query,
  key,value}, OutputProjection_0/out) and an explicit pattern of allowed (query, key) pairs:
  the dense reference of every pattern-restricted mixer."""
  p = params["params"] if "params" in params else params
  wq, wk, wv = (p["QKVProjection_0"][n]["kernel"] for n in ("query", "key", "value"))
  out = p["OutputProjection_0"]["out"]
  project = lambda w: jnp.einsum("bld,dhk->blhk", x_BxLxD, w)
  heads_BxLxHxK = masked_softmax_attention(project(wq), project(wk), project(wv),
                                           allowed_BxHxLxL)
  return jnp.einsum("blhk,hkd->bld", heads_BxLxHxK, out["kernel"]) + out["bias"][None, None]


def linear_recurrence(a_N, b_LxN, *, reverse: bool = False):
  """States of h_t = a * h_{t-1} + b_t (h_{-1} = 0) by a Python loop, LxN; with `reverse`
  the loop runs from the end (h_t = a * h_{t+1} + b_t). The reference of scan mixers."""
  order = range(b_LxN.shape[0] - 1, -1, -1) if reverse else range(b_LxN.shape[0])
  state_N = jnp.zeros(b_LxN.shape[1:], jnp.result_type(a_N, b_LxN))
  states = [None] * b_LxN.shape[0]
  for t in order:
    state_N = a_N * state_N + b_LxN[t]
    states[t] = state_N
  return jnp.stack(states)


def mixer_against_reference(mixer, make_params, reference, x_BxLxD, mask_BxL, cotangent_BxLxD,
                            *, grads: bool = True):
  """A mixer's real outputs (padded positions zeroed) and reference(params, x), and (with
  `grads`) the gradients of sum(output * cotangent) of each with respect to (params, x): one
  compiled program. make_params(x) -> the mixer's variables. Returns (out, ref), (grads,
  ref_grads) (empty tuples without `grads`)."""
  real = jnp.asarray(mask_BxL)[..., None]
  apply = lambda p, x: jnp.where(real, mixer.apply(p, x, jnp.asarray(mask_BxL),
                                                   deterministic=True), 0.0)

  def run(x):
    params = make_params(x)
    outs = tuple(f(params, x) for f in (apply, reference))
    if not grads:
      return outs, ((), ())
    loss = lambda f: lambda p, x: jnp.sum(f(p, x) * cotangent_BxLxD)
    return outs, tuple(jax.grad(loss(f), (0, 1))(params, x) for f in (apply, reference))

  return run_once(run, x_BxLxD)


def training_step(model, tokens, labels, tx):
  """The variables of a classifier at init and after one update by the optax transformation
  `tx` on the mean cross-entropy (dropout on): what a stability check compares. Traceable:
  compile it with the caller's other work."""
  import optax
  params = model.init(jax.random.PRNGKey(0), tokens)
  loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(
      model.apply(p, tokens, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)}),
      labels).mean()
  updates, _ = tx.update(jax.grad(loss)(params), tx.init(params), params)
  return params, optax.apply_updates(params, updates)


def layer_norm(p, x_BxLxD):
  """Flax's LayerNorm (epsilon 1e-6) written out, with its parameters p = {scale, bias}."""
  mean = jnp.mean(x_BxLxD, -1, keepdims=True)
  var = jnp.mean((x_BxLxD - mean) ** 2, -1, keepdims=True)
  return (x_BxLxD - mean) / jnp.sqrt(var + 1e-6) * p["scale"][None, None] + p["bias"][None, None]


def perturb(tree, seed: int = 9, scale: float = 0.1):
  """Every leaf plus scale * N(0, 1): non-trivial norms and biases, so that wrong wiring
  cannot hide behind ones and zeros."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree_util.tree_unflatten(
      treedef, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
