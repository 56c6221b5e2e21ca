"""The speed and memory runs of `eval.py speed`: the Text config of each (model, length), measured
one per fresh process so that no model's peak memory counts for another, in interleaved rounds
(`measure_rounds`) so that a slow spell of a shared machine falls on every model alike.

The setup of the paper's Table 2: the Text task (random bytes), the Text base model by default,
batch 32, lengths 1K-4K. `python -m lra.commands.measuring --one ...` is the child process that measures
one (model, length) with lra.reporting.benchmark and prints one JSON line; `--machine` describes
the device and its matmul peak. A command, so it loads configs/ (the library does not).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Callable, Iterator

from lra.configs import table, text
from lra import cli, plugins
from lra.errors import UserError
from lra.commands import grid_plan
from lra.reporting import benchmark, rounds

# The Text base model of the original repository (configs/table.py).
TEXT_BASE_SIZE = dict(table.SIZES["text"]["base"])
# The repository root: the measuring child runs there (configs/ is imported from it).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = "lra.commands.measuring"  # this module, as `python -m` runs it


def measured_config(model: str, length: int, batch: int, size: dict[str, int], dtype: str,
                    sets: dict[str, str] | None = None):
  """The Text config that the child times (eval.py builds it first to check the settings);
  `sets` overrides config.model fields after `size` ({"reversible": "True"}: the command
  line's text, read by lra.cli.set_value as train.py reads it). `model` may be a grid alias
  (lra.commands.grid_plan.ALIASES, e.g. mega_chunk): its mixer with its Text settings."""
  mixer, extra = grid_plan.alias_settings(model, "text")
  c = text.get_config(mixer)
  c.data.max_len = length
  c.batch_size = c.eval_batch_size = batch
  c.model.dtype = dtype
  for key, value in size.items():
    c.model[key] = value
  for key, value in extra:  # an alias's settings, then the command line's
    cli.set_value(c, key, value)
  for key, value in (sets or {}).items():
    cli.set_value(c, f"model.{key}", value)
  return c


def model_sets(items: list[tuple[str | None, str, str]]) -> dict[str, str]:
  """--config.model.KEY=VALUE overrides (lra.cli) -> {KEY: its text} for `measured_config`:
  the lengths, batch and dtype have their own flags, so only config.model fields are taken."""
  sets = {key: value for _, key, value in items}
  other = [key for key in sets if not key.startswith("model.")]
  if other:
    raise UserError(f"{cli.PREFIX}{other[0]}: eval.py speed takes config.model settings "
                    f"(--config.model.KEY=VALUE); the length, batch and dtype have their flags "
                    f"(--lengths, --batch, --dtype)")
  if "model.name" in sets:
    raise UserError(f"{cli.PREFIX}model.name=...: choose the models with --models")
  return {key.removeprefix("model."): value for key, value in sets.items()}


def run_in_fresh_process(model: str, length: int, batch: int, size: dict[str, int],
                         dtype: str, repeats: int, timeout_s: float,
                         imports: tuple[str, ...] = (),
                         sets: dict[str, str] | None = None,
                         compile_cache: str | None = None) -> dict[str, Any]:
  """One (model, length) per process, so no model's peak memory counts for another;
  `compile_cache` a JAX persistent compilation cache folder that the child uses."""
  command = [sys.executable, "-m", _CHILD, "--one", "--model", model,
             "--length", str(length), "--batch", str(batch), "--dtype", dtype,
             "--repeats", str(repeats), "--size", json.dumps(size)]
  command += [f"--import={module}" for module in imports]  # as plugins.portable gives them
  command += [f"{cli.PREFIX}model.{key}={value}" for key, value in (sets or {}).items()]
  env = plugins.child_environment()  # the modules are the flags; the caller's folder searched
  env["PYTHONPATH"] = _ROOT + os.pathsep + env["PYTHONPATH"]
  if compile_cache:
    env["JAX_COMPILATION_CACHE_DIR"] = compile_cache
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # a small model's too
  try:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=_ROOT)
  except subprocess.TimeoutExpired:
    return benchmark.failure(model, length, batch, f"timed out after {timeout_s:.0f} s")
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode == 0 and lines:
    return json.loads(lines[-1])
  if proc.returncode in (-9, 137):  # killed, on a CPU host most likely by the OOM killer
    return benchmark.failure(model, length, batch, "OOM (process killed)")
  return benchmark.failure(model, length, batch, proc.stderr or f"exit code {proc.returncode}",
                           proc.stdout + proc.stderr)


@contextlib.contextmanager
def compile_cache() -> Iterator[str]:
  """The JAX persistent compilation cache folder for a speed run's children: the one
  JAX_COMPILATION_CACHE_DIR names, else a fresh one removed at the end. A cell's later rounds
  load its compiled step from it instead of compiling again (compiling is never timed)."""
  given = os.environ.get("JAX_COMPILATION_CACHE_DIR")
  if given:
    yield given
    return
  folder = tempfile.mkdtemp(prefix="lra_speed_cache_")
  try:
    yield folder
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def measure_rounds(cells: list[tuple[str, int]], count: int,
                   measure_one: Callable[[str, int], dict],
                   report: Callable[[int, dict], None] | None = None) -> list[dict]:
  """Times every (model, length) of `cells` once per round, in turn: round 1 measures each
  cell, then round 2 each again, and so on (round-robin), so that a slow spell of a shared
  machine falls on every model alike, not on the one that happened to be measured then.
  `measure_one(model, length)` measures a cell once in a fresh process (as
  `run_in_fresh_process`: one process at a time, as a GPU or TPU holds one program's memory),
  which times its steps after compiling and a warm-up step. A cell that fails (OOM, error,
  timeout) is not measured again. `report(round, row)` after each (round from 1). Returns a
  row per cell with every round's figure (lra.reporting.rounds.combine)."""
  measured: dict[tuple[str, int], list[dict]] = {cell: [] for cell in cells}
  for number in range(1, count + 1):
    for cell in cells:
      done = measured[cell]
      if done and done[-1].get("status") != "ok":
        continue
      done.append(measure_one(*cell))
      if report is not None:
        report(number, done[-1])
  return [rounds.combine(measured[cell]) for cell in cells]


def machine_in_fresh_process(dtype: str, timeout_s: float = 600) -> dict[str, Any]:
  """The device description and matmul peak, measured in a child (the parent holds no device)."""
  proc = subprocess.run([sys.executable, "-m", _CHILD, "--machine", "--dtype", dtype],
                        capture_output=True, text=True, timeout=timeout_s, cwd=_ROOT)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode != 0 or not lines:
    raise RuntimeError(f"could not describe the machine: {proc.stderr.strip()[-500:]}")
  return json.loads(lines[-1])


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description="measure one (model, length); prints one JSON line")
  p.add_argument("--one", action="store_true", help="measure one (model, length)")
  p.add_argument("--machine", action="store_true",
                 help="describe the machine and measure its matmul peak instead")
  p.add_argument("--model")
  p.add_argument("--length", type=int)
  p.add_argument("--batch", type=int)
  p.add_argument("--dtype", default="float32")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--size", default=json.dumps(TEXT_BASE_SIZE))
  plugins.add_flag(p)
  p.epilog = "--config.model.KEY=VALUE overrides a config.model field after --size (repeatable)"
  return p


def main(argv=None) -> None:
  p = _parser()
  rest, sets = cli.take_overrides(sys.argv[1:] if argv is None else list(argv))
  args = p.parse_args(rest)
  if args.machine:
    machine = benchmark.describe_machine()
    machine["matmul_peak_flops_per_s"] = benchmark.matmul_peak_flops(args.dtype)
    print(json.dumps(machine), flush=True)
    return
  if not (args.one and args.model and args.length and args.batch):
    p.error("--one needs --model, --length and --batch")
  try:
    plugins.import_modules(args.imports)
    config = measured_config(args.model, args.length, args.batch, json.loads(args.size),
                             args.dtype, model_sets(sets))
    row = {**benchmark.measure(config, args.repeats), "model": args.model}  # an alias's name
  except Exception as e:  # reported as a table cell, never a crash of the whole table
    row = benchmark.failure(args.model, args.length, args.batch, f"{type(e).__name__}: {e}",
                            traceback.format_exc())
  print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
