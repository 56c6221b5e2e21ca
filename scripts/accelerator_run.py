"""The prepared accelerator run: one command on a machine with one GPU, done within 9 minutes.

  python scripts/accelerator_run.py --out=accel_out            # the real run (GPU)
  python scripts/accelerator_run.py --out=accel_out --dry_run  # CPU, tiny sizes, ~2 minutes

Writes into --out (8 files): env.json (device, JAX, CUDA and cuDNN as JAX reports them),
attention.json (dense / chunked / cuDNN attention against each other in bfloat16 with padding
at 2,048 and 2,001 tokens, and the ListOps model through the trainer's step with cuDNN against
dense), speed.md and speed.json (`eval.py speed` at 4K, 3K, 2K, 1K tokens, each length's
Transformer first, batch 32, the Text base size, bfloat16, the ratio to the Transformer beside
the paper's Table 2), training.json (the full-scale ListOps Transformer beside the paper's
36.37, ended by its time limit with a test accuracy whatever the step rate, then further cells
as time allows), summary.md (all of it on one page), log.txt (the run's own log) and tails.txt
(the last lines of every part's output: the reason of any failure).

The first part stops the run within seconds, in one line, when JAX has no device of
--platform (cuda unless --dry_run): no minutes are spent on a CPU fallback. Every part checks
the clock before it starts and gets a share of --budget_s; what does not fit is skipped and
named in summary.md. Work (data, checkpoints, speed rows, the compilation cache) goes to
--work: running the same command again keeps what is done, measures the speed cells still
missing and trains cells ended early further. The parent process never touches the device
(each part runs in its own process, as eval.py speed measures each cell).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script: the repository's packages come from its root
  sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

from lra.errors import fail  # noqa: E402  (lra/ itself is importable from the root)

if importlib.util.find_spec("lra.configs") is None:
  fail("the checkout is not installed (lra.configs comes from setup.py's package_dir): run "
       "`python3 -m pip install --no-index --no-deps --no-build-isolation -e .` in it first, as "
       "docs/accelerator.md's command does")

import accel_report  # noqa: E402
import accel_speed  # noqa: E402
import accel_train  # noqa: E402
from lra.errors import UserError, run_command  # noqa: E402

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
TAIL_LINES = 60  # of each part's output, into tails.txt
# JAX's name of the platform -> what its devices report as their platform.
PLATFORMS = {"cuda": "gpu", "rocm": "gpu", "tpu": "tpu", "cpu": "cpu"}


class Run:
  """The clock, the log and the record of each part."""

  def __init__(self, budget_s: float, log_path: str):
    self.start = time.time()
    self.end = self.start + budget_s
    self.parts: list[dict] = []
    self.crashed: list[str] = []
    self.tails: list[tuple[str, list[str]]] = []  # (part, its output's last lines)
    self._log = open(log_path, "w", encoding="utf-8")

  def left(self) -> float:
    return self.end - time.time()

  def log(self, line: str) -> None:
    line = f"[{time.time() - self.start:6.1f} s] {line}"
    print(line, flush=True)
    self._log.write(line + "\n")
    self._log.flush()

  def part(self, name: str, planned: float | None, took: float, outcome: str) -> None:
    self.parts.append({"part": name, "planned_s": planned, "took_s": round(took, 1),
                       "outcome": outcome})

  def tail(self, name: str, lines: list[str]) -> None:
    self.tails.append((name, [line.rstrip("\n") for line in lines][-TAIL_LINES:]))

  def close(self) -> None:
    self._log.close()


def _check_folders(args) -> None:
  """--out must be a folder that is new, empty or holds only this script's files (so it ends
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


def _child(run: Run, name: str, command: list[str], timeout: float, planned: float,
           env: dict) -> bool:
  """One part in its own process; its output's tail goes to the log when it fails."""
  start = time.time()
  if timeout <= 1:
    run.part(name, planned, 0.0, "skipped: no time left")
    run.log(f"{name}: skipped, no time left")
    return False
  try:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)
    ok, outcome = proc.returncode == 0, f"exit code {proc.returncode}"
    output = proc.stdout + proc.stderr
  except subprocess.TimeoutExpired as e:
    ok, outcome = False, f"stopped after {timeout:.0f} s"
    output = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                     for x in (e.stdout, e.stderr))
  run.tail(name, output.strip().splitlines())
  run.part(name, planned, time.time() - start, "done" if ok else f"failed: {outcome}")
  run.log(f"{name}: {'done' if ok else 'FAILED: ' + outcome} ({time.time() - start:.0f} s)")
  if not ok:
    for line in output.strip().splitlines()[-15:]:
      run.log(f"  {name} | {line}")
  return ok


