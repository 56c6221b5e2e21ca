"""The shared encoder: every attention variant plugs into it as a token mixer."""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra.models import registry, reversible
from lra import rules
from lra.models.blocks.short_conv import ShortConv
from lra.models.classifiers import PAIR_FEATURES, Classifier, Denoiser, DualClassifier
from lra.models.settings import (INPUT_ENCODERS, NORMS, POOLINGS, POSITIONS, EncoderConfig,
                                 check_encoder, check_reading)


def sinusoidal_positions(length: int, dim: int) -> np.ndarray:
  """Fixed sine/cosine position table, LxD (Vaswani et al. 2017)."""
  position_L = np.arange(length)[:, None]
  div = np.exp(np.arange(0, dim, 2) * -(np.log(10000.0) / dim))
  table_LxD = np.zeros((length, dim), np.float32)
  table_LxD[:, 0::2] = np.sin(position_L * div)
  table_LxD[:, 1::2] = np.cos(position_L * div)[:, : dim // 2]
  return table_LxD


class FeedForward(nn.Module):
  """Dense(mlp_dim)-GELU-Dropout-Dense(D) on one input (the whole sequence or one chunk)."""
  mlp_dim: int
  dropout_rate: float
  dtype: str
  deterministic: bool

  @nn.compact
  def __call__(self, x_BxLxD):
    init = nn.initializers.xavier_uniform()
    h_BxLxF = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=init, name="Dense_0")(x_BxLxD)
    h_BxLxF = nn.gelu(h_BxLxF)
    h_BxLxF = nn.Dropout(self.dropout_rate)(h_BxLxF, deterministic=self.deterministic)
    return nn.Dense(x_BxLxD.shape[-1], dtype=self.dtype, kernel_init=init, name="Dense_1")(h_BxLxF)


class _FeedForwardChunk(FeedForward):
  """The scan body: (carry, chunk) -> (carry, FeedForward(chunk))."""

  @nn.compact
  def __call__(self, carry, x_BxCxD):
    return carry, super().__call__(x_BxCxD)


