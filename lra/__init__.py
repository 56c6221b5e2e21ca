"""lra: the Long Range Arena in JAX/Flax.

The repository keeps `models/` and `configs/` beside `lra/` (the layout the README shows); they
are imported, and installed, only as `lra.models` and `lra.configs`, so a researcher's own
top-level `models` package never meets ours. An installed wheel has them inside lra/ (setup.py's
package_dir); in a checkout the repository root is searched after lra/ itself.
"""
import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_ROOT = _os.path.dirname(_HERE)
if (not _os.path.isdir(_os.path.join(_HERE, "models"))
    and _os.path.isfile(_os.path.join(_ROOT, "models", "__init__.py"))):
  __path__.append(_ROOT)  # lra.models -> ROOT/models, lra.configs -> ROOT/configs

# Where the configs, train.py's module and the models live: the checkout or the installed package.
INSTALLED = _os.path.isdir(_os.path.join(_HERE, "configs"))  # a wheel, not a checkout
PACKAGE_ROOT = _HERE if INSTALLED else _ROOT
