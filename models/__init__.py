"""Flax models: the shared encoder and one file per token mixer, behind one registry.

Importing this package imports neither JAX nor any mixer: the registry imports the mixers
when it is first asked for a name, and the encoder's names below load models/encoder.py (and
Flax) on first use.
"""
import importlib

from lra.models import registry

_ENCODER_NAMES = ("Classifier", "Denoiser", "DualClassifier", "Encoder", "build",
                  "idle_settings")
__all__ = [*_ENCODER_NAMES, "registry"]


def __getattr__(name: str):
  if name in _ENCODER_NAMES:
    return getattr(importlib.import_module(f"{__name__}.encoder"), name)
  raise AttributeError(f"module 'lra.models' has no attribute {name!r}")
