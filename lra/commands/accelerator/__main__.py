"""`python -m lra.commands.accelerator --out=DIR [--dry_run]`: the prepared accelerator run
(lra.commands.accelerator.command)."""
import importlib.util

from lra.errors import fail

if importlib.util.find_spec("lra.configs") is None:  # before anything imports the configs
  fail("the checkout is not installed (lra.configs comes from setup.py's package_dir): run "
       "`python3 -m pip install --no-index --no-deps --no-build-isolation -e .` in it first, as "
       "docs/accelerator.md's command does")

from lra.commands.accelerator import command  # noqa: E402

command.main()