def _read_json(path: str) -> dict | None:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError):
    return None


def _device_part(run: Run, args, plan: dict, name: str) -> dict:
  """env.json or attention.json, from its own process; always written (a failure says so)."""
  script = os.path.join(ROOT, "scripts", "accel_device.py")
  flag = ["--dry_run"] if args.dry_run else []
  path = os.path.join(args.out, f"{name}.json")
  timeout = min({"env": 120.0, "attention": 300.0}[name], run.left() - plan["reserve"])
  if name not in args.parts:
    run.part(name, None, 0.0, "not asked for (--parts)")
    record = {"pass": None, "error": "not asked for (--parts)"}
  elif _child(run, name, [sys.executable, script, name, path, *flag], timeout, plan[name],
              dict(os.environ)):
    record = _read_json(path) or {"pass": False, "error": "unreadable output"}
  else:
    record = {"pass": False, "error": run.parts[-1]["outcome"]}
  record["dry_run"] = args.dry_run
  with open(path, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1, default=str)
  return record


def _no_device(run: Run, env: dict, platform: str) -> str | None:
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


def _speed(run: Run, args) -> dict:
  """Every speed cell still missing, until the end of the budget (less the reserve)."""
  start = time.time()
  deadline = run.end - _plan(args)["reserve"]
  result = accel_speed.run(args.work, args.dry_run, deadline, run.log)
  measured = len(result["rows"])
  run.part("speed", round(deadline - start), time.time() - start,
           f"{measured} cells measured in all, {len(result['skipped'])} not measured")
  return result


def _plan(args) -> dict:
  """PLAN's seconds for this run (real or dry), with --budget_s if given."""
  plan = dict(PLAN["dry" if args.dry_run else "real"])
  if args.budget_s is not None:
    plan["budget"] = args.budget_s
  return plan


def _train(run: Run, args) -> list[dict]:
  start = time.time()
  deadline = run.end - _plan(args)["reserve"] - (
      _plan(args)["speed"] if "speed" in args.parts else 0)
  # A stopped cell's test may take from the speed part's share (a test accuracy is worth more
  # than a few speed cells).
  cells = accel_train.run(args.work, args.dry_run, deadline, run.log, args.fast_attention,
                          test_deadline=run.end - _plan(args)["reserve"])
  done = sum(c["status"] == "finished" for c in cells)
  run.part("training", round(deadline - start), time.time() - start,
           f"{done} of {len(cells)} cells finished")
  return cells


def _guarded(run: Run, name: str, part):
  """part(), or None with its traceback in the log: one broken part (a bug, a driver fault)
  must not lose the results of the others, which the machine's minutes paid for."""
  start = time.time()
  try:
    return part()
  except Exception:  # noqa: BLE001 (recorded with its traceback, and the run exits 1)
    for line in traceback.format_exc().rstrip().splitlines():
      run.log(f"  {name} | {line}")
    run.part(name, None, time.time() - start, "failed with a traceback (log.txt)")
    run.crashed.append(name)
    return None