class MLP(nn.Module):
  """The block's feed-forward sub-layer; with chunks > 1, applied over sequence chunks.

  Chunked, a scan walks over `chunks` slices of the sequence, each rematerialised in the
  backward pass, so the L x mlp_dim hidden exists for one chunk at a time (forward and
  backward). The parameters are the same either way (Dense_0, Dense_1 in this module's scope);
  only dropout draws differ (one key per chunk).
  """
  mlp_dim: int
  dropout_rate: float
  dtype: str
  chunks: int = 1

  @nn.compact
  def __call__(self, x_BxLxD, *, deterministic: bool):
    fields = (self.mlp_dim, self.dropout_rate, self.dtype, deterministic)
    batch, length, dim = x_BxLxD.shape
    chunks = min(int(self.chunks), length)
    if chunks <= 1:
      ffn = FeedForward(*fields)
      nn.share_scope(self, ffn)  # its Dense_0, Dense_1 live directly in this module
      return ffn(x_BxLxD)
    size = -(-length // chunks)  # the last chunk is zero-padded, its extra rows dropped
    x_BxPxD = jnp.pad(x_BxLxD, ((0, 0), (0, size * chunks - length), (0, 0)))
    x_NxBxCxD = jnp.moveaxis(x_BxPxD.reshape(batch, chunks, size, dim), 1, 0)
    scan = nn.scan(nn.remat(_FeedForwardChunk), variable_broadcast="params",
                   split_rngs={"params": False, "dropout": True}, length=chunks)
    step = scan(*fields)
    nn.share_scope(self, step)  # the same parameter names as unchunked
    _, y_NxBxCxD = step(None, x_NxBxCxD)
    return jnp.moveaxis(y_NxBxCxD, 0, 1).reshape(batch, size * chunks, dim)[:, :length]


def normalize(config: EncoderConfig, x_BxLxD, mask_BxL, *, deterministic: bool,
              name: str | None = None):
  """LayerNorm, or BatchNorm per channel over the batch and the real (unpadded) tokens
  (config.norm, in config.dtype).

  BatchNorm keeps running averages in the "batch_stats" collection (updated when not
  deterministic, used when deterministic; config.batch_norm_momentum). Built in the caller's
  scope.
  """
  kind = config.norm
  if kind == "layer":
    return nn.LayerNorm(dtype=config.dtype, name=name)(x_BxLxD)
  if kind == "batch":
    norm = nn.BatchNorm(use_running_average=deterministic, momentum=config.batch_norm_momentum,
                        epsilon=1e-5, dtype=config.dtype, name=name)
    return norm(x_BxLxD, mask=mask_BxL[..., None])
  raise ValueError(f"unknown norm {kind!r}; valid: {', '.join(NORMS)}")


class Block(nn.Module):
  """Residual block: a token-mixer sub-layer, then (unless feedforward=False) an MLP one.

  Pre-norm (default): x + dropout(f(norm(x))); post-norm: norm(x + dropout(f(x))). The mixer
  computes its own sub-layer's residual form (Mixer.residual, models/common.py) from x and
  norm(x) (pre-norm; post-norm: x, and the result normalised).
  With `branch` ("mixer" or "mlp") it returns that sub-layer's residual branch alone,
  dropout(f(norm(x))): the f and g of a reversible layer (models/reversible.py).
  Parameter names: mixer, short_conv (config.short_conv > 0), LayerNorm_0 (or BatchNorm_0),
  LayerNorm_1, MLP_0. Its settings are the encoder's `config`.
  """
  layer_index: int
  mixer: str
  mixer_settings: Any
  shared: Any  # the module shared by every block's mixer (registry.make_shared), or None
  config: EncoderConfig

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool, branch: str | None = None):
    c = self.config
    drop = nn.Dropout(c.dropout_rate)

    module = make_mixer(self.mixer, self.mixer_settings, c, layer_index=self.layer_index,
                        shared=self.shared, name="mixer")

    def mixer_input(h_BxLxD):  # the mixer's input: with short_conv, convolved first
      if not c.short_conv:
        return h_BxLxD
      conv = ShortConv(kernel=c.short_conv, bias=True, activation=False, name="short_conv")
      return conv(h_BxLxD, mask_BxL).astype(h_BxLxD.dtype)

    mixer = lambda h_BxLxD: module(mixer_input(h_BxLxD), mask_BxL, deterministic=deterministic)

    def mlp(h_BxLxD):
      return MLP(c.mlp_dim, c.dropout_rate, c.dtype, c.ffn_chunks,
                 name="MLP_0")(h_BxLxD, deterministic=deterministic)

    def norm(index, h_BxLxD):  # explicit names: a branch alone builds the same ones
      name = f"{'LayerNorm' if c.norm == 'layer' else 'BatchNorm'}_{index}"
      return normalize(c, h_BxLxD, mask_BxL, deterministic=deterministic, name=name)

    def residual_branch(index, f, h_BxLxD):
      return drop(f(norm(index, h_BxLxD)), deterministic=deterministic)

    if branch is not None:
      if branch not in ("mixer", "mlp"):
        raise ValueError(f"unknown branch {branch!r}; valid: mixer, mlp")
      return residual_branch(0, mixer, x_BxLxD) if branch == "mixer" else \
          residual_branch(1, mlp, x_BxLxD)
    y_BxLxD = mixer_input(norm(0, x_BxLxD) if c.prenorm else x_BxLxD)
    x_BxLxD = module.residual(x_BxLxD, y_BxLxD, mask_BxL,
                              dropout=lambda h: drop(h, deterministic=deterministic),
                              deterministic=deterministic)
    x_BxLxD = x_BxLxD if c.prenorm else norm(0, x_BxLxD)
    if not c.feedforward:
      return x_BxLxD
    if c.prenorm:
      return x_BxLxD + residual_branch(1, mlp, x_BxLxD)
    return norm(1, x_BxLxD + drop(mlp(x_BxLxD), deterministic=deterministic))


