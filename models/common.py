"""What every token mixer shares: the mixer base classes (the whole mixer interface, declared
once, and the validation run when a mixer is built), the per-head projections, the mask value,
attention-weight dropout and the dense masked softmax attention."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules as s

# Added to the logits of masked keys. Finite, so a row whose keys are all masked gives a
# uniform (harmless) distribution instead of NaN.
MASK_VALUE = -1e9


class Mixer(nn.Module):
  """Base of every token mixer: mixer(x_BxLxD, mask_BxL, deterministic=...) -> BxLxD.

  The whole interface of a mixer is declared here, each part with its default; the registry,
  the encoder and the optimiser read it from the class or call it, and nothing else.

  Fields. `ENCODER_FIELDS` are those the encoder fills (this class declares `dropout_rate`, the
  encoder's attention_dropout_rate, and `dtype`; HeadsMixer `num_heads`, `qkv_dim`, `rotary`;
  a mixer declares `layer_index`, `shared` or `num_layers` where it needs them). Every other
  field is a user setting, set in config.model.attention and declared the one way:
  `name: int = rules.setting(default, rule, "one-line doc")` (lra/rules.py), whose rule runs
  when the mixer is constructed, so models.build rejects a bad config before anything is traced
  (`setting_rules()` lists them). One that does nothing unless another setting of the mixer has
  a value declares it, `only_with=(other, value)`, and a value other than its default is then
  refused, as the encoder's are (lra.rules.refuse_unmet).

  Constants (class attributes, read by the registry from the class):
    `SUBQUADRATIC` (False): True when the mixer never forms an array with two axes of the
      sequence length (the contract test checks the traced program of every mixer that claims
      it); a property where it depends on a setting.
    `ATTENTION_DROPOUT` (True): False for a mixer with no attention weights to drop: it
      refuses attention_dropout_rate > 0 instead of ignoring it, and configs set 0 for it.
    `ENCODER_SETTINGS` ({}): encoder settings (models.settings.EncoderConfig) the mixer needs on
      every task, e.g. {"positions": "none"}, with a comment saying why; configs and the tests'
      tiny models apply them (registry.encoder_settings).
    `SETTINGS_WHEN` (()): mixer settings that follow from encoder settings, ((condition,
      settings), ...) with the condition a dict of encoder settings; configs apply the settings
      of each condition their encoder settings meet (registry.settings_when). Not an
      `only_with`: it gives a setting the value that follows (a default that depends on the
      encoder), where `only_with` says a setting does nothing.
    `OPTIMIZER_GROUP` (()): leaf names of the parameters trained apart, at
      config.ssm_learning_rate without weight decay (lra/training/optim.py).
    `MIN_LAYERS` (1): the fewest encoder blocks that make the mixer what its paper describes
      (a mixer whose kinds cycle by layer needs one of each); configs give it at least this
      many (configs/table.py).
    `RENAMED_SETTINGS` ({}): {old name: new name} of settings that were renamed; a config
      that sets an old name is refused with one line naming the new one
      (registry.check_settings), not told that the mixer has no such setting.

  Hooks (override them; call super() in check_settings):
    `make_shared(settings, **encoder_fields)` (None): a classmethod making the module whose
      parameters every block's mixer shares; the encoder calls it in its own scope and gives
      the module to each block's mixer as its `shared` field.
    `check_settings()`: each declared setting against its rule, then the encoder fields; a
      subclass adds rules across settings.
    `check_length(length)` (nothing): rules that need the longest sequence the mixer will see.
    `idle_at(length)` ([]): one line for each setting that does nothing at that length.
      Not an `only_with`: it turns on the input length (Mega's chunk_size) or the kinds of
      layer at this depth (Based's), known once the model is built for a task, and the same
      settings act on a longer task or at another depth, so its lines are warned of and
      recorded (results.json), not refused.
    `causal_reading()` (None): the setting that makes the configured mixer read causally
      (each position only itself and earlier ones), e.g. "config.model.attention.causal=True";
      overridden by each mixer that can (a CLS token in front then sees only itself, so a
      config that pools it is refused: models/settings.py check_reading).
    `residual(x, y, mask, dropout=..., deterministic=...)` (x + dropout(mixer(y))): the block's
      residual stream after the mixer's sub-layer; a mixer with another form (Mega's gated
      x + u (dropout(h) - x)) overrides it.
    `reversible()` (True unless `residual` is overridden): whether reversible layers, which
      build the default residual form, can run the mixer (models.build refuses otherwise).
    `carried_state(width, length)` (None: not declared): how many numbers per sequence one
      layer of the mixer carries from one position to the next, for a width-`width` input of
      `length` positions (Zoology's state-size axis): attention its key-value cache,
      2 x length x qkv_dim; a recurrent mixer its state, both directions counted; a complex
      number counts as two. Every mixer of models/ declares it (tests/test_state_size.py).
  """
  dropout_rate: float = 0.0  # the encoder's attention_dropout_rate
  dtype: str = "float32"

  ENCODER_FIELDS = ("num_heads", "qkv_dim", "dropout_rate", "dtype", "layer_index", "shared",
                    "num_layers", "rotary")
  SUBQUADRATIC = False
  ATTENTION_DROPOUT = True
  ENCODER_SETTINGS = {}
  SETTINGS_WHEN = ()
  OPTIMIZER_GROUP = ()
  MIN_LAYERS = 1
  RENAMED_SETTINGS = {}
  # True: the parameters are made for the init length and every input has it (Sinkhorn's
  # sorting network: an output per block); the trainer then pads shorter rows to it.
  FIXED_LENGTH = False

  def __post_init__(self):
    self.check_settings()
    super().__post_init__()

  @classmethod
  def setting_rules(cls) -> dict:
    """{user setting: its rule}: the fields declared with rules.setting."""
    return {name: d.rule for name, d in s.declared(cls).items() if d.rule is not None}

  @classmethod
  def make_shared(cls, settings: dict, **encoder_fields) -> nn.Module | None:
    """The module every block's mixer shares (built in the encoder's scope), or None."""
    del settings, encoder_fields
    return None

  def check_settings(self) -> None:
    """Each user setting against its rule and its only_with, then the encoder fields this
    mixer receives."""
    for name, rule in self.setting_rules().items():
      s.check(s.attention_key(name), getattr(self, name), rule)
    declared = s.declared(type(self))
    s.refuse_unmet(declared, {n: getattr(self, n) for n in declared}, s.attention_key)
    s.check(s.model_key("attention_dropout_rate"), self.dropout_rate,
            s.Float(0.0, 1.0, open="high"))
    if not self.ATTENTION_DROPOUT and self.dropout_rate > 0.0:
      s.fail(s.model_key("attention_dropout_rate"), self.dropout_rate,
             f"0.0 for this model ({type(self).__name__} has no attention weights to drop)")

  def check_length(self, length: int) -> None:
    """Rules that need the longest sequence the mixer will see (models.build knows it)."""

  def idle_at(self, length: int) -> list[str]:
    """One line for each setting that does nothing at this longest sequence (the run is
    valid, but not what the setting says): the trainer warns and results.json records them."""
    del length
    return []

  def causal_reading(self) -> str | None:
    """The setting (`key=value`) that makes this configured mixer read causally, or None when
    some position reads later ones."""
    return None

  def residual(self, x_BxLxD, y_BxLxD, mask_BxL, *, dropout, deterministic: bool):
    """The residual stream after this sub-layer: x + dropout(mixer(y)), y the block's input x
    normalised (pre-norm) or x itself (post-norm: the block normalises the result);
    `dropout` is the block's residual dropout."""
    return x_BxLxD + dropout(self(y_BxLxD, mask_BxL, deterministic=deterministic))

  @classmethod
  def reversible(cls) -> bool:
    """Whether reversible layers can run this mixer: they build y1 = x1 + dropout(f(x2)), the
    default `residual`, so a mixer with its own residual form cannot."""
    return cls.residual is Mixer.residual

  def carried_state(self, width: int, length: int) -> int | None:
    """Numbers per sequence carried across positions in one layer (None: not declared)."""
    del width, length
    return None

  def attention_rng(self, deterministic: bool):
    """The key of attention-weight dropout, or None when there is none to apply."""
    if deterministic or self.dropout_rate == 0.0:
      return None
    return self.make_rng("dropout")


class HeadsMixer(Mixer):
  """A mixer with per-head queries, keys and values: qkv_dim split over num_heads heads.
  `rotary` (the encoder's positions="rotary"): QKVProjection rotates queries and keys by their
  positions (`rotary_embedding`); a subclass whose queries and keys cannot take it says so in
  `check_settings`."""
  num_heads: int = 1
  qkv_dim: int = 1
  rotary: bool = False

  def check_settings(self) -> None:
    super().check_settings()
    s.check(s.model_key("num_heads"), self.num_heads, s.Int(1))
    s.check(s.model_key("qkv_dim"), self.qkv_dim, s.Int(1))
    if self.qkv_dim % self.num_heads:
      s.fail(s.model_key("qkv_dim"), self.qkv_dim,
             f"a multiple of config.model.num_heads={self.num_heads}")
    if self.rotary and self.head_dim % 2:
      s.fail(s.model_key("positions"), "rotary",
             f"an even head width (qkv_dim / num_heads = {self.head_dim}) to rotate in pairs")

  def refuse_rotary(self, why: str) -> None:
    """For a subclass whose attention cannot take rotary positions (`why` says what it has)."""
    if self.rotary:
      s.fail(s.model_key("positions"), "rotary",
             f"'sinusoidal', 'learned' or 'none' for {type(self).__name__} ({why})")

  @property
  def head_dim(self) -> int:
    return self.qkv_dim // self.num_heads


def head_projection(num_heads: int, qkv_dim: int, dtype: str, name: str) -> nn.Module:
  """Dense BxLxD -> BxLxHxK (no bias), built in the calling module's scope as `name`."""
  if qkv_dim % num_heads:
    raise ValueError(f"qkv_dim {qkv_dim} is not divisible by num_heads {num_heads}")
  return nn.DenseGeneral((num_heads, qkv_dim // num_heads), use_bias=False, dtype=dtype,
                         kernel_init=nn.initializers.xavier_uniform(), name=name)


ROTARY_BASE = 10000.0  # RoFormer's theta_i = base^(-2i/K) (Su et al. 2021, eq. 15)


def rotary_embedding(x_BxLxHxK, positions_L=None):
  """Rotary position embedding (RoFormer, Su et al. 2021): each pair (x_i, x_{i+K/2}) of a
  head's K channels rotated by angle position * base^(-2i/K), so that a rotated query and key
  meet in a dot product that depends on their positions only through m - n. The pairs are the
  two halves of the head (GPT-NeoX's layout of the same rotation); positions 0..L-1 unless
  given (the CLS token, in front, is position 0). In float32, cast back."""
  length, half = x_BxLxHxK.shape[1], x_BxLxHxK.shape[-1] // 2
  positions_L = jnp.arange(length) if positions_L is None else positions_L
  inverse_K2 = ROTARY_BASE ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angle_LxK2 = positions_L.astype(jnp.float32)[:, None] * inverse_K2[None, :]
  cos_1xLx1xK2 = jnp.cos(angle_LxK2)[None, :, None, :]
  sin_1xLx1xK2 = jnp.sin(angle_LxK2)[None, :, None, :]
  x = x_BxLxHxK.astype(jnp.float32)
  a, b = x[..., :half], x[..., half:]
  rotated = jnp.concatenate([a * cos_1xLx1xK2 - b * sin_1xLx1xK2,
                             a * sin_1xLx1xK2 + b * cos_1xLx1xK2], axis=-1)
  return rotated.astype(x_BxLxHxK.dtype)


class QKVProjection(nn.Module):
  """Projects BxLxD inputs to per-head queries, keys and values BxLxHxK (no bias); with
  `rotary`, queries and keys rotated by their positions (rotary_embedding). The kernel mixers
  build it without and rotate phi(q), phi(k) instead (RoFormer eq. 19: linear_transformer.py)."""
  num_heads: int
  qkv_dim: int
  dtype: str = "float32"
  rotary: bool = False

  @nn.compact
  def __call__(self, x_BxLxD):
    dense = lambda name: head_projection(self.num_heads, self.qkv_dim, self.dtype, name)
    q, k, v = dense("query")(x_BxLxD), dense("key")(x_BxLxD), dense("value")(x_BxLxD)
    if self.rotary:
      q, k = rotary_embedding(q), rotary_embedding(k)
    return q, k, v


class OutputProjection(nn.Module):
  """Merges heads BxLxHxK back to BxLxD."""
  out_dim: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, y_BxLxHxK):
    return nn.DenseGeneral(self.out_dim, axis=(-2, -1), dtype=self.dtype,
                           kernel_init=nn.initializers.xavier_uniform(),
                           name="out")(y_BxLxHxK)


def dropout_weights(rng, weights, rate: float):
  """Inverted dropout on attention weights (shared by every softmax mixer)."""
  keep = jax.random.bernoulli(rng, 1.0 - rate, weights.shape)
  return jnp.where(keep, weights / (1.0 - rate), 0.0)


def masked_softmax(logits, allowed, *, dropout_rng=None, dropout_rate: float = 0.0):
  """Softmax over the last axis with disallowed entries at MASK_VALUE, then dropout."""
  weights = jax.nn.softmax(jnp.where(allowed, logits, MASK_VALUE), axis=-1)
  if dropout_rng is not None and dropout_rate > 0.0:
    weights = dropout_weights(dropout_rng, weights, dropout_rate)
  return weights


def softmax_attention(q_BxLxHxK, k_BxMxHxK, v_BxMxHxK, key_mask_BxM, *,
                      dropout_rng=None, dropout_rate: float = 0.0, causal: bool = False):
  """Scaled dot-product attention; logits and softmax in float32, padded keys get 0; with
  `causal`, query i sees keys j <= i only (L == M)."""
  scale = q_BxLxHxK.shape[-1] ** -0.5
  logits_BxHxLxM = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK * scale, k_BxMxHxK,
                              preferred_element_type=jnp.float32)
  allowed_BxHxLxM = key_mask_BxM[:, None, None, :]
  if causal:
    positions_L = jnp.arange(q_BxLxHxK.shape[1])
    allowed_BxHxLxM = allowed_BxHxLxM & (positions_L[None, :] <= positions_L[:, None])[None, None]
  weights_BxHxLxM = masked_softmax(logits_BxHxLxM, allowed_BxHxLxM,
                                   dropout_rng=dropout_rng, dropout_rate=dropout_rate)
  weights_BxHxLxM = weights_BxHxLxM.astype(v_BxMxHxK.dtype)
  return jnp.einsum("bhlm,bmhk->blhk", weights_BxHxLxM, v_BxMxHxK)
