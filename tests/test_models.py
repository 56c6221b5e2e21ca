"""The shared encoder, full attention and the mixer registry."""
import dataclasses
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from configs import table
from models import common, registry, transformer
from models.settings import SettingError
from tests.helpers import projected_attention, random_mask

_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("length", [1, 7, 16])
def test_full_attention_matches_reference(length):
  rng = np.random.default_rng(length)
  x = jnp.asarray(rng.normal(size=(3, length, 12)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, length))
  mixer = transformer.FullAttention(num_heads=3, qkv_dim=12)
  params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  out = mixer.apply(params, x, mask, deterministic=True)
  ref = projected_attention(params, x, mask[:, None, None, :])
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)

  weights = jnp.asarray(rng.normal(size=out.shape), jnp.float32)
  loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True) * weights)
  ref_loss = lambda p, x: jnp.sum(projected_attention(p, x, mask[:, None, None, :]) * weights)
  grads = jax.grad(loss, argnums=(0, 1))(params, x)
  ref_grads = jax.grad(ref_loss, argnums=(0, 1))(params, x)
  for g, r in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def _model(pair=False, **kw):
  settings = dict(name="transformer", emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=32,
                  num_layers=2, dropout_rate=0.0, attention_dropout_rate=0.0)
  settings.update(kw)
  return models.build(settings, vocab_size=20, num_classes=5, max_len=24, pair=pair)


@pytest.mark.parametrize("pooling,use_cls,positions", [
    ("CLS", True, "sinusoidal"), ("MEAN", False, "learned"), ("SUM", True, "sinusoidal")])
def test_encoder_shapes_and_padding_invariance(pooling, use_cls, positions):
  model = _model(pooling=pooling, use_cls=use_cls, positions=positions)
  rng = np.random.default_rng(0)
  mask = random_mask(rng, 4, 20, full_first=False)
  tokens = np.where(mask, rng.integers(1, 20, size=(4, 20)), 0)
  params = model.init(jax.random.PRNGKey(1), jnp.asarray(tokens))
  logits = model.apply(params, jnp.asarray(tokens))
  assert logits.shape == (4, 5) and logits.dtype == jnp.float32

  # Changing what sits in padded positions (explicit mask) changes no logit.
  noise = np.where(mask, tokens, rng.integers(1, 20, size=(4, 20)))
  masked = model.apply(params, jnp.asarray(noise), jnp.asarray(mask))
  np.testing.assert_allclose(masked, logits, rtol=1e-5, atol=1e-5)
  # Nor does more padding at the end.
  longer = np.pad(tokens, ((0, 0), (0, 4)))
  np.testing.assert_allclose(model.apply(params, jnp.asarray(longer)), logits,
                             rtol=1e-5, atol=1e-5)
  # But a real token does.
  changed = tokens.copy()
  changed[0, 0] = tokens[0, 0] % 19 + 1
  assert not np.allclose(model.apply(params, jnp.asarray(changed))[0], logits[0])


@pytest.mark.parametrize("features,width", [("uvpd", 4 * 16), ("uv", 2 * 16)])
def test_dual_encoder_shares_one_encoder(features, width):
  model = _model(pair=True, pair_features=features)
  a = jnp.asarray(np.random.default_rng(0).integers(1, 20, size=(2, 24)))
  b = jnp.asarray(np.random.default_rng(1).integers(1, 20, size=(2, 24)))
  params = model.init(jax.random.PRNGKey(0), a, b)["params"]
  assert sorted(params) == ["encoder", "head_hidden", "head_hidden2", "head_out"]
  assert params["head_hidden"]["kernel"].shape == (width, 32)
  assert model.apply({"params": params}, a, b).shape == (2, 5)


def test_too_long_input_is_an_error():
  model = _model()
  with pytest.raises(ValueError, match="max_len"):
    model.init(jax.random.PRNGKey(0), jnp.ones((1, 30), jnp.int32))


def test_registry_errors_name_the_valid_choices():
  with pytest.raises(SettingError, match="valid models: .*transformer"):
    _model(name="no_such_model")
  with pytest.raises(SettingError, match="does not take setting"):
    _model(attention=dict(window=3))
  with pytest.raises(SettingError, match="pooling"):
    _model(pooling="MAX")
  assert "transformer" in registry.names()


# ------------------------------------------------------------------------- every mixer's settings

_TINY_MODEL = dict(emb_dim=16, num_heads=2, qkv_dim=16, mlp_dim=16, num_layers=1)


def _build(name, attention=None, **model):
  """The tiny model with the settings every task config gives `name` (configs/table.py)."""
  model = {**_TINY_MODEL, **table.MODEL.get(name, {}), **model}
  if not registry.takes_attention_dropout(name):
    model.setdefault("attention_dropout_rate", 0.0)
  return models.build(dict(name=name, attention=attention or {}, **model),
                      vocab_size=10, num_classes=2, max_len=24, pair=False)


@pytest.mark.parametrize("name", registry.names())
def test_static_settings_are_the_dataclass_defaults(name):
  """The registry reads settings from the source without importing it; they must be what the
  imported class declares (a default that is not a literal fails in the registry)."""
  cls = registry.get(name)
  fields = [f for f in dataclasses.fields(cls)
            if f.init and f.name not in registry.ENCODER_FIELDS + ("parent", "name")]
  assert registry.user_settings(name) == [f.name for f in fields]
  assert registry.default_settings(name) == {f.name: f.default for f in fields}
  # Every setting has its check, and the flag the contract test reads is there.
  assert set(cls.SETTINGS) == set(registry.user_settings(name))
  assert registry.takes_attention_dropout(name) == cls.ATTENTION_DROPOUT
  assert isinstance(cls.SUBQUADRATIC, bool) or isinstance(cls.SUBQUADRATIC, property)


@pytest.mark.parametrize("name", registry.names())
def test_every_bad_setting_fails_at_build_time(name):
  """Values each setting's check rejects (True for an int, 0 or -1 below a minimum, an unknown
  choice, ...) raise SettingError from models.build, before anything is traced."""
  cls = registry.get(name)
  model = _build(name)  # the defaults build
  assert isinstance(model, models.Classifier)
  for setting, rule in cls.SETTINGS.items():
    for bad in rule.bad_values():
      with pytest.raises(SettingError, match=f"config.model.attention.{setting}="):
        _build(name, {setting: bad})
  if issubclass(cls, common.HeadsMixer):  # qkv_dim is split over the heads
    with pytest.raises(SettingError, match="config.model.qkv_dim=15 .*num_heads=2"):
      _build(name, qkv_dim=15)
  with pytest.raises(SettingError, match="config.model.attention_dropout_rate=1.0"):
    _build(name, attention_dropout_rate=1.0)


def test_registry_reads_models_without_importing_jax():
  """Loading the registry, names and defaults imports neither JAX nor Flax."""
  code = ("import sys, models, models.registry as r; r.names(); "
          "[r.default_settings(n) for n in r.names()]; "
          "assert 'jax' not in sys.modules and 'flax' not in sys.modules, 'imported'")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=_ROOT)