# config.hybrid_conv's layers: Based's conv kind alone is Zoology's BaseConv.
HYBRID_CONV = "based"


def make_mixer(mixer: str, settings, config: EncoderConfig, **fields):
  """The token mixer `mixer` with its `settings` and the encoder fields it takes from `config`
  (registry.make; `fields`: layer_index, shared, name, length); with config.hybrid_conv, an
  even layer_index gets a BaseConv layer instead."""
  if config.hybrid_conv and fields.get("layer_index", 1) % 2 == 0:
    mixer, settings = HYBRID_CONV, {"layers": ("conv",), "conv_kernel": config.hybrid_conv}
  return registry.make(mixer, dict(settings), num_heads=config.num_heads,
                       qkv_dim=config.qkv_dim, dropout_rate=config.attention_dropout_rate,
                       dtype=config.dtype, num_layers=config.num_layers,
                       rotary=config.positions == "rotary", **fields)


def make_shared(mixer: str, settings, config: EncoderConfig):
  """The module every block's `mixer` shares (registry.make_shared), or None."""
  return registry.make_shared(mixer, settings, num_heads=config.num_heads,
                              qkv_dim=config.qkv_dim, dtype=config.dtype)


class _BlockBranch(nn.Module):
  """One block's residual branch from explicit parameters (a reversible layer's f or g).

  Applied functionally ({"params": {"block": ..., SHARED: ...}}) inside the reversible stack's
  custom VJP; it builds its own copy of the encoder's shared module, so the shared parameters
  are passed in (and get their gradient) like the block's own.
  """
  mixer: str
  mixer_settings: Any
  config: EncoderConfig
  layer_index: int

  @nn.compact
  def __call__(self, branch, x_BxLxD, mask_BxL, *, deterministic: bool):
    shared = make_shared(self.mixer, self.mixer_settings, self.config)
    block = Block(self.layer_index, self.mixer, self.mixer_settings, shared, self.config,
                  name="block")
    return block(x_BxLxD, mask_BxL, deterministic=deterministic, branch=branch)


