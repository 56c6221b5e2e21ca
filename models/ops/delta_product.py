"""DeltaProduct's recurrence (Siems et al. 2025, "DeltaProduct: Improving State-Tracking in
Linear RNNs via Householder Products") on the recurrent core's delta rule: each position t
takes N delta-rule steps, with N keys k_{t,1..N} (unit norm), values and strengths beta, so
that its transition is a product of N generalised Householder matrices:
    S_t = H_{t,N} ... H_{t,1} a_t S_{t-1} + (the N writes),   H_{t,j} = I - beta_{t,j} k k^T
    S_{t,0} = a_t S_{t-1}
    S_{t,j} = S_{t,j-1} + beta_{t,j} k_{t,j} (v_{t,j} - S_{t,j-1}^T k_{t,j})^T,  j = 1..N
    S_t = S_{t,N},  o_t = S_t^T q_t
with beta in (0, 2) the eigenvalues of each factor reach (-1, 1] (Grazzi et al. 2025), and a_t
= exp(log_decay_t) the optional forget gate, one per position.

Computed, as fla's reference does, by interleaving: the L positions become L N sub-steps of
the core (models/ops/matrix_recurrence.py, chunked in the UT form or step by step), sub-step
(t, j) writing with k_{t,j}, v_{t,j}, beta_{t,j}; the decay sits on each position's first
sub-step (log decay 0 on the others) and the query on its last (0 on the others, whose outputs
are dropped). A padded position pads all of its N sub-steps (the core neither decays, writes
nor reads there). A chunk of the chunked form counts sub-steps.

Reversed (the backward pass of a bidirectional mixer): the core runs the sub-steps from the
end, so each position's sub-steps are laid out in reverse (decay on the last, query on the
first): the reversed pass visits the positions from the end and each position's N steps in
their own order, decay first, read last, as the forward pass does.
"""
from __future__ import annotations

import jax.numpy as jnp

from lra.models.ops.matrix_recurrence import recurrence


def interleave(q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, beta_BxLxNxH, mask_BxL,
               log_decay_BxLxH=None, *, reverse: bool = False):
  """The core's inputs over M = L N sub-steps: (q_BxMxHxK, k_BxMxHxK, v_BxMxHxV, mask_BxM,
  gates) with gates the core's beta (B x M x H) and log_decay (B x M x H; absent without a
  decay). See the module docstring for the layout (and `reverse`'s)."""
  batch, length, steps = k_BxLxNxHxK.shape[:3]
  if reverse:  # each position's steps from its last: the core's flip restores their order
    k_BxLxNxHxK, v_BxLxNxHxV, beta_BxLxNxH = (jnp.flip(a, axis=2) for a in
                                             (k_BxLxNxHxK, v_BxLxNxHxV, beta_BxLxNxH))
  first, last = (steps - 1, 0) if reverse else (0, steps - 1)
  step_N = jnp.arange(steps)
  at = lambda a_BxLxX, j: jnp.where(
      (step_N == j).reshape((1, 1, steps) + (1,) * (a_BxLxX.ndim - 2)),
      a_BxLxX[:, :, None].astype(jnp.float32), 0.0)  # a at sub-step j, 0 at the others
  merge = lambda a: a.reshape((batch, length * steps) + a.shape[3:])
  gates = {"beta": merge(beta_BxLxNxH)}
  if log_decay_BxLxH is not None:
    gates["log_decay"] = merge(at(log_decay_BxLxH, first))
  return (merge(at(q_BxLxHxK, last)), merge(k_BxLxNxHxK), merge(v_BxLxNxHxV),
          jnp.repeat(mask_BxL, steps, axis=1), gates)


def token_outputs(o_BxMxHxV, steps: int, *, reverse: bool = False):
  """B x L x H x V: each position's output, the core's at the sub-step that holds its query."""
  o = o_BxMxHxV.reshape((o_BxMxHxV.shape[0], -1, steps) + o_BxMxHxV.shape[2:])
  return o[:, :, 0 if reverse else steps - 1]


def delta_product(q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, beta_BxLxNxH, mask_BxL, *,
                  log_decay=None, reverse: bool = False, core=recurrence, **settings):
  """o_BxLxHxV, the outputs o_t = S_t^T q_t of the recurrence above (from the end when
  `reverse`), by `core` (matrix_recurrence.recurrence, or a function with its arguments:
  a mixer's own, its form and chunk size bound) with `settings` (form, chunk_size)."""
  q, k, v, mask, gates = interleave(q_BxLxHxK, k_BxLxNxHxK, v_BxLxNxHxV, beta_BxLxNxH,
                                    mask_BxL, log_decay, reverse=reverse)
  o, _ = core(q, k, v, mask, reverse=reverse, **gates, **settings)
  return token_outputs(o, k_BxLxNxHxK.shape[2], reverse=reverse)
