"""Sparse Sinkhorn attention (Tay et al. 2020): local block attention plus one learned partner.

The sequence is cut into N contiguous blocks of `block_size`. A sorting network maps each
block's summary (the mean of its real keys, per head) to N logits; Sinkhorn normalisation turns
the NxN logits into a doubly stochastic soft permutation P. The key and value blocks are really
permuted, K_sorted = P @ K_blocks (a contraction over the block axis; the original LRA einsum did
not apply P), and every query block attends, in one softmax, to its own block's keys and to its
sorted partner block's keys. Cost O(L b) for the attention plus O(N^2) for the sorting and
O(N L) for applying the soft permutation; never an L x L array.

The sorting network has N outputs, so it is built for the number of blocks seen at init: apply
the model at the padded length it was initialised with (LRA pads every input to max_len).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s
from lra.models.ops.blocked import padded_blocks
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection, masked_softmax
from lra.models.registry import register

# A sorted key whose permuted mask weight is at or below this is treated as fully padded.
_TINY = 1e-30


def sinkhorn(log_alpha_xNxN, iterations: int):
  """Sinkhorn normalisation in log space: alternately normalise rows then columns.

  Returns exp of the result, which tends to a doubly stochastic matrix as iterations grow
  (rows sum to exactly 1 after the row step, columns after the column step).
  """
  def step(_, log_p):
    log_p = log_p - jax.nn.logsumexp(log_p, axis=-1, keepdims=True)
    return log_p - jax.nn.logsumexp(log_p, axis=-2, keepdims=True)

  log_p = jax.lax.fori_loop(0, int(iterations), step, log_alpha_xNxN.astype(jnp.float32))
  return jnp.exp(log_p)


def sorted_block_attention(q_BxNxbxHxK, k_BxNxbxHxK, v_BxNxbxHxK, mask_BxNxb, p_BxHxNxN, *,
                           dropout_rng=None, dropout_rate: float = 0.0):
  """Each query block n attends to its own keys and to block n of the sorted keys P @ K.

  Row n of P weights the key blocks that become query block n's partner (a hard permutation
  with P[n, m] = 1 makes block m the partner). Without padding this is exactly Tay et al.'s
  definition: one softmax over [q k_own ; q (P K)_n] with values [v_own ; (P V)_n].

  With padding, the mask is permuted with the keys and kept soft: a sorted key whose mixture
  (row n of P) holds a fraction w of real keys enters the softmax with weight w (log w added
  to its logit), which is exactly the padding mask when P is hard and leaves keys with w ~ 0
  no weight. w is the padded share taken from 1, relative to the row's sum of P (Sinkhorn rows
  sum to 1 only approximately), so with no padding w is exactly 1 and the logits untouched.
  Padded keys and values are zeroed before the mixing, so whatever sits at padded positions
  cannot reach the sorted blocks.
  """
  keep_BxNxb = mask_BxNxb.astype(bool)
  zero_pad = lambda t: jnp.where(keep_BxNxb[..., None, None], t, jnp.zeros((), t.dtype))
  k_BxNxbxHxK, v_BxNxbxHxK = zero_pad(k_BxNxbxHxK), zero_pad(v_BxNxbxHxK)

  p_BxHxNxN = p_BxHxNxN.astype(jnp.float32)
  ks_BxNxbxHxK = jnp.einsum("bhnm,bmqhk->bnqhk", p_BxHxNxN.astype(k_BxNxbxHxK.dtype),
                            k_BxNxbxHxK)
  vs_BxNxbxHxK = jnp.einsum("bhnm,bmqhk->bnqhk", p_BxHxNxN.astype(v_BxNxbxHxK.dtype),
                            v_BxNxbxHxK)
  real_BxNxHx1xb = _sorted_share(p_BxHxNxN, keep_BxNxb)
  padded_BxNxHx1xb = _sorted_share(p_BxHxNxN, ~keep_BxNxb)
  row_BxNxHx1x1 = jnp.einsum("bhnm->bnh", p_BxHxNxN)[..., None, None]
  # Exactly 0 without padding (a sum of zeros), so w = 1 and log w = 0 there.
  w_BxNxHx1xb = 1.0 - padded_BxNxHx1xb / row_BxNxHx1x1
  present_BxNxHx1xb = real_BxNxHx1xb > _TINY
  # log is taken of a safe value so masked slots give no NaN gradient through the where.
  log_w_BxNxHx1xb = jnp.log(jnp.where(present_BxNxHx1xb, jnp.maximum(w_BxNxHx1xb, _TINY), 1.0))

  scale = q_BxNxbxHxK.shape[-1] ** -0.5
  q_BxNxbxHxK = q_BxNxbxHxK * scale
  own_BxNxHxbxb = jnp.einsum("bnqhk,bnmhk->bnhqm", q_BxNxbxHxK, k_BxNxbxHxK,
                             preferred_element_type=jnp.float32)
  srt_BxNxHxbxb = jnp.einsum("bnqhk,bnmhk->bnhqm", q_BxNxbxHxK, ks_BxNxbxHxK,
                             preferred_element_type=jnp.float32) + log_w_BxNxHx1xb

  # One softmax over the 2b keys [own block ; sorted partner block].
  logits_BxNxHxbx2b = jnp.concatenate([own_BxNxHxbxb, srt_BxNxHxbxb], axis=-1)
  own_ok_BxNx1x1xb = keep_BxNxb[:, :, None, None, :]
  allowed_BxNxHx1x2b = jnp.concatenate(
      [jnp.broadcast_to(own_ok_BxNx1x1xb, present_BxNxHx1xb.shape), present_BxNxHx1xb], -1)
  weights_BxNxHxbx2b = masked_softmax(logits_BxNxHxbx2b, allowed_BxNxHx1x2b,
                                      dropout_rng=dropout_rng, dropout_rate=dropout_rate)
  v_BxNx2bxHxK = jnp.concatenate([v_BxNxbxHxK, vs_BxNxbxHxK], axis=2)
  return jnp.einsum("bnhqm,bnmhk->bnqhk", weights_BxNxHxbx2b.astype(v_BxNx2bxHxK.dtype),
                    v_BxNx2bxHxK)


def _sorted_share(p_BxHxNxN, which_BxNxb):
  """(P which)[n, q] per head: how much of sorted slot q of block n comes from the positions
  `which` marks, BxNxHx1xb."""
  share_BxHxNxb = jnp.einsum("bhnm,bmq->bhnq", p_BxHxNxN, which_BxNxb.astype(jnp.float32))
  return jnp.transpose(share_BxHxNxb, (0, 2, 1, 3))[:, :, :, None, :]


@register("sinkhorn")
class SinkhornAttention(HeadsMixer):
  """Local block attention plus attention to a Sinkhorn-sorted partner block, per head."""
  block_size: int = s.setting(50, s.Int(1), "tokens per block (LRA: 50)")
  sinkhorn_iterations: int = s.setting(5, s.Int(1), "row+column normalisation rounds")
  temperature: float = s.setting(0.75, s.Float(0.0, open="low"),
                                 "divides the sorting logits; lower -> closer to a hard "
                                 "permutation")
  gumbel: bool = s.setting(False, s.Bool(),
                           "Gumbel noise on the sorting logits while training (dropout rng)")

  SUBQUADRATIC = True
  FIXED_LENGTH = True  # the sorting network's Dense has an output per block of the init length

  def carried_state(self, width: int, length: int) -> int:
    """The whole cache, 2 x length x qkv_dim: a query block reads its own block and a sorted
    partner block, a soft mixture of every block (P @ K, P from every block's summary)."""
    del width
    return 2 * length * self.qkv_dim

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = QKVProjection(self.num_heads, self.qkv_dim,
                                                    self.dtype, self.rotary)(x_BxLxD)
    length = x_BxLxD.shape[1]
    # A block longer than the input is one block of the input's length (no padding work).
    block = min(int(self.block_size), length)

    q_BxNxbxHxK, k_BxNxbxHxK, v_BxNxbxHxK = (padded_blocks(t, block)
                                             for t in (q_BxLxHxK, k_BxLxHxK, v_BxLxHxK))
    # Positions added to fill the last block are padding.
    keep_BxNxb = padded_blocks(mask_BxL.astype(bool), block, value=False)
    batch, num_blocks = keep_BxNxb.shape[:2]
    head_dim = q_BxNxbxHxK.shape[-1]

    # Block summary: mean of the block's real keys in each head (zero for an all-padded block),
    # so padded tokens never steer the sorting.
    keep_f_BxNxb = keep_BxNxb.astype(jnp.float32)
    count_BxN = jnp.maximum(keep_f_BxNxb.sum(-1), 1.0)
    summary_BxNxHxK = (jnp.einsum("bnqhk,bnq->bnhk", k_BxNxbxHxK.astype(jnp.float32),
                                  keep_f_BxNxb) / count_BxN[:, :, None, None])

    # Sorting network: per head, a Dense map from a block summary to N logits (row n scores
    # every block as the partner of block n). Its N outputs fix the number of blocks at init.
    kernel_HxKxN = self.param(
        "sort_kernel", nn.initializers.lecun_normal(in_axis=1, out_axis=2, batch_axis=(0,)),
        (self.num_heads, head_dim, num_blocks), jnp.float32)
    bias_HxN = self.param("sort_bias", nn.initializers.zeros, (self.num_heads, num_blocks),
                          jnp.float32)
    logits_BxHxNxN = (jnp.einsum("bnhk,hkm->bhnm", summary_BxNxHxK, kernel_HxKxN)
                      + bias_HxN[None, :, None, :])
    if self.gumbel and not deterministic:
      u_BxHxNxN = jax.random.uniform(self.make_rng("dropout"), logits_BxHxNxN.shape,
                                     jnp.float32, minval=1e-6, maxval=1.0 - 1e-6)
      logits_BxHxNxN = logits_BxHxNxN - jnp.log(-jnp.log(u_BxHxNxN))
    p_BxHxNxN = sinkhorn(logits_BxHxNxN / self.temperature, self.sinkhorn_iterations)

    rng = self.attention_rng(deterministic)
    y_BxNxbxHxK = sorted_block_attention(q_BxNxbxHxK, k_BxNxbxHxK, v_BxNxbxHxK, keep_BxNxb,
                                         p_BxHxNxN, dropout_rng=rng,
                                         dropout_rate=self.dropout_rate)
    y_BxPxHxK = y_BxNxbxHxK.reshape(batch, num_blocks * block, *y_BxNxbxHxK.shape[3:])
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y_BxPxHxK[:, :length])