class Encoder(nn.Module):
  """Tokens BxL -> pooled features BxD (or, with tokens=True, the features of every input
  position BxLxD before pooling, the CLS position left out: the same parameters either way).
  Token id 0 is padding unless a mask is given.

  Every encoder setting is in `config` (models.settings.EncoderConfig), which the blocks share.
  """
  vocab_size: int
  max_len: int
  mixer: str = "transformer"
  mixer_settings: Any = None  # dict passed straight to the mixer
  config: EncoderConfig = EncoderConfig()
  mask_id: int = -1  # the denoise mask token's id (a "linear" encoder learns its vector); -1: none

  @nn.compact
  def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic: bool = True,
               tokens: bool = False):
    c = self.config
    batch, length = inputs_BxL.shape
    if length > self.max_len:
      raise ValueError(f"input length {length} exceeds the model's max_len {self.max_len}")
    if mask_BxL is None:
      mask_BxL = inputs_BxL != 0
    x_BxLxD = self._embed(inputs_BxL)
    if c.use_cls:
      # A zero-initialised learned token in front; its position is 0 (max_len + 1 positions).
      cls_1x1xD = self.param("cls", nn.initializers.zeros, (1, 1, c.emb_dim))
      x_BxLxD = jnp.concatenate([jnp.broadcast_to(cls_1x1xD, (batch, 1, c.emb_dim)),
                                 x_BxLxD], axis=1)
      mask_BxL = jnp.concatenate([jnp.ones((batch, 1), bool), mask_BxL], axis=1)
    total = x_BxLxD.shape[1]
    table = self.max_len + int(c.use_cls)
    if c.positions == "sinusoidal":
      pos_LxD = jnp.asarray(sinusoidal_positions(table, c.emb_dim))[:total]
    elif c.positions == "learned":
      pos_LxD = self.param("pos_embed", nn.initializers.normal(stddev=0.02),
                           (table, c.emb_dim))[:total]
    elif c.positions in ("none", "rotary"):  # rotary: the mixers rotate queries and keys
      pos_LxD = jnp.zeros((total, c.emb_dim), jnp.float32)
    else:
      raise ValueError(f"unknown positions {c.positions!r}; valid: {', '.join(POSITIONS)}")
    x_BxLxD = (x_BxLxD + pos_LxD[None]).astype(c.dtype)
    if c.input_dropout:
      x_BxLxD = nn.Dropout(c.dropout_rate)(x_BxLxD, deterministic=deterministic)
    # pad_like_authors: the blocks and norms take every position as real (the official S4/S5
    # function); pooling below still counts only the real ones, as theirs does.
    seen_BxL = jnp.ones_like(mask_BxL) if c.pad_like_authors else mask_BxL
    shared = make_shared(self.mixer, self.settings, c)
    if c.reversible:
      x_BxLxD = self._reversible_blocks(shared, x_BxLxD, seen_BxL, deterministic)
    else:
      for i in range(c.num_layers):
        x_BxLxD = self._block(i, shared)(x_BxLxD, seen_BxL, deterministic=deterministic)
    if c.prenorm and c.final_norm:  # post-norm blocks end normalised already
      x_BxLxD = normalize(c, x_BxLxD, seen_BxL, deterministic=deterministic, name="final_norm")
    x_BxLxD = x_BxLxD.astype(jnp.float32)
    if tokens:
      return x_BxLxD[:, int(c.use_cls):]
    return pool(x_BxLxD, mask_BxL, c.pooling)

  def _embed(self, inputs_BxL):
    """BxL ids -> BxLxD: a table row per id, or (input_encoder "linear") Dense(1 -> D) of the
    normalised value, with a learned vector for the mask token."""
    c = self.config
    if c.input_encoder == "embedding":
      return nn.Embed(self.vocab_size, c.emb_dim,
                      embedding_init=nn.initializers.normal(stddev=c.embed_init),
                      name="embed")(inputs_BxL.astype(jnp.int32))
    if c.input_encoder != "linear":
      raise ValueError(f"unknown input_encoder {c.input_encoder!r}; valid: "
                       f"{', '.join(INPUT_ENCODERS)}")
    value_BxLx1 = (inputs_BxL.astype(jnp.float32)[..., None] - c.input_mean) / c.input_std
    x_BxLxD = nn.Dense(c.emb_dim, name="embed_linear")(value_BxLx1)  # lecun normal, as S5's
    if self.mask_id >= 0:
      mask_D = self.param("mask_embed", nn.initializers.normal(stddev=1.0), (c.emb_dim,))
      x_BxLxD = jnp.where((inputs_BxL == self.mask_id)[..., None], mask_D, x_BxLxD)
    return x_BxLxD

  @property
  def settings(self) -> dict:
    """The mixer's settings ({} when none are given)."""
    return self.mixer_settings or {}

  def _block(self, index: int, shared) -> Block:
    return Block(index, self.mixer, self.settings, shared, self.config, name=f"block_{index}")

  def _reversible_blocks(self, shared, x_BxLxD, mask_BxL, deterministic):
    """The blocks as reversible layers: f = the mixer branch, g = the MLP branch.

    Parameters keep the plain layout (block_{i}/mixer, LayerNorm_0, LayerNorm_1, MLP_0 and the
    shared module in the encoder). At init the blocks are built and run in place; after, the
    stack runs as one custom VJP over explicit parameters. The two streams start as copies of
    the embedding and end averaged, (x1 + x2) / 2, so the width stays D and no parameter is
    added.
    """
    num_layers = self.config.num_layers
    if self.is_initializing():  # create the parameters (plain autodiff; nothing is differentiated)
      blocks = [self._block(i, shared) for i in range(num_layers)]

      def bound(branch):
        return lambda i, p, s, x, mask, key: blocks[i](x, mask, deterministic=deterministic,
                                                       branch=branch)

      y1, y2 = reversible.stack(bound("mixer"), bound("mlp"), {}, [{}] * num_layers,
                                x_BxLxD, x_BxLxD, mask_BxL, recompute=False)
      return (y1 + y2) / 2
    params = self.variables["params"]
    shared_params = {} if shared is None else {shared.name: params[shared.name]}
    layer_params = [params[f"block_{i}"] for i in range(num_layers)]

    def functional(branch):
      def apply(i, p, s, x, mask, key):
        module = _BlockBranch(self.mixer, self.settings, self.config, i, parent=None)
        return module.apply({"params": {"block": p, **s}}, branch, x, mask,
                            deterministic=deterministic,
                            rngs={} if key is None else {"dropout": key})
      return apply

    rng = None if deterministic else self.make_rng("dropout")
    y1, y2 = reversible.stack(functional("mixer"), functional("mlp"), shared_params,
                              layer_params, x_BxLxD, x_BxLxD, mask_BxL, rng)
    return (y1 + y2) / 2


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


