"""The accuracy, speed and memory tables, and the charts: `python eval.py --help`.

The command lives in lra/eval.py (installed: `python -m lra.eval`); this file runs it from a
checkout.
"""
from lra.eval import main

if __name__ == "__main__":
  main()
