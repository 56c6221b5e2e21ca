"""The shared encoder, full attention and the mixer registry."""
import ast
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models, rules
from lra.configs import base, image, listops
from lra.models import common, encoder, registry
from lra.models.mixers import transformer
from lra.models import settings as s
from lra.models.settings import EncoderConfig
from lra.rules import SettingError
from tests import helpers
from tests.helpers import projected_attention, random_mask

_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("length", [1, 7, 16])
def test_full_attention_matches_reference(length):
  rng = np.random.default_rng(length)
  x = jnp.asarray(rng.normal(size=(3, length, 12)), jnp.float32)
  mask = jnp.asarray(random_mask(rng, 3, length))
  mixer = transformer.FullAttention(num_heads=3, qkv_dim=12)
  # Jitted: op by op, each of some 120 primitives compiles alone (about 4 s a length).
  params = mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  out = jax.jit(lambda p, x: mixer.apply(p, x, mask, deterministic=True))(params, x)
  ref = jax.jit(lambda p, x: projected_attention(p, x, mask[:, None, None, :]))(params, x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)

  weights = jnp.asarray(rng.normal(size=out.shape), jnp.float32)
  loss = lambda p, x: jnp.sum(mixer.apply(p, x, mask, deterministic=True) * weights)
  ref_loss = lambda p, x: jnp.sum(projected_attention(p, x, mask[:, None, None, :]) * weights)
  grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
  ref_grads = jax.jit(jax.grad(ref_loss, argnums=(0, 1)))(params, x)
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
  apply = jax.jit(model.apply)  # one compile per shape, not one per primitive
  logits = apply(params, jnp.asarray(tokens))
  assert logits.shape == (4, 5) and logits.dtype == jnp.float32

  # Changing what sits in padded positions (explicit mask) changes no logit.
  noise = np.where(mask, tokens, rng.integers(1, 20, size=(4, 20)))
  masked = apply(params, jnp.asarray(noise), jnp.asarray(mask))
  np.testing.assert_allclose(masked, logits, rtol=1e-5, atol=1e-5)
  # Nor does more padding at the end.
  longer = np.pad(tokens, ((0, 0), (0, 4)))
  np.testing.assert_allclose(apply(params, jnp.asarray(longer)), logits,
                             rtol=1e-5, atol=1e-5)
  # But a real token does.
  changed = tokens.copy()
  changed[0, 0] = tokens[0, 0] % 19 + 1
  assert not np.allclose(apply(params, jnp.asarray(changed))[0], logits[0])


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
_ENCODER_FIELDS = {f.name for f in dataclasses.fields(EncoderConfig)}


def _build(name, attention=None, **model):
  """The tiny model with the settings every task config gives `name` (its ENCODER_SETTINGS)."""
  model = {**_TINY_MODEL, **registry.encoder_settings(name), **model}
  model["num_layers"] = max(model["num_layers"], registry.get(name).MIN_LAYERS)  # as configs do
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
            if f.init and f.name not in common.Mixer.ENCODER_FIELDS + ("parent", "name")]
  assert registry.user_settings(name) == [f.name for f in fields]
  assert registry.default_settings(name) == {f.name: f.default for f in fields}
  # Every setting is declared the one way (rules.setting: default, rule, one-line doc), and
  # the flag the contract test reads is there.
  declared = rules.declared(cls)
  assert list(declared) == registry.user_settings(name)
  for key, setting in declared.items():
    assert setting.rule is not None and setting.rule.ok(setting.default), key
    assert setting.doc.strip() and "\n" not in setting.doc, key
  assert not [k for k in cls.__mro__ if "SETTINGS" in vars(k)], "a second declaration"
  assert registry.takes_attention_dropout(name) == cls.ATTENTION_DROPOUT
  assert isinstance(cls.SUBQUADRATIC, bool) or isinstance(cls.SUBQUADRATIC, property)
  # The encoder settings it needs are valid ones, and what SETTINGS_WHEN sets is its own.
  assert registry.encoder_settings(name) == cls.ENCODER_SETTINGS
  assert set(cls.ENCODER_SETTINGS) <= _ENCODER_FIELDS
  s.check_encoder(cls.ENCODER_SETTINGS)
  for condition, settings in cls.SETTINGS_WHEN:
    assert set(condition) <= _ENCODER_FIELDS and set(settings) <= set(declared), condition


@pytest.mark.parametrize("name", registry.names())
def test_every_bad_setting_fails_at_build_time(name):
  """Values each setting's check rejects (True for an int, 0 or -1 below a minimum, an unknown
  choice, ...) raise SettingError from models.build, before anything is traced; so does
  attention dropout for a mixer without attention weights."""
  cls = registry.get(name)
  model = _build(name)  # the defaults build
  assert isinstance(model, models.Classifier)
  for setting, declared in rules.declared(cls).items():
    for bad in declared.rule.bad_values():
      with pytest.raises(SettingError, match=f"config.model.attention.{setting}="):
        _build(name, {setting: bad})
  if issubclass(cls, common.HeadsMixer):  # qkv_dim is split over the heads
    with pytest.raises(SettingError, match="config.model.qkv_dim=15 .*num_heads=2"):
      _build(name, qkv_dim=15)
  with pytest.raises(SettingError, match="config.model.attention_dropout_rate=1.0"):
    _build(name, attention_dropout_rate=1.0)
  if not cls.ATTENTION_DROPOUT:  # no attention weights: refused, not ignored
    with pytest.raises(SettingError, match="config.model.attention_dropout_rate=0.1 .* 0.0 "
                       "for this model"):
      _build(name, attention_dropout_rate=0.1)


