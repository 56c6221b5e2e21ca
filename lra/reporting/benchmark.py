"""Speed and memory of the real train step, one model and length per fresh process.

The setup of the paper's Table 2: the Text task (random bytes), the Text base model by default,
batch 32, lengths 1K-4K. `eval.py speed` drives it; `python -m lra.reporting.benchmark --one ...`
is the child process that measures one (model, length) and prints one JSON line.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

from configs import table
from lra.errors import UserError

# The Text base model of the original repository (configs/table.py).
TEXT_BASE_SIZE = dict(table.SIZES["text"]["base"])
# The repository root: the measuring child runs there (configs/ is imported from it).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM")
TAIL_LINES = 60  # of a failed cell's output, kept in its row (the reason, where one machine ran)


def matmul_peak_flops(dtype: str = "float32", seconds: float = 1.0) -> float:
  """The best FLOP/s of a plain square matmul on the default device (the roofline to compare),
  on random data: constant inputs let the hardware do less (less switching) and overstate it."""
  import jax
  import jax.numpy as jnp
  best = 0.0
  # A GPU or TPU nears its peak only on matrices thousands wide (2048^2 understates it); on CPU
  # 2048^2 is already near the peak and 8192^2 would take seconds per product on a few cores.
  sizes = (512, 1024, 2048) + (() if jax.default_backend() == "cpu" else (4096, 8192))
  for n in sizes:
    a, b = jax.random.normal(jax.random.PRNGKey(n), (2, n, n), jnp.float32).astype(dtype)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / len(sizes):
      f(a, b).block_until_ready()
      count += 1
    best = max(best, 2 * n ** 3 * count / (time.perf_counter() - start))
  return best


def parse_sets(items: list[str]) -> dict[str, Any]:
  """['reversible=True', 'norm=batch'] -> {'reversible': True, 'norm': 'batch'}.

  Values are Python literals (True, 12, 0.5, "x", None); anything else is taken as a string.
  """
  sets = {}
  for item in items:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
      raise UserError(f"--set {item!r} is not KEY=VALUE (e.g. --set reversible=True)")
    try:
      value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
      value = text.strip()
    sets[key.strip()] = value
  return sets


def override(model_config, sets: dict[str, Any], root: str = "config.model") -> None:
  """Sets config.model fields ('attention.NAME' for a mixer setting), or the fields below
  `root`; an unknown key is an error naming the valid ones."""
  for key, value in sets.items():
    if key == "name":
      raise UserError("--set name=...: choose the models with --models")
    node, path = model_config, key.split(".")
    for i, part in enumerate(path):
      if part not in node:
        where = ".".join([root, *path[:i]])
        raise UserError(f"--set {key}: {where} has no field {part!r}; valid: "
                        f"{', '.join(sorted(node.keys()))}")
      if i < len(path) - 1:
        node = node[part]
    try:
      node[path[-1]] = value
    except TypeError as e:  # ml_collections keeps each field's type
      raise UserError(f"--set {key}={value!r}: {e}") from None


def measured_config(model: str, length: int, batch: int, size: dict[str, int], dtype: str,
                    sets: dict[str, Any] | None = None):
  """The Text config that `measure` times (eval.py builds it first to check the settings)."""
  from configs import text
  c = text.get_config(model)
  c.data.max_len = length
  c.batch_size = c.eval_batch_size = batch
  c.model.dtype = dtype
  for key, value in size.items():
    c.model[key] = value
  override(c.model, sets or {})
  return c


def measure(model: str, length: int, batch: int, size: dict[str, int], dtype: str = "float32",
            repeats: int = 5, steps_per_repeat: int = 3,
            sets: dict[str, Any] | None = None) -> dict[str, Any]:
  """Compiles and times the real train step (forward, backward, AdamW update) in this process.

  `sets` overrides config.model fields after `size` (e.g. {"reversible": True})."""
  import jax
  import numpy as np
  from lra.data import tasks
  from lra.training import trainer
  row: dict[str, Any] = {"model": model, "length": length, "batch": batch, "status": "ok"}
  config = measured_config(model, length, batch, size, dtype, sets)
  rng = np.random.default_rng(0)
  split = {"inputs": rng.integers(1, 257, size=(batch, length)).astype(np.int32),
           "labels": rng.integers(0, 2, size=batch).astype(np.int32)}
  task = tasks.Task("text", 2, 257, length, False, {s: split for s in tasks.SPLITS})
  model_def = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  train_step, _, sharding = trainer.make_steps(model_def, False, mesh)
  state = trainer.create_state(model_def, task, config, mesh)
  batch_arrays = trainer.to_global(dict(split), sharding)
  key = jax.random.PRNGKey(0)
  compiled = train_step.lower(state, batch_arrays, key).compile()
  memory = compiled.memory_analysis()
  if memory is not None:
    row["compiled_memory_bytes"] = int(memory.argument_size_in_bytes +
                                       memory.output_size_in_bytes +
                                       memory.temp_size_in_bytes - memory.alias_size_in_bytes)
    row["compiled_temp_bytes"] = int(memory.temp_size_in_bytes)
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  row["flops_per_step"] = float(cost.get("flops", 0.0)) if cost else None
  if config.model.reversible:  # the cost analysis counts the reversible stack's loop body once
    row["flops_per_step"] = None
  state, metrics = compiled(state, batch_arrays, key)  # warm-up
  jax.block_until_ready(metrics)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(steps_per_repeat):
      state, metrics = compiled(state, batch_arrays, key)
    jax.block_until_ready((state, metrics))
    times.append((time.perf_counter() - start) / steps_per_repeat)
  row["step_time_s"] = float(np.median(times))
  row["steps_per_s"] = 1.0 / row["step_time_s"]
  if row["flops_per_step"]:
    row["achieved_flops_per_s"] = row["flops_per_step"] / row["step_time_s"]
  stats = jax.devices()[0].memory_stats()  # None on CPU
  row["peak_memory_bytes"] = int(stats["peak_bytes_in_use"]) if stats and \
      "peak_bytes_in_use" in stats else None
  return row


def _failure(model: str, length: int, batch: int, message: str,
             output: str = "") -> dict[str, Any]:
  """A failed cell's row: OOM, or the error's last line; `output`'s last lines (a traceback,
  the child's stderr) kept as `output_tail`."""
  oom = any(m in message for m in OOM_MARKERS)
  first = (message.strip().splitlines() or ["failed"])[-1][:300]
  row = {"model": model, "length": length, "batch": batch,
         "status": "OOM" if oom else f"error: {first}"}
  if output.strip():
    row["output_tail"] = output.rstrip().splitlines()[-TAIL_LINES:]
  return row


