"""Flax models: the shared encoder and one file per token mixer, behind one registry."""
# Each import registers its mixer by name.
from models import attention  # noqa: F401  "transformer"
from models import bigbird  # noqa: F401  "bigbird"
from models import fnet  # noqa: F401  "fnet"
from models import linear_transformer  # noqa: F401  "linear_transformer"
from models import linformer  # noqa: F401  "linformer"
from models import local  # noqa: F401  "local"
from models import longformer  # noqa: F401  "longformer"
from models import lru  # noqa: F401  "lru"
from models import nystromformer  # noqa: F401  "nystromformer"
from models import performer  # noqa: F401  "performer"
from models import reformer  # noqa: F401  "reformer"
from models import s4d  # noqa: F401  "s4d"
from models import s5  # noqa: F401  "s5"
from models import sinkhorn  # noqa: F401  "sinkhorn"
from models import sparse_transformer  # noqa: F401  "sparse_transformer"
from models import synthesizer  # noqa: F401  "synthesizer"
from models import transformer_xl  # noqa: F401  "transformer_xl"
from models import registry
from models.encoder import Classifier, DualClassifier, Encoder, build

__all__ = ["Classifier", "DualClassifier", "Encoder", "build", "registry"]
