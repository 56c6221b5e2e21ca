"""Where the code runs from: a checkout (configs/ beside lra/) or an installed wheel (configs/
inside lra/). setup.py's package_dir maps lra.configs to the folder, for a wheel and for an
editable install alike; the import system says which folder it is."""
import importlib.util
import os

_LRA = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.find_spec("lra.configs")
if _SPEC is None:  # a checkout run without installing it: lra.configs has no folder yet
  raise ImportError("lra.configs is not importable: install the checkout first "
                    "(pip install -e . -c constraints.txt, as the README's first command does)")
# The checkout's root (setup.py, train.py, configs/), or the installed package's own folder.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(_SPEC.origin)))
INSTALLED = PACKAGE_ROOT == _LRA  # a wheel, not a checkout
