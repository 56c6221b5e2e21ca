"""Train and test one model on one LRA task.

  python train.py --config=configs/listops.py:transformer,cpu --workdir=runs/listops_cpu

Overrides: --config.model.num_layers=2 (a key the config lacks is an error). Running the same
command again resumes from the last checkpoint in --workdir. The command lives in lra/commands/train.py
(installed: `python -m lra.commands.train`); this file runs it from a checkout.
"""
from lra.cli import require_packages

require_packages()  # outside the venv: one line naming the install command
from lra.commands.train import run  # noqa: E402

if __name__ == "__main__":
  run()
