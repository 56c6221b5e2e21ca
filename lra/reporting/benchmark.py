"""Speed and memory of the real train step: one config measured in this process.

The setup of the paper's Table 2 (the Text task on random bytes, the Text base model, batch 32,
lengths 1K-4K) is made by lra.commands.measuring, which runs each (model, length) in a fresh process
(`eval.py speed` drives it) and gives its config to `measure` here.
"""
from __future__ import annotations

import os
import time
from typing import Any

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


def measure(config, repeats: int = 5, steps_per_repeat: int = 3,
            min_repeat_s: float = 1.0) -> dict[str, Any]:
  """Compiles and times the real train step (forward, backward, AdamW update) of a Text
  `config` (its model, data.max_len and batch_size) on random bytes, in this process: after a
  warm-up step, `repeats` times the mean of at least `steps_per_repeat` steps and
  `min_repeat_s` seconds (a fast step alone is timer and dispatch noise); the median kept."""
  import jax
  import numpy as np
  from lra.data import tasks
  from lra.training import steps, trainer
  model, length, batch = config.model.name, config.data.max_len, config.batch_size
  row: dict[str, Any] = {"model": model, "length": length, "batch": batch, "status": "ok"}
  facts = tasks.FACTS["text"]
  rng = np.random.default_rng(0)
  split = {"inputs": rng.integers(1, facts.vocab_size, size=(batch, length)).astype(np.int32),
           "labels": rng.integers(0, facts.num_classes, size=batch).astype(np.int32)}
  task = tasks.Task.of("text", length, {s: split for s in tasks.SPLITS})
  model_def = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  train_step, _, sharding = steps.make_steps(model_def, task.pair, mesh, config.grad_accum_steps)
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
  # The cost analysis counts a loop's body once: the reversible stack's, the accumulation's.
  if config.model.reversible or config.grad_accum_steps > 1:
    row["flops_per_step"] = None
  state, metrics = compiled(state, batch_arrays, key)  # warm-up
  jax.block_until_ready(metrics)
  times = []
  for _ in range(repeats):
    start, steps = time.perf_counter(), 0
    while steps == 0 or time.perf_counter() - start < min_repeat_s:
      for _ in range(steps_per_repeat):
        state, metrics = compiled(state, batch_arrays, key)
      jax.block_until_ready((state, metrics))
      steps += steps_per_repeat
    times.append((time.perf_counter() - start) / steps)
  row["step_time_s"] = float(np.median(times))
  row["timed_steps"] = steps  # of the last repeat
  row["steps_per_s"] = 1.0 / row["step_time_s"]
  if row["flops_per_step"]:
    row["achieved_flops_per_s"] = row["flops_per_step"] / row["step_time_s"]
  stats = jax.devices()[0].memory_stats()  # None on CPU
  row["peak_memory_bytes"] = int(stats["peak_bytes_in_use"]) if stats and \
      "peak_bytes_in_use" in stats else None
  return row


def failure(model: str, length: int, batch: int, message: str,
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


def describe_machine() -> dict[str, Any]:
  import jax
  device = jax.devices()[0]
  return {"platform": device.platform, "device_kind": device.device_kind,
          "device_count": jax.device_count(), "jax_version": jax.__version__,
          "cpu_count": os.cpu_count()}