def _longest_mixer(encoder: Encoder):
  """(the encoder's mixer as its blocks build it, checked with the longest input; that
  length)."""
  length = encoder.max_len + int(encoder.config.use_cls)
  return make_mixer(encoder.mixer, encoder.settings, encoder.config, length=length), length


def idle_settings(model) -> list[str]:
  """The mixer's lines on settings that do nothing at the input length of `model` (one that
  build made): Mixer.idle_at."""
  mixer, length = _longest_mixer(model.encoder)
  return mixer.idle_at(length)


def build(model: dict, *, vocab_size: int, num_classes: int, max_len: int, pair: bool,
          denoise: bool = False, mask_token: bool = False):
  """Builds the classifier (or with `denoise`, the Denoiser with num_classes outputs per
  token, one tower even for a pair task) from a plain dict of model settings (config.model).
  `mask_token`: the last id, vocab_size - 1, is the denoise mask token. Checks every setting
  now, the mixer's included (SettingError): a bad config fails before any tracing."""
  model = dict(model)
  mixer = model.pop("name")
  settings = dict(model.pop("attention", {}) or {})
  pair_features = model.pop("pair_features", "uvpd")
  fields = {f.name for f in dataclasses.fields(EncoderConfig)}
  unknown = sorted(set(model) - fields)
  if unknown:
    raise rules.SettingError(f"config.model has no setting(s) {', '.join(unknown)}; it "
                             f"takes: name, attention, pair_features, {', '.join(sorted(fields))}")
  if pair:
    rules.check(rules.model_key("pair_features"), pair_features, rules.Choice(PAIR_FEATURES))
  check_encoder(model)
  cls = registry.get(mixer)
  if model.get("reversible") and not cls.reversible():
    rules.fail(rules.model_key("reversible"), True, f"False for model {mixer!r} (its own "
               f"residual form, {cls.__name__}.residual, is no additive branch f of a "
               "reversible layer)")
  if model.get("positions") == "rotary" and not registry.takes_rotary(mixer):
    rules.fail(rules.model_key("positions"), "rotary", f"'sinusoidal', 'learned' or 'none' for "
               f"model {mixer!r} (it has no queries and keys to rotate)")
  config = EncoderConfig(**model)
  encoder = Encoder(vocab_size=vocab_size, max_len=max_len, mixer=mixer,
                    mixer_settings=settings, config=config,
                    mask_id=vocab_size - 1 if mask_token else -1)
  mixer_module, _ = _longest_mixer(encoder)  # a bad mixer setting fails here, before tracing
  if not denoise:  # a pooled classifier: no CLS token in front of a causal reading
    check_reading(dict(model, name=mixer), mixer_module.causal_reading())
  if denoise:
    return Denoiser(encoder, num_classes)
  if pair:
    return DualClassifier(encoder, num_classes, pair_features)
  return Classifier(encoder, num_classes)
