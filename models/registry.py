"""The registry of token mixers (attention variants) by name.

Adding a variant means one new file in models/ that decorates its Flax module with
`@register("name")`, one import line in models/__init__.py, and one test file.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn

_MIXERS: dict[str, type[nn.Module]] = {}


class UnknownSettingError(ValueError):
  """A model name or mixer setting that does not exist (a user error, not a bug)."""


def register(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
  """Class decorator: makes a mixer module available under `name`."""

  def wrap(cls: type[nn.Module]) -> type[nn.Module]:
    if name in _MIXERS:
      raise ValueError(f"mixer {name!r} registered twice")
    _MIXERS[name] = cls
    return cls

  return wrap


def names() -> list[str]:
  return sorted(_MIXERS)


# Fields the encoder fills in (a mixer declares the ones it needs); the user sets the others.
ENCODER_FIELDS = ("num_heads", "qkv_dim", "dropout_rate", "dtype", "layer_index", "shared")


def user_settings(name: str) -> list[str]:
  """The settings of mixer `name` that a config may set in `model.attention`."""
  cls = get(name)
  skip = set(ENCODER_FIELDS) | {"parent", "name"}
  return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in skip]


def default_settings(name: str) -> dict[str, Any]:
  """The user settings of mixer `name` with their defaults (what a config starts from)."""
  fields = {f.name: f for f in dataclasses.fields(get(name))}
  return {k: fields[k].default for k in user_settings(name)
          if fields[k].default is not dataclasses.MISSING}


def encoder_defaults(name: str) -> dict[str, Any]:
  """Encoder settings a mixer needs changed from the base ones (e.g. no absolute positions)."""
  return dict(getattr(get(name), "ENCODER_DEFAULTS", {}))


def make_shared(mixer: str, settings: dict[str, Any], **encoder_fields: Any):
  """The module whose parameters every block's mixer shares, or None.

  A mixer class may define `make_shared(settings, **encoder_fields)`; the encoder calls this
  inside its own scope, so the module's parameters live once, in the encoder, and each block's
  mixer receives it as its `shared` field.
  """
  hook = getattr(get(mixer), "make_shared", None)
  return hook(dict(settings), **encoder_fields) if hook else None


def get(name: str) -> type[nn.Module]:
  if name not in _MIXERS:
    raise UnknownSettingError(
        f"unknown model {name!r}; valid models: {', '.join(names())}")
  return _MIXERS[name]


def make(mixer: str, settings: dict[str, Any], **encoder_fields: Any) -> nn.Module:
  """Builds `mixer` with the user's `settings` plus the encoder's fields.

  A setting the mixer does not take is an error naming the ones it does take.
  """
  cls = get(mixer)
  valid = user_settings(mixer)
  unknown = sorted(set(settings) - set(valid))
  if unknown:
    raise UnknownSettingError(
        f"model {mixer!r} does not take setting(s) {', '.join(unknown)} in "
        f"config.model.attention; it takes: {', '.join(valid) or 'no settings'}")
  declared = {f.name for f in dataclasses.fields(cls)}
  given = {k: v for k, v in encoder_fields.items() if k in declared or k == "name"}
  return cls(**given, **settings)