def run_in_fresh_process(model: str, length: int, batch: int, size: dict[str, int],
                         dtype: str, repeats: int, timeout_s: float,
                         imports: tuple[str, ...] = (),
                         sets: tuple[str, ...] = ()) -> dict[str, Any]:
  """One (model, length) per process, so no model's peak memory counts for another."""
  command = [sys.executable, "-m", "lra.reporting.benchmark", "--one", "--model", model,
             "--length", str(length), "--batch", str(batch), "--dtype", dtype,
             "--repeats", str(repeats), "--size", json.dumps(size)]
  command += [f"--import={module}" for module in imports]
  command += [f"--set={item}" for item in sets]
  env = {**os.environ, "PYTHONPATH": _ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  try:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=_ROOT)
  except subprocess.TimeoutExpired:
    return _failure(model, length, batch, f"timed out after {timeout_s:.0f} s")
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode == 0 and lines:
    return json.loads(lines[-1])
  if proc.returncode in (-9, 137):  # killed, on a CPU host most likely by the OOM killer
    return _failure(model, length, batch, "OOM (process killed)")
  return _failure(model, length, batch, proc.stderr or f"exit code {proc.returncode}",
                  proc.stdout + proc.stderr)


def machine_in_fresh_process(dtype: str, timeout_s: float = 600) -> dict[str, Any]:
  """The device description and matmul peak, measured in a child (the parent holds no device)."""
  proc = subprocess.run([sys.executable, "-m", "lra.reporting.benchmark", "--machine",
                         "--dtype", dtype], capture_output=True, text=True, timeout=timeout_s,
                        cwd=_ROOT)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode != 0 or not lines:
    raise RuntimeError(f"could not describe the machine: {proc.stderr.strip()[-500:]}")
  return json.loads(lines[-1])


def describe_machine() -> dict[str, Any]:
  import jax
  device = jax.devices()[0]
  return {"platform": device.platform, "device_kind": device.device_kind,
          "device_count": jax.device_count(), "jax_version": jax.__version__,
          "cpu_count": os.cpu_count()}


def main(argv=None) -> None:
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
  p.add_argument("--import", dest="imports", action="append", default=[],
                 help="a module to import first (one that registers a new mixer)")
  p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                 help="override a config.model field after --size (repeatable)")
  args = p.parse_args(argv)
  if args.machine:
    machine = describe_machine()
    machine["matmul_peak_flops_per_s"] = matmul_peak_flops(args.dtype)
    print(json.dumps(machine), flush=True)
    return
  if not (args.one and args.model and args.length and args.batch):
    p.error("--one needs --model, --length and --batch")
  try:
    for module in args.imports:
      importlib.import_module(module)
    row = measure(args.model, args.length, args.batch, json.loads(args.size), args.dtype,
                  args.repeats, sets=parse_sets(args.sets))
  except Exception as e:  # reported as a table cell, never a crash of the whole table
    row = _failure(args.model, args.length, args.batch, f"{type(e).__name__}: {e}",
                   traceback.format_exc())
  print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