def _environment(args) -> dict:
  """The children's environment: the repository importable; JAX on --platform only (no
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


def _write_tails(run: Run, args, cells: list[dict], speed_result: dict | None) -> None:
  """tails.txt: the last lines of every part's output (a child's stdout and stderr, each
  training cell's train.log of this run, each failed speed cell), so a failure's reason comes
  back with the files."""
  blocks = list(run.tails)
  for cell in cells:
    if cell.get("tail"):
      blocks.append((f"training {cell['cell']} (train.log)", cell.pop("tail")))
    cell.pop("tail", None)
  for row in (speed_result or {}).get("rows", []):
    if row.get("output_tail"):
      blocks.append((f"speed {row['model']} @ {row['length']}", row["output_tail"]))
  text = "".join(f"===== {name}: the last {len(lines)} lines =====\n" + "\n".join(lines) + "\n\n"
                 for name, lines in blocks)
  with open(os.path.join(args.out, "tails.txt"), "w", encoding="utf-8") as f:
    f.write(text or "No part printed anything.\n")


def _write_outputs(args, run: Run, env, att, speed_result, cells) -> None:
  _write_tails(run, args, cells, speed_result)
  speed_text = accel_speed.write(speed_result, args.out) if speed_result else None
  with open(os.path.join(args.out, "training.json"), "w", encoding="utf-8") as f:
    f.write(accel_report.training_json(args.dry_run, cells))
  command = "python scripts/accelerator_run.py " + shlex.join(sys.argv[1:])
  text = accel_report.summary(args.dry_run, env, att, speed_text,
                              speed_result["skipped"] if speed_result else [], cells, run.parts,
                              _plan(args)["budget"], time.time() - run.start, command)
  with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
    f.write(text)


def _main(args) -> None:
  """The parts in order: env (which stops the run if JAX has no --platform device),
  attention, training (until the speed part's share is left), speed (the rest); the files at
  the end."""
  _check_folders(args)
  plan = _plan(args)
  os.makedirs(args.out, exist_ok=True)
  for name in FILES:  # no file of an earlier run may pass for this run's
    if os.path.exists(os.path.join(args.out, name)):
      os.remove(os.path.join(args.out, name))
  temporary = args.work is None and args.dry_run
  if args.work is None:
    args.work = (tempfile.mkdtemp(prefix="lra_accel_dry_") if args.dry_run
                 else os.path.join(ROOT, "runs", "accelerator"))
  args.work = os.path.abspath(args.work)
  os.makedirs(args.work, exist_ok=True)
  run = Run(plan["budget"], os.path.join(args.out, "log.txt"))
  os.environ.update(_environment(args))  # the speed cells inherit it through eval.py's code
  try:
    run.log(f"accelerator run{' (DRY RUN)' if args.dry_run else ''}: budget "
            f"{plan['budget']} s, platform {args.platform}, work in {args.work}, results in "
            f"{args.out}" + (f"; {accel_train.fast_attention(args.dry_run)[1]} for the ListOps "
                             f"Transformer" if args.fast_attention else ""))
    args.parts = list(dict.fromkeys(["env", *args.parts]))  # the device check always runs
    env = _device_part(run, args, plan, "env")
    stop = _no_device(run, env, args.platform)
    if stop:
      run.log(f"stopped: {stop}")
      _write_outputs(args, run, env, {"pass": None, "error": "not run: no device"}, None,
                     accel_train.status(args.work, args.dry_run, args.fast_attention))
      raise UserError(stop)
    att = _device_part(run, args, plan, "attention")
    cells = (_guarded(run, "training", lambda: _train(run, args)) or []
             if "training" in args.parts else
             accel_train.status(args.work, args.dry_run, args.fast_attention))
    speed_result = (_guarded(run, "speed", lambda: _speed(run, args))
                    if "speed" in args.parts else None)
    _write_outputs(args, run, env, att, speed_result, cells)
    run.log(f"done in {time.time() - run.start:.0f} s; wrote "
            f"{', '.join(sorted(os.listdir(args.out)))} to {args.out}")
    if run.crashed:
      raise UserError(f"the {' and '.join(run.crashed)} part failed with a traceback (in "
                      f"{os.path.join(args.out, 'log.txt')}); the other results are written")
  finally:
    run.close()
    if temporary:
      shutil.rmtree(args.work, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python scripts/accelerator_run.py", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", required=True, help="folder for the result files (at most 8)")
  p.add_argument("--dry_run", action="store_true",
                 help="CPU, tiny sizes, the same code path: under 2 minutes")
  p.add_argument("--work", default=None,
                 help="data, checkpoints and speed rows; a rerun with the same folder "
                      "continues (default runs/accelerator; a dry run: a temporary folder)")
  p.add_argument("--parts", default=",".join(PARTS), type=lambda t: [x for x in t.split(",")
                                                                      if x],
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


if __name__ == "__main__":
  main()
