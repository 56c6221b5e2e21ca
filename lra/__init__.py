"""lra: the Long Range Arena in JAX/Flax.

The repository keeps `models/` and `configs/` beside `lra/` (the layout the README shows); they
are imported, and installed, only as `lra.models` and `lra.configs` (setup.py's package_dir,
which `pip install -e .` honours too), so a researcher's own top-level `models` package never
meets ours. lra/locations.py says where the checkout or the installed package is.
"""
