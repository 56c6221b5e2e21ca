"""Reversible residual layers (Gomez et al. 2017; the Reformer, Kitaev et al. 2020).

The stream is held twice, (x1, x2), and each layer i computes

    y1 = x1 + f_i(x2)        f: the token-mixer branch, dropout(mixer(LN(.)))
    y2 = x2 + g_i(y1)        g: the feed-forward branch, dropout(MLP(LN(.)))

Its inputs follow from its outputs, x2 = y2 - g_i(y1) and x1 = y1 - f_i(x2), so the backward
pass needs no stored activation: `stack` is one custom VJP over all the layers whose residuals
are only the final (y1, y2), the parameters, the mask and the dropout key. Walking back layer
by layer, it recomputes each layer's inputs and takes that layer's VJP, so activation memory
does not grow with depth. Dropout keys are derived from the one key, the same in the
recomputation as in the forward pass.

Both passes are loops over the layers (`fori_loop`, one `switch` branch per layer, since
layers may differ: patterns chosen by layer index, ...). Inside a loop body XLA can neither
merge a recomputation with the forward pass (common-subexpression elimination would keep the
forward's activations, dropout bits included, alive for the backward pass) nor hoist every
layer's work up front; optimisation barriers do not prevent either on every backend (XLA's CPU
pipeline drops them before its last CSE and its scheduler), a loop does.

The recomputed inputs equal the forward ones up to floating-point rounding (x + a - a is not
always x), which grows with depth and is larger in bfloat16; in float32 the gradients agree
with ordinary autodiff to about 1e-6 relative, except where the forward pass is
ill-conditioned: LayerNorm of an all-zero vector (a zero-initialised CLS token without
absolute positions) magnifies the rounding a thousandfold, so gradients there are approximate.

This module is plain JAX: the encoder (models/encoder.py) supplies f and g as pure functions of
explicit parameters.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

# f(i, layer_params, shared_params, x_BxLxD, context, key) -> BxLxD, and g likewise: layer i's
# branch as a pure function. `context` holds inputs that get no gradient (the padding mask);
# `key` is that branch's dropout key, or None without dropout.
Branch = Callable[[int, Any, Any, jax.Array, Any, Any], jax.Array]


def _keys(rng, i: int):
  """The dropout keys of layer i's two branches (None without dropout)."""
  if rng is None:
    return None, None
  return jax.random.fold_in(rng, 2 * i), jax.random.fold_in(rng, 2 * i + 1)


def _size(tree) -> int:
  return sum(int(jnp.size(x)) for x in jax.tree_util.tree_leaves(tree))


def _add(a, b):
  return jax.tree_util.tree_map(lambda u, v: u + v, a, b)


def _backward(f: Branch, g: Branch, num_layers: int):
  """The custom VJP's backward pass: from the outputs, layer by layer from the top, each
  layer's inputs are recomputed and its VJP taken."""

  def backward(residuals, cotangents):
    shared, layers, y1, y2, context, rng = residuals
    # Each layer's parameter cotangent leaves its branch as one flat vector, padded to the
    # longest layer's, so that every branch returns the same type.
    unravel = [ravel_pytree(p)[1] for p in layers]
    width = max(_size(p) for p in layers)

    def layer_backward(j, carry):
      """Layer j's inputs from its outputs, and the cotangents of its inputs and parameters."""
      y1, y2, dy1, dy2 = carry
      key_f, key_g = _keys(rng, j)
      # y2 = x2 + g(y1): recompute g(y1), recover x2, and pull dy2 back through g.
      g_out, g_vjp = jax.vjp(lambda p, s, x: g(j, p, s, x, context, key_g).astype(x.dtype),
                             layers[j], shared, y1)
      x2 = y2 - g_out
      dp_g, ds_g, dy1_through_g = g_vjp(dy2)
      dy1 = dy1 + dy1_through_g  # y1's whole cotangent: direct, and through y2
      # y1 = x1 + f(x2): recompute f(x2), recover x1, and pull dy1 back through f.
      f_out, f_vjp = jax.vjp(lambda p, s, x: f(j, p, s, x, context, key_f).astype(x.dtype),
                             layers[j], shared, x2)
      x1 = y1 - f_out
      dp_f, ds_f, dx2_through_f = f_vjp(dy1)
      dp_flat = ravel_pytree(_add(dp_g, dp_f))[0]
      dp_flat = jnp.pad(dp_flat, (0, width - dp_flat.size))
      return (x1, x2, dy1, dy2 + dx2_through_f), dp_flat, _add(ds_g, ds_f)

    def step(k, state):
      i = num_layers - 1 - k  # top layer first
      carry, dp_LxP, d_shared = state
      branches = [lambda c, j=j: layer_backward(j, c) for j in range(num_layers)]
      carry, dp_flat, ds = jax.lax.switch(i, branches, carry)
      return carry, dp_LxP.at[i].set(dp_flat), _add(d_shared, ds)

    d_shared = jax.tree_util.tree_map(jnp.zeros_like, shared)
    leaves = jax.tree_util.tree_leaves(layers)
    dp_LxP = jnp.zeros((num_layers, width), jnp.result_type(*leaves) if leaves else jnp.float32)
    (_, _, dx1, dx2), dp_LxP, d_shared = jax.lax.fori_loop(
        0, num_layers, step, ((y1, y2, *cotangents), dp_LxP, d_shared))
    d_layers = [unravel[j](dp_LxP[j, :_size(layers[j])])
                for j in range(num_layers)]
    # No gradient for the context (mask) and the key.
    return d_shared, d_layers, dx1, dx2, None, None

  return backward


def stack(f: Branch, g: Branch, shared: Any, layers: Sequence[Any], x1, x2, context=None,
          rng=None, *, recompute: bool = True):
  """(x1, x2) -> (y1, y2) through len(layers) reversible layers.

  shared: parameters every layer uses (a pytree, {} if none); layers: one parameter pytree per
  layer; context: inputs without gradient (e.g. the mask); rng: one dropout key or None.
  recompute=False runs the same computation under ordinary autodiff (which stores every
  layer's activations): the reference the tests compare the custom VJP with, and what
  initialisation uses.
  """
  layers = list(layers)
  num_layers = len(layers)

  def layer(i, p, s, x1, x2, context, rng):
    key_f, key_g = _keys(rng, i)
    y1 = x1 + f(i, p, s, x2, context, key_f).astype(x1.dtype)  # the streams keep their dtype
    return y1, x2 + g(i, p, s, y1, context, key_g).astype(x2.dtype)

  if not recompute or num_layers == 0:
    for i in range(num_layers):
      x1, x2 = layer(i, layers[i], shared, x1, x2, context, rng)
    return x1, x2

  def forward(shared, layers, x1, x2, context, rng):
    def step(i, x1_x2):
      branches = [lambda xs, j=j: layer(j, layers[j], shared, *xs, context, rng)
                  for j in range(num_layers)]
      return jax.lax.switch(i, branches, x1_x2)
    return jax.lax.fori_loop(0, num_layers, step, (x1, x2))

  def forward_with_residuals(shared, layers, x1, x2, context, rng):
    y1, y2 = forward(shared, layers, x1, x2, context, rng)
    # Only the outputs are kept (parameters, mask and key exist anyway): O(1) in depth.
    return (y1, y2), (shared, layers, y1, y2, context, rng)

  run = jax.custom_vjp(forward)
  run.defvjp(forward_with_residuals, _backward(f, g, num_layers))
  return run(shared, layers, x1, x2, context, rng)
