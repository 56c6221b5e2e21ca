"""Flax models: the shared encoder and one file per token mixer, behind one registry."""
from models import attention  # noqa: F401  (registers "transformer")
from models import registry
from models.encoder import Classifier, DualClassifier, Encoder, build

__all__ = ["Classifier", "DualClassifier", "Encoder", "build", "registry"]
