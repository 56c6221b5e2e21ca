"""The registry of token mixers (attention variants) by name, looked up lazily.

Adding a variant means one new file in models/ whose Flax module is decorated with
`@register("name")` (or `@registry.register("name")`), and one test file. The registry finds
the mixers of models/ by reading the source (ast), without importing them: a mixer's module,
and with it JAX, is imported only when `get` (or `make`) asks for that name. `user_settings`
and `default_settings` read the class's fields statically too, and `takes_attention_dropout`,
`encoder_settings`, `settings_when` and `gated_residual` its class constants, so loading a
config imports no JAX. A mixer registered at run time (outside code that a command's `--import`
loads, or a test's) is looked up from its class; `make`, `make_shared` and `user_settings` also
take an unregistered mixer class (lra.testing.check_mixer checks one).
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import pathlib
from typing import Any, Callable, Mapping

from lra.models.settings import SettingError

_MIXERS: dict[str, type] = {}  # the classes imported so far, by name
_MODELS_DIR = pathlib.Path(__file__).parent

# Fields the encoder fills in (a mixer declares the ones it needs); the user sets the others.
ENCODER_FIELDS = ("num_heads", "qkv_dim", "dropout_rate", "dtype", "layer_index", "shared",
                  "num_layers")
_NOT_SETTINGS = set(ENCODER_FIELDS) | {"parent", "name"}
_MISSING = object()


def register(name: str) -> Callable[[type], type]:
  """Class decorator: makes a mixer module available under `name`."""

  def wrap(cls: type) -> type:
    if name in _MIXERS:
      raise ValueError(f"mixer {name!r} registered twice")
    static = _index().get(name)
    if static and cls.__module__ != f"lra.models.{static[0]}":
      raise ValueError(f"mixer {name!r} is already models/{static[0]}.py's")
    _MIXERS[name] = cls
    return cls

  return wrap


@functools.lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
  path = _MODELS_DIR / f"{module}.py"
  return ast.parse(path.read_text(), str(path))


def _registered_name(decorator: ast.expr) -> str | None:
  """"name" of a `@register("name")` or `@registry.register("name")` decorator, else None."""
  if not (isinstance(decorator, ast.Call) and decorator.args
          and isinstance(decorator.args[0], ast.Constant)):
    return None
  func = decorator.func
  if (isinstance(func, ast.Name) and func.id == "register") or (
      isinstance(func, ast.Attribute) and func.attr == "register"
      and isinstance(func.value, ast.Name) and func.value.id == "registry"):
    return decorator.args[0].value
  return None


@functools.lru_cache(maxsize=None)
def _index() -> dict[str, tuple[str, str]]:
  """name -> (module, class) of every mixer defined in models/, read from the source."""
  found: dict[str, tuple[str, str]] = {}
  for path in sorted(_MODELS_DIR.glob("*.py")):
    for node in _tree(path.stem).body:
      if not isinstance(node, ast.ClassDef):
        continue
      for decorator in node.decorator_list:
        name = _registered_name(decorator)
        if name is None:
          continue
        if name in found:
          raise ValueError(f"mixer {name!r} registered twice: models/{found[name][0]}.py "
                           f"and models/{path.stem}.py")
        found[name] = (path.stem, node.name)
  return found


def _class_node(module: str, cls: str) -> ast.ClassDef:
  for node in _tree(module).body:
    if isinstance(node, ast.ClassDef) and node.name == cls:
      return node
  raise ValueError(f"models/{module}.py defines no class {cls}")


def _base_location(module: str, base: ast.expr) -> tuple[str, str] | None:
  """Where a base class of models/`module` is defined in models/, or None for a Flax or other
  library class (which adds no mixer field)."""
  if not isinstance(base, ast.Name):
    return None  # nn.Module and the like
  for node in _tree(module).body:
    if isinstance(node, ast.ClassDef) and node.name == base.id:
      return module, base.id
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lra.models."):
      for alias in node.names:
        if (alias.asname or alias.name) == base.id:
          return node.module.rsplit(".", 1)[1], alias.name
  raise ValueError(f"models/{module}.py: base class {base.id} is neither defined in models/ "
                   "nor a library class; the registry cannot read its fields")


def _static_fields(module: str, cls: str) -> dict[str, Any]:
  """The dataclass fields of models/`module`.`cls`, bases first: name -> literal default (or
  _MISSING), read from the source. A default that is not a literal is an error: the registry
  promises the defaults without importing the module."""
  node = _class_node(module, cls)
  fields: dict[str, Any] = {}
  for base in node.bases:
    location = _base_location(module, base)
    if location:
      fields.update(_static_fields(*location))
  for item in node.body:
    if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
      continue
    if "ClassVar" in ast.unparse(item.annotation):
      continue
    name = item.target.id
    if item.value is None:
      fields[name] = _MISSING
      continue
    try:
      fields[name] = ast.literal_eval(item.value)
    except ValueError:
      raise ValueError(f"models/{module}.py: the default of {cls}.{name}, "
                       f"{ast.unparse(item.value)}, is not a literal") from None
  return fields


def _static_constant(module: str, cls: str, attr: str) -> Any:
  """The class constant `attr = <literal>` of models/`module`.`cls`, or of its nearest base
  that sets it, read from the source; _MISSING if none does."""
  node = _class_node(module, cls)
  for item in node.body:
    if isinstance(item, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == attr for t in item.targets):
      return ast.literal_eval(item.value)
  for base in node.bases:
    location = _base_location(module, base)
    value = _static_constant(*location, attr) if location else _MISSING
    if value is not _MISSING:
      return value
  return _MISSING


def _constant(name: str, attr: str, default: Any) -> Any:
  """The class constant `attr` of mixer `name` (models/common.py's Mixer documents each): read
  from the source for a mixer of models/, so nothing is imported; from the class for one
  registered at run time; `default` where none is set."""
  if name in _index():
    value = _static_constant(*_index()[name], attr)
    return default if value is _MISSING else value
  return getattr(get(name), attr, default)


def takes_attention_dropout(name: str) -> bool:
  """Whether mixer `name` has attention weights to drop (its ATTENTION_DROPOUT, models/common.py),
  read without importing it: a config sets attention_dropout_rate 0 for one that has none."""
  return bool(_constant(name, "ATTENTION_DROPOUT", True))


def encoder_settings(name: str) -> dict[str, Any]:
  """The encoder settings mixer `name` needs on every task (its ENCODER_SETTINGS), read
  without importing it."""
  return dict(_constant(name, "ENCODER_SETTINGS", {}))


def gated_residual(name: str) -> bool:
  """Whether mixer `name`'s sub-layer is a gated residual (its GATED_RESIDUAL, models/common.py),
  read without importing it."""
  return bool(_constant(name, "GATED_RESIDUAL", False))


def settings_when(name: str, encoder: Mapping[str, Any]) -> dict[str, Any]:
  """The mixer settings that mixer `name` takes given the encoder settings `encoder` (a
  config.model): those of each of its SETTINGS_WHEN conditions that `encoder` meets."""
  found: dict[str, Any] = {}
  for condition, settings in _constant(name, "SETTINGS_WHEN", ()):
    if all(key in encoder and encoder[key] == value for key, value in condition.items()):
      found.update(settings)
  return found


def names() -> list[str]:
  """Every mixer: those of models/ and those registered at run time."""
  return sorted(set(_index()) | set(_MIXERS))


def in_repository(name: str) -> bool:
  """Whether mixer `name` is one of models/ (and so has the task configs' per-model choices);
  False for one registered at run time (outside code)."""
  return name in _index()


def get(name: str) -> type:
  """The mixer class `name`, importing its module on first use."""
  if name not in _MIXERS and name in _index():
    importlib.import_module(f"lra.models.{_index()[name][0]}")  # its decorator registers it
  if name not in _MIXERS:
    raise SettingError(f"config.model.name={name!r} is not a model; valid models: "
                       f"{', '.join(names())} (a mixer of your own: --import=YOUR_MODULE)")
  return _MIXERS[name]


def _class(mixer: str | type) -> type:
  """The class of `mixer`: a registered name, or a mixer class itself."""
  return mixer if isinstance(mixer, type) else get(mixer)


def _fields(mixer: str | type) -> dict[str, Any]:
  """name -> default (or _MISSING) of every field of `mixer` (a name or a class)."""
  if isinstance(mixer, str) and mixer in _index():  # of models/: read from its source
    return _static_fields(*_index()[mixer])
  return {f.name: (f.default if f.default is not dataclasses.MISSING else _MISSING)
          for f in dataclasses.fields(_class(mixer)) if f.init}


def user_settings(name: str | type) -> list[str]:
  """The settings of mixer `name` that a config may set in `model.attention`."""
  return [k for k in _fields(name) if k not in _NOT_SETTINGS]


def default_settings(name: str) -> dict[str, Any]:
  """The user settings of mixer `name` with their defaults (what a config starts from)."""
  fields = _fields(name)
  return {k: fields[k] for k in user_settings(name) if fields[k] is not _MISSING}


def make_shared(mixer: str | type, settings: dict[str, Any], **encoder_fields: Any):
  """The module whose parameters every block's mixer shares, or None.

  A mixer class may define `make_shared(settings, **encoder_fields)`; the encoder calls this
  inside its own scope, so the module's parameters live once, in the encoder, and each block's
  mixer receives it as its `shared` field.
  """
  hook = getattr(_class(mixer), "make_shared", None)
  return hook(dict(settings), **encoder_fields) if hook else None


def check_settings(mixer: str | type, names) -> None:
  """Raises SettingError if `mixer` is not a model or takes no setting of one of `names`
  (the keys of config.model.attention), listing the settings it takes."""
  valid = user_settings(mixer)  # an unknown mixer: SettingError listing the valid ones
  unknown = sorted(set(names) - set(valid))
  if unknown:
    name = getattr(mixer, "__name__", mixer)  # a class: its own name
    # A near miss (query_chunks for query_chunk) gets the name it was probably meant to be.
    near = [m for u in unknown for m in difflib.get_close_matches(u, valid, n=1)]
    hint = f" (did you mean {', '.join(map(repr, near))}?)" if near else ""
    raise SettingError(
        f"model {name!r} does not take setting(s) {', '.join(unknown)} in "
        f"config.model.attention{hint}; it takes: {', '.join(valid) or 'no settings'}")


def make(mixer: str | type, settings: dict[str, Any], *, length: int | None = None,
         **encoder_fields: Any):
  """Builds `mixer` with the user's `settings` plus the encoder's fields; constructing it
  checks every setting (models/common.py), and with `length` (the longest sequence the mixer
  will see) also the rules that need it. A setting the mixer does not take is an error naming
  the ones it does take."""
  cls = _class(mixer)
  check_settings(mixer, settings)
  declared = {f.name for f in dataclasses.fields(cls)}
  given = {k: v for k, v in encoder_fields.items() if k in declared or k == "name"}
  module = cls(**given, **settings)
  if length is not None and hasattr(module, "check_length"):
    module.check_length(length)
  return module
