"""The models around the shared encoder: the classifier heads after pooling (config.model.head),
the dual-encoder classifier of the pair tasks and the per-token Denoiser of self-pretraining.
models/encoder.py builds them (build)."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from lra.models.settings import HEADS

PAIR_FEATURES = ("uvpd", "uv")  # [u, v, u*v, u-v] (the paper) or [u, v] (the code shipped)


def head(kind: str, hidden: int, num_classes: int, features_BxF, *, pair: bool = False):
  """The classifier after pooling (config.head), built in the caller's scope: "mlp" is LRA's
  (xavier uniform; a pair task's has a second hidden layer of hidden/2), "linear" and
  "gelu_mlp" the SSM papers' (Flax's default lecun normal, as S5's)."""
  if kind == "mlp":
    init = nn.initializers.xavier_uniform()
    h = nn.relu(nn.Dense(hidden, kernel_init=init, name="head_hidden")(features_BxF))
    if pair:
      h = nn.relu(nn.Dense(hidden // 2, kernel_init=init, name="head_hidden2")(h))
    return nn.Dense(num_classes, kernel_init=init, name="head_out")(h)
  if kind == "gelu_mlp":
    features_BxF = nn.gelu(nn.Dense(hidden, name="head_hidden")(features_BxF))
  elif kind != "linear":
    raise ValueError(f"unknown head {kind!r}; valid: {', '.join(HEADS)}")
  return nn.Dense(num_classes, name="head_out")(features_BxF)


class Classifier(nn.Module):
  """Encoder + head (config.head; LRA's Dense(mlp_dim)-ReLU-Dense). Logits in float32."""
  encoder: Any  # models.encoder.Encoder
  num_classes: int

  @nn.compact
  def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic: bool = True):
    u_BxD = self.encoder(inputs_BxL, mask_BxL, deterministic=deterministic)
    c = self.encoder.config
    return head(c.head, c.mlp_dim, self.num_classes, u_BxD)


class DualClassifier(nn.Module):
  """Pair tasks: one encoder shared by both inputs, no cross attention. Both documents go
  through it as one batch of 2B, so BatchNorm normalises over both at once and updates its
  running averages once per step, as the S5 authors' retrieval model does."""
  encoder: Any  # models.encoder.Encoder
  num_classes: int
  pair_features: str = "uvpd"

  @nn.compact
  def __call__(self, inputs_BxL, inputs2_BxL, mask_BxL=None, mask2_BxL=None, *,
               deterministic: bool = True):
    masks = [inputs_BxL != 0 if mask_BxL is None else mask_BxL,
             inputs2_BxL != 0 if mask2_BxL is None else mask2_BxL]
    both_2BxD = self.encoder(jnp.concatenate([inputs_BxL, inputs2_BxL]),
                             jnp.concatenate(masks), deterministic=deterministic)
    u_BxD, v_BxD = jnp.split(both_2BxD, 2)
    if self.pair_features == "uvpd":
      features = jnp.concatenate([u_BxD, v_BxD, u_BxD * v_BxD, u_BxD - v_BxD], axis=-1)
    elif self.pair_features == "uv":
      features = jnp.concatenate([u_BxD, v_BxD], axis=-1)
    else:
      raise ValueError(f"unknown pair_features {self.pair_features!r}; "
                       f"valid: {', '.join(PAIR_FEATURES)}")
    c = self.encoder.config
    return head(c.head, c.mlp_dim, self.num_classes, features, pair=True)


class Denoiser(nn.Module):
  """Encoder + per-token head Dense(mlp_dim)-GELU-Dense(outputs): logits BxLxO, float32, for
  masked-token pretraining. Its encoder's parameters have the Classifier's names and shapes."""
  encoder: Any  # models.encoder.Encoder
  num_outputs: int

  @nn.compact
  def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic: bool = True):
    h_BxLxD = self.encoder(inputs_BxL, mask_BxL, deterministic=deterministic, tokens=True)
    init = nn.initializers.xavier_uniform()
    h = nn.gelu(nn.Dense(self.encoder.config.mlp_dim, kernel_init=init,
                         name="token_hidden")(h_BxLxD))
    return nn.Dense(self.num_outputs, kernel_init=init, name="token_out")(h)
