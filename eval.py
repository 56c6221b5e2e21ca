"""The accuracy, speed and memory tables, and the charts: `python eval.py --help`.

The command lives in lra/commands/eval.py (installed: `python -m lra.commands.eval`); this file runs it from a
checkout.
"""
from lra.cli import require_packages

require_packages()  # outside the venv: one line naming the install command
from lra.commands.eval import main  # noqa: E402

if __name__ == "__main__":
  main()