def test_registry_knows_every_mixer_of_models_and_its_constants():
  """Every module of models/ with a @register class is found (each one of models/mixers/),
  and its class constants read."""
  registered = {path.relative_to(_ROOT).as_posix()
                for path in (pathlib.Path(_ROOT) / "models").rglob("*.py")
                if re.search(r"^@(registry\.)?register\(", path.read_text(), re.M)}
  assert {f"models/mixers/{registry.get(n).__module__.rsplit('.', 1)[1]}.py"
          for n in registry.names() if registry.in_repository(n)} == registered
  assert registry.encoder_settings("s5") == dict(positions="none", pooling="MEAN", use_cls=False)
  assert registry.encoder_settings("transformer") == {}
  assert registry.settings_when("sparse_transformer", dict(num_heads=1)) == dict(
      combine="merged")
  assert registry.settings_when("sparse_transformer", dict(num_heads=2)) == {}


def test_a_built_in_name_taken_by_outside_code_is_one_line(tmp_path):
  """Outside code that registers a built-in name gets one line naming its module, the name and
  how to pick another (through a command: no traceback)."""
  (tmp_path / "mine.py").write_text(
      "from lra.models import common, registry\n\n"
      "@registry.register('transformer')\nclass Mine(common.Mixer):\n  pass\n")
  run = subprocess.run([sys.executable, os.path.join(_ROOT, "train.py"), "--import=mine",
                        "--config=configs/listops.py:transformer,cpu", f"--workdir={tmp_path}/w"],
                       cwd=tmp_path, capture_output=True, text=True)
  assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
  (line,) = [l for l in run.stderr.splitlines() if l.strip()]
  assert line == ("error: mine registers mixer 'transformer', a name "
                  "models/mixers/transformer.py already has; register yours under another "
                  "name, e.g. "
                  "@register('my_transformer')"), line
  assert not (tmp_path / "w").exists()


def test_run_time_mixer_constants_come_from_its_class():
  class Recurrent(common.Mixer):
    ENCODER_SETTINGS = {"positions": "none"}
    SETTINGS_WHEN = (({"num_heads": 1, "dtype": "float32"}, {"flag": True}),)

  with mock.patch.dict(registry._MIXERS, {"test_recurrent": Recurrent}):
    assert registry.encoder_settings("test_recurrent") == {"positions": "none"}
    assert registry.settings_when("test_recurrent", dict(num_heads=1, dtype="float32")) == {
        "flag": True}
    assert registry.settings_when("test_recurrent", dict(num_heads=1)) == {}


# ------------------------------------------------------------------------- the mixer interface

# Every constant of a mixer with the default Mixer declares, and every hook.
_CONSTANTS = dict(SUBQUADRATIC=False, ATTENTION_DROPOUT=True, ENCODER_SETTINGS={},
                  SETTINGS_WHEN=(), OPTIMIZER_GROUP=(), RENAMED_SETTINGS={})
_HOOKS = ("make_shared", "check_settings", "check_length", "idle_at", "residual", "reversible")


def test_every_constant_and_hook_of_a_mixer_is_declared_and_documented_on_mixer():
  for name, default in _CONSTANTS.items():
    assert getattr(common.Mixer, name) == default, name
  assert common.Mixer.make_shared({}, num_heads=1, qkv_dim=1, dtype="float32") is None
  assert common.Mixer.reversible() and not registry.get("mega").reversible()
  mixer = common.Mixer()
  assert mixer.idle_at(8) == [] and mixer.check_length(8) is None
  for name in [*_CONSTANTS, *_HOOKS, "ENCODER_FIELDS"]:
    assert f"`{name}" in common.Mixer.__doc__, f"Mixer's docstring does not document {name}"
  # Callers use them directly: no getattr or hasattr with a default for a mixer's own.
  for path in ("models/encoder.py", "models/registry.py", "lra/training/optim.py"):
    source = (_ROOT / path).read_text()
    for name in [*_CONSTANTS, *_HOOKS, "SETTINGS"]:
      assert not re.search(rf"(getattr|hasattr)\([^)]*['\"]{name}['\"]", source), (path, name)


def test_a_registered_class_must_be_a_mixer():
  class Plain(nn.Module):
    pass

  with pytest.raises(SettingError, match="Plain is no mixer: subclass lra.models.common.Mixer"):
    registry.register("test_plain")(Plain)
  assert "test_plain" not in registry.names()


