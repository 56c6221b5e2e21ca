"""The accelerator run's command line (`python -m lra.commands.accelerator`) and its parts in
order: env, attention, training, speed, then the files."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time

import lra.commands.accelerator as accelerator
from lra.commands.accelerator import parts, report, training_cells
from lra.commands.accelerator.clock import Run, guarded
from lra.errors import UserError, run_command
from lra.locations import INSTALLED, PACKAGE_ROOT as ROOT

PROG = "python -m lra.commands.accelerator"


def _fresh_folders(args) -> bool:
  """--out emptied of an earlier run's files (none may pass for this run's), --work made
  (default runs/accelerator; a dry run's: a temporary folder); True where --work is temporary."""
  os.makedirs(args.out, exist_ok=True)
  for name in parts.FILES:
    if os.path.exists(os.path.join(args.out, name)):
      os.remove(os.path.join(args.out, name))
  temporary = args.work is None and args.dry_run
  if args.work is None:
    args.work = (tempfile.mkdtemp(prefix="lra_accel_dry_") if args.dry_run
                 else os.path.join(ROOT, "runs", "accelerator"))
  args.work = os.path.abspath(args.work)
  os.makedirs(args.work, exist_ok=True)
  return temporary


def _parts(run: Run, args) -> None:
  """The parts in order: env (which stops the run if JAX has no --platform device),
  attention, training (until the speed part's share is left), speed (the rest); the files at
  the end."""
  command = f"{PROG} " + shlex.join(sys.argv[1:])
  budget = parts.plan(args)["budget"]
  args.parts = list(dict.fromkeys(["env", *args.parts]))  # the device check always runs
  env = parts.device_part(run, args, "env")
  stop = parts.no_device(run, env, args.platform)
  if stop:
    run.log(f"stopped: {stop}")
    report.write(args, run, env, {"pass": None, "error": "not run: no device"}, None,
                 training_cells.status(args.work, args.dry_run, args.fast_attention), budget,
                 command)
    raise UserError(stop)
  att = parts.device_part(run, args, "attention")
  cells = (guarded(run, "training", lambda: parts.training(run, args)) or []
           if "training" in args.parts else
           training_cells.status(args.work, args.dry_run, args.fast_attention))
  speed_result = (guarded(run, "speed", lambda: parts.speed(run, args))
                  if "speed" in args.parts else None)
  report.write(args, run, env, att, speed_result, cells, budget, command)
  run.log(f"done in {time.time() - run.start:.0f} s; wrote "
          f"{', '.join(sorted(os.listdir(args.out)))} to {args.out}")
  if run.crashed:
    raise UserError(f"the {' and '.join(run.crashed)} part failed with a traceback (in "
                    f"{os.path.join(args.out, 'log.txt')}); the other results are written")


def _main(args) -> None:
  """The folders checked, then the parts under the run's clock and log."""
  if INSTALLED:
    raise UserError("the accelerator run needs a checkout (its train.py, and tests/ for the "
                    "dry run): run it in the repository root after `pip install -e .`")
  parts.check_folders(args)
  temporary = _fresh_folders(args)
  run = Run(parts.plan(args)["budget"], os.path.join(args.out, "log.txt"))
  os.environ.update(parts.environment(args))  # the speed cells inherit it through eval.py's code
  try:
    run.log(f"accelerator run{' (DRY RUN)' if args.dry_run else ''}: budget "
            f"{parts.plan(args)['budget']} s, platform {args.platform}, work in {args.work}, "
            f"results in {args.out}"
            + (f"; {training_cells.fast_attention(args.dry_run)[1]} for the ListOps "
               f"Transformer" if args.fast_attention else ""))
    _parts(run, args)
  finally:
    run.close()
    if temporary:
      shutil.rmtree(args.work, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog=PROG, description=accelerator.__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", required=True, help="folder for the result files (at most 8)")
  p.add_argument("--dry_run", action="store_true",
                 help="CPU, tiny sizes, the same code path: under 2 minutes")
  p.add_argument("--work", default=None,
                 help="data, checkpoints and speed rows; a rerun with the same folder "
                      "continues (default runs/accelerator; a dry run: a temporary folder)")
  p.add_argument("--parts", default=",".join(parts.PARTS),
                 type=lambda t: [x for x in t.split(",") if x],
                 help="which parts, comma separated (default all), e.g. --parts=speed to give "
                      "the whole budget to the speed cells still missing")
  p.add_argument("--budget_s", type=float, default=None,
                 help="seconds for the whole run (default 540; dry run 190)")
  p.add_argument("--platform", default=None,
                 help="the JAX platform the run must find (JAX_PLATFORMS for every part): "
                      "cuda (default), rocm, tpu; cpu for --dry_run (its default)")
  p.add_argument("--fast_attention", action="store_true",
                 help="the ListOps Transformer with cuDNN's fused attention and no attention "
                      "dropout (recorded as a deviation from the paper's setup)")
  return p


def main(argv=None) -> None:
  args = parser().parse_args(argv)
  if args.platform is None:
    args.platform = "cpu" if args.dry_run else "cuda"
  run_command(_main, args)  # a bad --out or --work: one line, exit 1
