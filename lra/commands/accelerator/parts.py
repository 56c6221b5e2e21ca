"""The accelerator run's parts under its plan: the folders checked first, the children's
environment, the device parts (env, attention) in their own processes, the stop when JAX has
no device of the platform, and the training and speed parts until their deadlines."""
from __future__ import annotations

import json
import os
import sys
import time

from lra.commands.accelerator import speed_cells, training_cells
from lra.commands.accelerator.clock import Run, child
from lra.errors import UserError
from lra.locations import PACKAGE_ROOT as ROOT  # the checkout

PARTS = ("env", "attention", "training", "speed")
FILES = ("env.json", "attention.json", "speed.md", "speed.json", "training.json",
         "summary.md", "log.txt", "tails.txt")
# Seconds per part: the plan for one H200 (estimates; docs/accelerator.md gives the reasons)
# and for the dry run on a 2-core CPU. Training runs after env and attention until `speed`
# seconds (plus `reserve`, for writing the files) are left; speed then gets the rest.
PLAN = {
    "real": dict(budget=540, env=20, attention=100, speed=120, reserve=10),
    # The dry run's speed share holds its three cells at 128 tokens on a loaded 2-core CI machine
    # (about 24 s a measured cell there, 7 s the OOM one).
    "dry": dict(budget=190, env=20, attention=40, speed=80, reserve=3),
}
# JAX's name of the platform -> what its devices report as their platform.
PLATFORMS = {"cuda": "gpu", "rocm": "gpu", "tpu": "tpu", "cpu": "cpu"}
DEVICE_PART = "lra.commands.accelerator.device_part"  # the env and attention parts' module


def check_folders(args) -> None:
  """--out must be a folder that is new, empty or holds only this run's files (so it ends
  with at most 8); --work must not be a file. Checked before anything runs."""
  if os.path.exists(args.out) and not os.path.isdir(args.out):
    raise UserError(f"--out={args.out} is a file, not a folder; name a folder for the results")
  if os.path.isdir(args.out):
    other = sorted(set(os.listdir(args.out)) - set(FILES))
    if other:
      raise UserError(f"--out={args.out} holds other files ({', '.join(other[:3])}); name a "
                      f"new or empty folder (at most {len(FILES)} files are written there)")
  if args.work and os.path.exists(args.work) and not os.path.isdir(args.work):
    raise UserError(f"--work={args.work} is a file, not a folder")
  unknown = set(args.parts) - set(PARTS)
  if unknown or not args.parts:
    raise UserError(f"--parts={','.join(args.parts)}: choose from {','.join(PARTS)}")
  if args.budget_s is not None and args.budget_s <= 0:
    raise UserError(f"--budget_s={args.budget_s} must be positive")
  if args.platform not in PLATFORMS:
    raise UserError(f"--platform={args.platform}: choose from {', '.join(PLATFORMS)}")


def plan(args) -> dict:
  """PLAN's seconds for this run (real or dry), with --budget_s if given."""
  seconds = dict(PLAN["dry" if args.dry_run else "real"])
  if args.budget_s is not None:
    seconds["budget"] = args.budget_s
  return seconds


def environment(args) -> dict:
  """The children's environment: the checkout importable; JAX on --platform only (no
  silent fallback to the CPU); the compilation cache in --work, shared by every part and cell
  (a rerun compiles less); on a GPU, 95% of its memory for XLA (the 4K dense baseline needs
  it); on a dry run, XLA's cheapest compile (no figure of a dry run means anything)."""
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "JAX_PLATFORMS": args.platform,
         "JAX_COMPILATION_CACHE_DIR": os.path.join(args.work, "jax_cache")}
  if args.dry_run:
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                        " --xla_llvm_disable_expensive_passes=true").strip()
  else:
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
  return env


def _read_json(path: str) -> dict | None:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError):
    return None


def device_part(run: Run, args, name: str) -> dict:
  """env.json or attention.json, from its own process; always written (a failure says so)."""
  flag = ["--dry_run"] if args.dry_run else []
  path = os.path.join(args.out, f"{name}.json")
  timeout = min({"env": 120.0, "attention": 300.0}[name], run.left() - plan(args)["reserve"])
  if name not in args.parts:
    run.part(name, None, 0.0, "not asked for (--parts)")
    record = {"pass": None, "error": "not asked for (--parts)"}
  elif child(run, name, [sys.executable, "-m", DEVICE_PART, name, path, *flag], timeout,
             plan(args)[name], dict(os.environ)):
    record = _read_json(path) or {"pass": False, "error": "unreadable output"}
  else:
    record = {"pass": False, "error": run.parts[-1]["outcome"]}
  record["dry_run"] = args.dry_run
  with open(path, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1, default=str)
  return record


def no_device(run: Run, env: dict, platform: str) -> str | None:
  """Why the run must stop now (JAX found no device of `platform`), or None."""
  if env.get("platform") == PLATFORMS[platform]:
    return None
  if "platform" in env:
    found = f"its device is {env.get('device_kind')} (platform {env['platform']})"
  else:
    output = [line for line in dict(run.tails).get("env", []) if line.strip()]
    found = f"it says: {output[-1].strip()[:300]}" if output else "it printed nothing"
  return (f"JAX has no {platform} device here ({found}); stopped before spending the budget "
          f"elsewhere. Check the plugin with: JAX_PLATFORMS={platform} python3 -c 'import "
          f"jax; print(jax.devices())' (the tail of its output is in tails.txt)")


def speed(run: Run, args) -> dict:
  """Every speed cell still missing, until the end of the budget (less the reserve)."""
  start = time.time()
  deadline = run.end - plan(args)["reserve"]
  result = speed_cells.run(args.work, args.dry_run, deadline, run.log)
  measured = len(result["rows"])
  run.part("speed", round(deadline - start), time.time() - start,
           f"{measured} cells measured in all, {len(result['skipped'])} not measured")
  return result


def training(run: Run, args) -> list[dict]:
  """The training cells until the speed part's share (and the reserve) is left."""
  start = time.time()
  deadline = run.end - plan(args)["reserve"] - (
      plan(args)["speed"] if "speed" in args.parts else 0)
  # A stopped cell's test may take from the speed part's share (a test accuracy is worth more
  # than a few speed cells).
  cells = training_cells.run(args.work, args.dry_run, deadline, run.log, args.fast_attention,
                             test_deadline=run.end - plan(args)["reserve"])
  done = sum(c["status"] == "finished" for c in cells)
  run.part("training", round(deadline - start), time.time() - start,
           f"{done} of {len(cells)} cells finished")
  return cells