class _Scaled(common.Mixer):
  """A mixer with its own residual form, x - dropout(scale * h), and one setting."""
  scale: float = rules.setting(1.0, rules.Float(0.0, open="low"), "multiplies the branch")

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    return self.scale * nn.Dense(x_BxLxD.shape[-1], name="dense")(x_BxLxD)

  def residual(self, x_BxLxD, y_BxLxD, mask_BxL, *, dropout, deterministic: bool):
    return x_BxLxD - dropout(self(y_BxLxD, mask_BxL, deterministic=deterministic))


def test_a_mixers_settings_are_its_fields_declared_with_rules_setting():
  assert registry.user_settings(_Scaled) == ["scale"] and not registry.unruled_settings(_Scaled)
  assert rules.declared(_Scaled)["scale"].doc == "multiplies the branch"
  assert registry.make(_Scaled, {"scale": 2.0}).scale == 2.0
  with pytest.raises(SettingError, match="config.model.attention.scale=0.0"):
    registry.make(_Scaled, {"scale": 0.0})


@pytest.mark.parametrize("prenorm", [True, False])
def test_a_mixer_computes_its_own_residual_and_the_encoder_names_no_mixer(prenorm):
  config = EncoderConfig(emb_dim=4, num_heads=1, qkv_dim=4, feedforward=False,
                         dropout_rate=0.0, attention_dropout_rate=0.0, prenorm=prenorm)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, 4)), jnp.float32)
  mask = jnp.ones((2, 5), bool)
  with mock.patch.dict(registry._MIXERS, {"test_scaled": _Scaled}):
    block = encoder.Block(0, "test_scaled", {"scale": 3.0}, None, config)
    params = block.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    out = block.apply(params, x, mask, deterministic=True)
    with pytest.raises(SettingError, match=r"config.model.reversible=True .*_Scaled.residual"):
      models.build(dict(name="test_scaled", emb_dim=4, num_heads=1, qkv_dim=4, mlp_dim=4,
                        num_layers=1, reversible=True), vocab_size=5, num_classes=2, max_len=5,
                   pair=False)
  p = params["params"]
  norm = lambda h, n: nn.LayerNorm().apply({"params": p[f"LayerNorm_{n}"]}, h)
  dense = lambda h: nn.Dense(4).apply({"params": p["mixer"]["dense"]}, h)
  want = x - 3.0 * dense(norm(x, 0)) if prenorm else norm(x - 3.0 * dense(x), 0)
  np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
  # The encoder's code knows no mixer's quirk: it names no mixer class, no mixer's own method
  # or constant, and no registry question about one mixer (its comments may cite papers).
  tree = ast.parse((_ROOT / "models" / "encoder.py").read_text())
  names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
  names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
  quirks = {registry.get(n).__name__ for n in registry.names()}
  quirks |= {"candidate_and_gate", "GATED_RESIDUAL", "gated_residual"}
  assert not names & quirks, names & quirks


# ------------------------------------------------------------------------- encoder settings


def test_every_encoder_setting_is_declared_once_with_rule_doc_and_config_default():
  """EncoderConfig holds each encoder setting's default, check and doc; every config starts
  from those defaults, models.build checks them, and the modules repeat none of them."""
  fields = dataclasses.fields(EncoderConfig)
  config = base.base_config("transformer").model
  assert set(config) == {"name", "attention"} | _ENCODER_FIELDS
  declared = rules.declared(EncoderConfig)  # the one way every layer declares a setting
  assert set(declared) == _ENCODER_FIELDS
  for f in fields:
    rule, doc = declared[f.name].rule, declared[f.name].doc
    assert rule.ok(f.default) and doc.strip() and "\n" not in doc, f.name
    assert config[f.name] == f.default, f.name
    for bad in rule.bad_values():
      with pytest.raises(SettingError, match=f"config.model.{f.name}="):
        _model(**{f.name: bad})
  # A mixer without attention weights starts from no attention dropout (its ATTENTION_DROPOUT).
  assert base.base_config("fnet").model.attention_dropout_rate == 0.0
  for module in (models.Encoder, encoder.Block, encoder._BlockBranch):
    assert not {f.name for f in dataclasses.fields(module)} & _ENCODER_FIELDS, module


def test_configs_and_tiny_models_take_a_mixers_needs_from_the_mixer():
  for name in ("s5", "lru", "transformer_xl"):
    model = helpers.tiny_model(name)
    assert (model["positions"], model["pooling"], model["use_cls"]) == ("none", "MEAN", False)
  assert helpers.tiny_model("s4d")["positions"] == "none"
  assert helpers.tiny_model("fnet")["prenorm"] is False
  assert "positions" not in helpers.tiny_model("transformer")
  # tests/helpers.py reads the registry, not configs/.
  tree = ast.parse((_ROOT / "tests" / "helpers.py").read_text())
  imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
  imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
  assert not [m for m in imported if m.startswith("lra.configs")], imported
  # One head cannot hold two Sparse Transformer patterns: such configs merge them.
  one_head, heads = image.get_config("sparse_transformer"), listops.get_config("sparse_transformer")
  assert (one_head.model.num_heads, one_head.model.attention.combine) == (1, "merged")
  assert (heads.model.num_heads, heads.model.attention.combine) == (8, "heads")
