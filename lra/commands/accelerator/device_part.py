"""The accelerator run's device parts, each run in its own process by the run
(lra.commands.accelerator.parts), so that the parent never touches the device:

  python -m lra.commands.accelerator.device_part env OUT.json
  python -m lra.commands.accelerator.device_part attention OUT.json [--dry_run]

`env` describes the machine (lra.commands.accelerator.environment); `attention` checks the
Transformer's attention implementations against each other in bfloat16 with padding, and the
ListOps model through the trainer (lra.commands.accelerator.attention). Each writes one JSON
file.
"""
from __future__ import annotations

import argparse
import json

from lra.commands.accelerator import attention, environment


def main(argv=None) -> None:
  p = argparse.ArgumentParser(prog="python -m lra.commands.accelerator.device_part",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("part", choices=("env", "attention"))
  p.add_argument("out", help="the JSON file to write")
  p.add_argument("--dry_run", action="store_true", help="tiny sizes (CPU)")
  args = p.parse_args(argv)
  result = (environment.describe() if args.part == "env"
            else attention.attention_check(args.dry_run))
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1, default=str)
  print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
  main()
