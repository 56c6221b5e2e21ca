"""The shared encoder: every attention variant plugs into it as a token mixer."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from models import registry

POOLINGS = ("CLS", "MEAN", "SUM")
PAIR_FEATURES = ("uvpd", "uv")  # [u, v, u*v, u-v] (the paper) or [u, v] (the code shipped)
POSITIONS = ("sinusoidal", "learned", "none")  # "none": the mixer encodes positions itself


def sinusoidal_positions(length: int, dim: int) -> np.ndarray:
  """Fixed sine/cosine position table, LxD (Vaswani et al. 2017)."""
  position_L = np.arange(length)[:, None]
  div = np.exp(np.arange(0, dim, 2) * -(np.log(10000.0) / dim))
  table_LxD = np.zeros((length, dim), np.float32)
  table_LxD[:, 0::2] = np.sin(position_L * div)
  table_LxD[:, 1::2] = np.cos(position_L * div)[:, : dim // 2]
  return table_LxD


class MLP(nn.Module):
  mlp_dim: int
  dropout_rate: float
  dtype: str

  @nn.compact
  def __call__(self, x_BxLxD, *, deterministic: bool):
    init = nn.initializers.xavier_uniform()
    h_BxLxF = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=init)(x_BxLxD)
    h_BxLxF = nn.gelu(h_BxLxF)
    h_BxLxF = nn.Dropout(self.dropout_rate)(h_BxLxF, deterministic=deterministic)
    return nn.Dense(x_BxLxD.shape[-1], dtype=self.dtype, kernel_init=init)(h_BxLxF)


class Block(nn.Module):
  """Pre-LayerNorm residual block: x + mixer(LN(x)), then x + MLP(LN(x))."""
  layer_index: int
  mixer: str
  mixer_settings: Any
  shared: Any  # the module shared by every block's mixer (registry.make_shared), or None
  num_heads: int
  qkv_dim: int
  mlp_dim: int
  dropout_rate: float
  attention_dropout_rate: float
  dtype: str

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    mixer = registry.make(self.mixer, dict(self.mixer_settings), num_heads=self.num_heads,
                          qkv_dim=self.qkv_dim, dropout_rate=self.attention_dropout_rate,
                          dtype=self.dtype, layer_index=self.layer_index, shared=self.shared,
                          name="mixer")
    drop = nn.Dropout(self.dropout_rate)
    y = mixer(nn.LayerNorm(dtype=self.dtype)(x_BxLxD), mask_BxL, deterministic=deterministic)
    x_BxLxD = x_BxLxD + drop(y, deterministic=deterministic)
    y = MLP(self.mlp_dim, self.dropout_rate, self.dtype)(
        nn.LayerNorm(dtype=self.dtype)(x_BxLxD), deterministic=deterministic)
    return x_BxLxD + drop(y, deterministic=deterministic)


class Encoder(nn.Module):
  """Tokens BxL -> pooled features BxD. Token id 0 is padding unless a mask is given."""
  vocab_size: int
  max_len: int
  mixer: str = "transformer"
  mixer_settings: Any = None  # dict passed straight to the mixer
  emb_dim: int = 512
  num_heads: int = 8
  qkv_dim: int = 512
  mlp_dim: int = 1024
  num_layers: int = 4
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  positions: str = "sinusoidal"
  use_cls: bool = True
  pooling: str = "CLS"
  dtype: str = "float32"

  @nn.compact
  def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic: bool = True):
    batch, length = inputs_BxL.shape
    if length > self.max_len:
      raise ValueError(f"input length {length} exceeds the model's max_len {self.max_len}")
    if mask_BxL is None:
      mask_BxL = inputs_BxL != 0
    x_BxLxD = nn.Embed(self.vocab_size, self.emb_dim,
                       embedding_init=nn.initializers.normal(stddev=1.0),
                       name="embed")(inputs_BxL.astype(jnp.int32))
    if self.use_cls:
      # A zero-initialised learned token in front; its position is 0 (max_len + 1 positions).
      cls_1x1xD = self.param("cls", nn.initializers.zeros, (1, 1, self.emb_dim))
      x_BxLxD = jnp.concatenate([jnp.broadcast_to(cls_1x1xD, (batch, 1, self.emb_dim)),
                                 x_BxLxD], axis=1)
      mask_BxL = jnp.concatenate([jnp.ones((batch, 1), bool), mask_BxL], axis=1)
    total = x_BxLxD.shape[1]
    table = self.max_len + int(self.use_cls)
    if self.positions == "sinusoidal":
      pos_LxD = jnp.asarray(sinusoidal_positions(table, self.emb_dim))[:total]
    elif self.positions == "learned":
      pos_LxD = self.param("pos_embed", nn.initializers.normal(stddev=0.02),
                           (table, self.emb_dim))[:total]
    elif self.positions == "none":
      pos_LxD = jnp.zeros((total, self.emb_dim), jnp.float32)
    else:
      raise ValueError(f"unknown positions {self.positions!r}; valid: {', '.join(POSITIONS)}")
    x_BxLxD = (x_BxLxD + pos_LxD[None]).astype(self.dtype)
    x_BxLxD = nn.Dropout(self.dropout_rate)(x_BxLxD, deterministic=deterministic)
    settings = self.mixer_settings or {}
    shared = registry.make_shared(self.mixer, settings, num_heads=self.num_heads,
                                  qkv_dim=self.qkv_dim, dtype=self.dtype)
    for i in range(self.num_layers):
      x_BxLxD = Block(i, self.mixer, settings, shared, self.num_heads, self.qkv_dim,
                      self.mlp_dim, self.dropout_rate, self.attention_dropout_rate,
                      self.dtype, name=f"block_{i}")(x_BxLxD, mask_BxL,
                                                     deterministic=deterministic)
    x_BxLxD = nn.LayerNorm(dtype=self.dtype, name="final_norm")(x_BxLxD).astype(jnp.float32)
    return pool(x_BxLxD, mask_BxL, self.pooling)


def pool(x_BxLxD, mask_BxL, pooling: str):
  """CLS takes position 0; MEAN and SUM count only non-padded positions."""
  if pooling == "CLS":
    return x_BxLxD[:, 0]
  weights_BxLx1 = mask_BxL[..., None].astype(x_BxLxD.dtype)
  total_BxD = jnp.sum(x_BxLxD * weights_BxLx1, axis=1)
  if pooling == "SUM":
    return total_BxD
  if pooling == "MEAN":
    return total_BxD / jnp.maximum(jnp.sum(weights_BxLx1, axis=1), 1.0)
  raise ValueError(f"unknown pooling {pooling!r}; valid: {', '.join(POOLINGS)}")


class Classifier(nn.Module):
  """Encoder + head Dense(mlp_dim)-ReLU-Dense(classes). Logits in float32."""
  encoder: Encoder
  num_classes: int

  @nn.compact
  def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic: bool = True):
    u_BxD = self.encoder(inputs_BxL, mask_BxL, deterministic=deterministic)
    init = nn.initializers.xavier_uniform()
    h = nn.relu(nn.Dense(self.encoder.mlp_dim, kernel_init=init, name="head_hidden")(u_BxD))
    return nn.Dense(self.num_classes, kernel_init=init, name="head_out")(h)


class DualClassifier(nn.Module):
  """Pair tasks: one encoder shared by both inputs, no cross attention."""
  encoder: Encoder
  num_classes: int
  pair_features: str = "uvpd"

  @nn.compact
  def __call__(self, inputs_BxL, inputs2_BxL, mask_BxL=None, mask2_BxL=None, *,
               deterministic: bool = True):
    u_BxD = self.encoder(inputs_BxL, mask_BxL, deterministic=deterministic)
    v_BxD = self.encoder(inputs2_BxL, mask2_BxL, deterministic=deterministic)
    if self.pair_features == "uvpd":
      features = jnp.concatenate([u_BxD, v_BxD, u_BxD * v_BxD, u_BxD - v_BxD], axis=-1)
    elif self.pair_features == "uv":
      features = jnp.concatenate([u_BxD, v_BxD], axis=-1)
    else:
      raise ValueError(f"unknown pair_features {self.pair_features!r}; "
                       f"valid: {', '.join(PAIR_FEATURES)}")
    init = nn.initializers.xavier_uniform()
    mlp = self.encoder.mlp_dim
    h = nn.relu(nn.Dense(mlp, kernel_init=init, name="head_hidden")(features))
    h = nn.relu(nn.Dense(mlp // 2, kernel_init=init, name="head_hidden2")(h))
    return nn.Dense(self.num_classes, kernel_init=init, name="head_out")(h)


def build(model: dict, *, vocab_size: int, num_classes: int, max_len: int, pair: bool):
  """Builds the classifier from a plain dict of model settings (config.model).

  Checks every choice now, so a bad config fails before any compilation.
  """
  model = dict(model)
  mixer = model.pop("name")
  settings = dict(model.pop("attention", {}) or {})
  pair_features = model.pop("pair_features", "uvpd")
  registry.make(mixer, settings, num_heads=model.get("num_heads", 1),
                qkv_dim=model.get("qkv_dim", 1))  # validates the name and settings
  for key, valid in (("pooling", POOLINGS), ("positions", POSITIONS)):
    if key in model and model[key] not in valid:
      raise registry.UnknownSettingError(
          f"config.model.{key}={model[key]!r} is not one of {', '.join(valid)}")
  if pair and pair_features not in PAIR_FEATURES:
    raise registry.UnknownSettingError(
        f"config.model.pair_features={pair_features!r} is not one of {', '.join(PAIR_FEATURES)}")
  if model.get("pooling") == "CLS" and not model.get("use_cls", True):
    raise registry.UnknownSettingError("pooling 'CLS' needs config.model.use_cls=True")
  encoder = Encoder(vocab_size=vocab_size, max_len=max_len, mixer=mixer,
                    mixer_settings=settings, **model)
  if pair:
    return DualClassifier(encoder, num_classes, pair_features)
  return Classifier(encoder, num_classes)
