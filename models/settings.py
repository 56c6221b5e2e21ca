"""The encoder's settings (config.model.*), each declared once in EncoderConfig with
`rules.setting` (default, rule and one-line doc: the one way every layer declares a setting,
lra/rules.py); `check_encoder` checks them and the rules across them when the model is built.

A mixer declares its user settings the same way, as its dataclass fields (models/common.py),
and so do the trainer (lra/training/options.py) and each task's data (lra/data/settings.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from lra.rules import (Bool, Choice, Float, Int, check, declared, fail, model_key,
                       refuse_unmet, setting)


# --- the encoder's settings (config.model.*), each declared once ---

POOLINGS = ("CLS", "MEAN", "SUM")
# "none": the mixer encodes positions itself; "rotary": no position added to the input, every
# attention mixer rotates its queries and keys by position instead (models/common.py).
POSITIONS = ("sinusoidal", "learned", "none", "rotary")
NORMS = ("layer", "batch")
INPUT_ENCODERS = ("embedding", "linear")  # a table row per token id, or Dense(1 -> D) of its value
HEADS = ("mlp", "linear", "gelu_mlp")  # the classifier after pooling (models/encoder.py)
DTYPES = ("float32", "bfloat16", "float16")  # compute dtype; parameters stay float32


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """The shared encoder's settings, each declared once: default, check and doc.

  configs/base.py starts config.model from these fields and defaults (the sizes then come per
  task from configs/table.py), models.build checks a config's values against the rules
  (check_encoder) and builds one of these, and the encoder's Flax modules read it (as Flax
  lm1b's TransformerConfig). A new encoder setting is one field here, its use and its test.
  """
  emb_dim: int = setting(512, Int(1), "token embedding width, kept by every block")
  num_heads: int = setting(8, Int(1), "attention heads (qkv_dim is split over them)")
  qkv_dim: int = setting(512, Int(1), "total width of queries, keys and values (all heads)")
  mlp_dim: int = setting(1024, Int(1), "hidden width of the block MLP and of the classifier "
                         "head")
  num_layers: int = setting(4, Int(1), "encoder blocks")
  dropout_rate: float = setting(0.1, Float(0.0, 1.0, open="high"),
                                "residual, MLP and embedding dropout")
  attention_dropout_rate: float = setting(
      0.1, Float(0.0, 1.0, open="high"),
      "dropout on attention weights; configs give 0 to a mixer that has none (its "
      "ATTENTION_DROPOUT)")
  positions: str = setting("sinusoidal", Choice(POSITIONS),
                           '"sinusoidal", "learned", "none" (the mixer encodes positions) or '
                           '"rotary" (queries and keys rotated by position: RoFormer)')
  use_cls: bool = setting(True, Bool(), "prepend a zero-initialised CLS token")
  pooling: str = setting("CLS", Choice(POOLINGS), '"CLS", "MEAN" or "SUM" (padding excluded)')
  dtype: str = setting("float32", Choice(DTYPES),
                       'compute dtype; "bfloat16" on GPU/TPU (params stay float32)')
  ffn_chunks: int = setting(1, Int(1), "run the block MLP over this many sequence chunks "
                            "(less memory, same math)")
  feedforward: bool = setting(True, Bool(), "False: blocks without the MLP sub-layer "
                              "(mixers with their own output MLP)")
  norm: str = setting("layer", Choice(NORMS), 'block norms: "layer", or "batch" (per channel '
                      "over the batch and the real tokens, running averages for evaluation)")
  prenorm: bool = setting(True, Bool(), "x + f(norm(x)); False: post-norm norm(x + f(x)), "
                          "no final norm")
  reversible: bool = setting(False, Bool(), "reversible residual layers "
                             "(models/reversible.py): activation memory flat in depth")
  # Arora et al. 2023/2024 (Zoology, Based): a short convolution before a mixer is what gives
  # many linear-cost mixers their recall; this puts one before ANY mixer, as an ablation switch.
  short_conv: int = setting(0, Int(0), "kernel of a depthwise causal convolution (with bias, "
                            "no activation) over each block's mixer input; 0: none")
  # Zoology's Hybrid (zoology/mixers/hybrid.py: layer l is configs[l % 2]) with its BaseConv
  # first, the "BASED recipe" that Zoology's README gives every pre-Based linear attention.
  hybrid_conv: int = setting(0, Int(0), "k > 0: layers 0, 2, 4, ... are BaseConv layers "
                             "(Based's conv kind, a gated causal depthwise convolution of k "
                             "taps) in place of the mixer, as Zoology's Hybrid; 0: none")
  embed_init: float = setting(1.0, Float(0.0, open="low"),
                              "std of the token embedding's normal initialisation (1.0: "
                              "LRA's; fla's and Zoology's models use 0.02)",
                              only_with=("input_encoder", "embedding"))
  # The switches below let a published config reproduce its authors' function (docs/recipes.md);
  # their defaults are LRA's.
  final_norm: bool = setting(True, Bool(), "a norm after the last pre-norm block (LRA's final "
                             "LayerNorm); False: none, as the S5 and LRU stacks",
                             only_with=("prenorm", True, "post-norm blocks end normalised"))
  input_encoder: str = setting("embedding", Choice(INPUT_ENCODERS),
                               '"embedding" (a learned row per token id) or "linear": '
                               "Dense(1 -> emb_dim) of (id - input_mean) / input_std, the "
                               "SSM papers' encoder of pixel intensities")
  input_mean: float = setting(0.0, Float(), 'the "linear" input encoder subtracts it',
                              only_with=("input_encoder", "linear"))
  input_std: float = setting(1.0, Float(0.0, open="low"),
                             'the "linear" input encoder divides by it',
                             only_with=("input_encoder", "linear"))
  input_dropout: bool = setting(True, Bool(), "dropout (dropout_rate) on the embedded input; "
                                "False: none, as the S4 and S5 stacks")
  head: str = setting("mlp", Choice(HEADS), '"mlp": LRA\'s Dense(mlp_dim)-ReLU-Dense (pair '
                      'tasks: Dense(mlp_dim)-ReLU-Dense(mlp_dim/2)-ReLU-Dense), "linear": one '
                      'Dense, "gelu_mlp": Dense(mlp_dim)-GELU-Dense')
  batch_norm_momentum: float = setting(0.9, Float(0.0, 1.0, open="high"),
                                       "BatchNorm's running averages: new = m old + (1 - m) "
                                       "batch (S5's default is 0.95)",
                                       only_with=("norm", "batch"))
  pad_like_authors: bool = setting(False, Bool(), "let padding into the blocks and norms "
                                   "(mixers and BatchNorm see padded positions as real, "
                                   "pooling still skips them), as the official S4 and S5 "
                                   "codes run; False: padding is masked (the correct function)")


def encoder_defaults() -> dict[str, Any]:
  """Every encoder setting with its default: what config.model starts from."""
  return {f.name: f.default for f in dataclasses.fields(EncoderConfig)}


def check_encoder(model: Mapping[str, Any]) -> None:
  """The encoder settings given in `model` (config.model): each against its rule, then the
  combinations they allow together (one whose only_with is unmet keeps its default)."""
  for name, declaration in declared(EncoderConfig).items():
    if name in model:
      check(model_key(name), model[name], declaration.rule)
  if model.get("pooling") == "CLS" and not model.get("use_cls", True):
    fail(model_key("pooling"), "CLS", "'MEAN' or 'SUM' with config.model.use_cls=False "
         "('CLS' pools the CLS token)")
  # A setting that would do nothing (its declared only_with unmet) is refused rather than
  # silently ignored: no config sets one.
  refuse_unmet(declared(EncoderConfig), model, model_key)
  if model.get("hybrid_conv", 0) and model.get("num_layers", 1) < 2:
    fail(model_key("hybrid_conv"), model["hybrid_conv"], "0 with config.model.num_layers=1 "
         "(layer 0 is the BaseConv layer: the model would hold no mixer)")
  if model.get("reversible", False):
    # y1 = x1 + f(x2), y2 = x2 + g(y1) needs both branches, inside the residuals.
    reason = dict(norm=("layer", "the recomputing backward pass cannot rebuild batch statistics"),
                  prenorm=(True, "a norm after the residual sum cannot be inverted"),
                  feedforward=(True, "the MLP is the second branch of every reversible layer"))
    for key, (needed, why) in reason.items():
      if model.get(key, needed) != needed:
        fail(model_key(key), model[key], f"{needed!r} with config.model.reversible=True ({why})")


def check_reading(model: Mapping[str, Any], causal: str | None) -> None:
  """A classifier that pools the CLS token in front (config.model: `pooling`, `use_cls`, its
  `name`) under a mixer that reads causally (`causal`: the setting that makes it, the mixer's
  causal_reading()) reads a token that sees only itself: every input would get the same logits.
  Refused, naming the fix."""
  if causal and model.get("use_cls", True) and model.get("pooling", "CLS") == "CLS":
    fail(model_key("pooling"), "CLS", f"'MEAN' with config.model.use_cls=False for model "
         f"{model.get('name')!r} with {causal} (it reads causally, so the CLS token in front "
         "sees only itself and every input would get the same logits)")
