"""The registry of token mixers (attention variants) by name.

Adding a variant means one new file in models/mixers/ whose Mixer subclass (models/common.py,
which declares the whole mixer interface) is decorated with `@register("name")` (or
`@registry.register("name")`), and one test file. The first lookup imports every module of
models/mixers/ (about 1.2 s more than reading them, measured in docs/results.md: a config's
load is not worth a second copy of dataclass reading); each decorator registers its class. A
mixer registered at run time (outside code that a command's `--import` loads, or a test's) is
looked up the same way; `make`, `make_shared` and `user_settings` also take an unregistered
mixer class (lra.testing.check_mixer checks one).
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import pathlib
import pkgutil
from typing import Any, Callable, Mapping

from lra import rules
from lra.rules import SettingError

_MIXERS: dict[str, type] = {}  # every registered class, by name
_BUILT_IN = "lra.models.mixers."  # the module prefix of the mixers of models/mixers/
_loaded = False  # whether every module of models/mixers/ has been imported

_MISSING = object()


def _load_built_in() -> None:
  """Imports every module of models/mixers/ once, so that each built-in mixer is registered."""
  global _loaded
  if not _loaded:
    _loaded = True
    for module in pkgutil.iter_modules([str(pathlib.Path(__file__).parent / "mixers")]):
      importlib.import_module(_BUILT_IN + module.name)


def register(name: str) -> Callable[[type], type]:
  """Class decorator: makes a mixer (a Mixer subclass) available under `name`. A class that is
  no Mixer, or a name already taken, is a one-line error (the latter naming the module that
  has it: outside code learns every built-in name)."""

  def wrap(cls: type) -> type:
    _mixer_class(cls)
    if not cls.__module__.startswith(_BUILT_IN):
      _load_built_in()
    if name in _MIXERS:
      owner = _MIXERS[name].__module__
      where = (f"models/mixers/{owner[len(_BUILT_IN):]}.py" if owner.startswith(_BUILT_IN)
               else owner)
      raise SettingError(f"{cls.__module__} registers mixer {name!r}, a name {where} already "
                         f"has; register yours under another name, e.g. "
                         f"@register({'my_' + name!r})")
    _MIXERS[name] = cls
    return cls

  return wrap


def _mixer() -> type:
  """models/common.py's Mixer, which declares the interface of every mixer (imported when
  first needed: importing the registry imports no JAX)."""
  from lra.models.common import Mixer
  return Mixer


def _mixer_class(cls: type) -> type:
  """`cls` if it is a Mixer (whose interface the registry and the encoder use), else a
  one-line error."""
  if not (isinstance(cls, type) and issubclass(cls, _mixer())):
    name = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__name__', cls)}"
    raise SettingError(f"{name} is no mixer: subclass lra.models.common.Mixer (or "
                       "HeadsMixer), which declares the interface every mixer has")
  return cls


def takes_attention_dropout(name: str) -> bool:
  """Whether mixer `name` has attention weights to drop (its ATTENTION_DROPOUT, models/common.py):
  a config sets attention_dropout_rate 0 for one that has none."""
  return bool(get(name).ATTENTION_DROPOUT)


def encoder_settings(name: str) -> dict[str, Any]:
  """The encoder settings mixer `name` needs on every task (its ENCODER_SETTINGS)."""
  return dict(get(name).ENCODER_SETTINGS)


def settings_when(name: str, encoder: Mapping[str, Any]) -> dict[str, Any]:
  """The mixer settings that mixer `name` takes given the encoder settings `encoder` (a
  config.model): those of each of its SETTINGS_WHEN conditions that `encoder` meets."""
  found: dict[str, Any] = {}
  for condition, settings in get(name).SETTINGS_WHEN:
    if all(key in encoder and encoder[key] == value for key, value in condition.items()):
      found.update(settings)
  return found


def takes_rotary(name: str) -> bool:
  """Whether mixer `name` has queries and keys that positions="rotary" can rotate (its
  `rotary` field, models/common.py HeadsMixer)."""
  return "rotary" in {f.name for f in dataclasses.fields(get(name))}


def names() -> list[str]:
  """Every mixer: those of models/mixers/ and those registered at run time."""
  _load_built_in()
  return sorted(_MIXERS)


def in_repository(name: str) -> bool:
  """Whether mixer `name` is one of models/mixers/ (and so has the task configs' per-model choices);
  False for one registered at run time (outside code)."""
  _load_built_in()
  return name in _MIXERS and _MIXERS[name].__module__.startswith(_BUILT_IN)


def get(name: str) -> type:
  """The mixer class `name`."""
  _load_built_in()
  if name not in _MIXERS:
    raise SettingError(f"config.model.name={name!r} is not a model"
                       f"{rules.did_you_mean(name, names())}; valid models: "
                       f"{', '.join(names())} (a mixer of your own: --import=YOUR_MODULE)")
  return _MIXERS[name]


def _class(mixer: str | type) -> type:
  """The class of `mixer`: a registered name, or a mixer class itself."""
  return _mixer_class(mixer) if isinstance(mixer, type) else get(mixer)


def _fields(mixer: str | type) -> dict[str, Any]:
  """name -> default (or _MISSING) of every field of `mixer` (a name or a class)."""
  return {f.name: (f.default if f.default is not dataclasses.MISSING else _MISSING)
          for f in dataclasses.fields(_class(mixer)) if f.init}


def user_settings(name: str | type) -> list[str]:
  """The settings of mixer `name` that a config may set in `model.attention`."""
  not_settings = {*_mixer().ENCODER_FIELDS, "parent", "name"}  # the encoder fills them
  return [k for k in _fields(name) if k not in not_settings]


def unruled_settings(name: str | type) -> list[str]:
  """The user settings of mixer `name` declared without a rule (Mixer.setting_rules): any
  value of them trains unchecked (every mixer of models/mixers/ has a rule for each)."""
  ruled = _class(name).setting_rules()
  return [k for k in user_settings(name) if k not in ruled]


def default_settings(name: str) -> dict[str, Any]:
  """The user settings of mixer `name` with their defaults (what a config starts from)."""
  fields = _fields(name)
  return {k: fields[k] for k in user_settings(name) if fields[k] is not _MISSING}


def make_shared(mixer: str | type, settings: dict[str, Any], **encoder_fields: Any):
  """The module whose parameters every block's mixer shares, or None: the mixer's
  `make_shared` hook (models/common.py). The encoder calls this inside its own scope, so the
  module's parameters live once, in the encoder, and each block's mixer receives it as its
  `shared` field.
  """
  return _class(mixer).make_shared(dict(settings), **encoder_fields)


def check_settings(mixer: str | type, names) -> None:
  """Raises SettingError if `mixer` is not a model or takes no setting of one of `names`
  (the keys of config.model.attention), listing the settings it takes; a renamed setting's old
  name (the mixer's RENAMED_SETTINGS) gets a line naming its new one."""
  valid = user_settings(mixer)  # an unknown mixer: SettingError listing the valid ones
  unknown = sorted(set(names) - set(valid))
  renamed = _class(mixer).RENAMED_SETTINGS
  for old in unknown:
    if old in renamed:
      raise SettingError(f"config.model.attention.{old} was renamed: set "
                         f"config.model.attention.{renamed[old]} instead")
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
  if length is not None:
    module.check_length(length)
  return module
