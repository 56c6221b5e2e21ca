"""The accuracy, speed and memory tables, and the charts: `python eval.py --help`.

The command lives in lra/commands/eval.py (installed: `python -m lra.commands.eval`); this file runs it from a
checkout.
"""
from lra.commands.eval import main

if __name__ == "__main__":
  main()
