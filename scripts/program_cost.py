"""XLA's count of a config's train and evaluation steps, compiled only (nothing runs):

  python scripts/program_cost.py --config=listops:transformer --config.model.dtype=bfloat16

Prints one JSON line per step: FLOPs, bytes of memory traffic and temporary bytes, for the
global batch of the config at its max_len. XLA counts a loop's body once: with
grad_accum_steps=K or reversible layers the FLOPs and traffic are undercounted. What docs/accelerator.md plans a GPU's time from
(on a CPU the compiler fuses less, so the traffic is an upper bound for a GPU).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from lra.errors import run_command  # noqa: E402


def config_of(spec: str, items: list):
  """'TASK:MODEL[,options]' and the command line's (scope, KEY, VALUE) overrides -> the
  config (the values read as train.py reads them: lra.cli.set_value)."""
  task, _, arg = spec.partition(":")
  from lra import cli
  from lra.data import tasks
  from lra.errors import UserError
  if task not in tasks.NAMES:
    raise UserError(f"--config={spec}: unknown task {task!r}; valid: {', '.join(tasks.NAMES)}")
  config = importlib.import_module(f"lra.configs.{task}").get_config(arg or None)
  for _, key, value in items:  # an unknown key: one line with the nearest one
    cli.set_value(config, key, value)
  return config


def cost(config) -> dict:
  import jax
  import numpy as np
  from lra.data import tasks
  from lra.training import steps, trainer
  # The model's head and embedding from the task table; no data is read.
  task = tasks.Task.of(config.task, config.data.max_len, {})
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  train_step, eval_step, _ = steps.make_steps(model, task.pair, mesh, config.grad_accum_steps)
  state = jax.eval_shape(lambda: trainer.create_state(model, task, config, mesh))
  b, n = config.batch_size, config.data.max_len
  batch = {"inputs": jax.ShapeDtypeStruct((b, n), np.int32),
           "labels": jax.ShapeDtypeStruct((b,), np.int32)}
  if task.pair:
    batch["inputs2"] = jax.ShapeDtypeStruct((b, n), np.int32)
  key = jax.ShapeDtypeStruct((2,), np.uint32)
  weights = dict(batch, weights=jax.ShapeDtypeStruct((b,), np.float32))
  out = {}
  for name, step, args in (("train", train_step, (state, batch, key)),
                           ("eval", eval_step, (state, weights))):
    compiled = step.lower(*args).compile()
    found = compiled.cost_analysis()
    found = found[0] if isinstance(found, (list, tuple)) else found
    memory = compiled.memory_analysis()
    out[name] = {"flops": found.get("flops"), "bytes_accessed": found.get("bytes accessed"),
                 "temp_bytes": memory.temp_size_in_bytes if memory else None}
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", required=True, help="TASK:MODEL[,cpu][,paper]")
  p.epilog = "--config.KEY=VALUE: a dotted config key, e.g. --config.model.dtype=bfloat16"
  run_command(_main, (p, sys.argv[1:] if argv is None else list(argv)))  # a bad one: one line


def _main(parsed) -> None:
  from lra import cli
  parser, argv = parsed
  rest, items = cli.take_overrides(argv)
  args = parser.parse_args(rest)
  config = config_of(args.config, items)
  print(json.dumps({"config": args.config, "sets": cli.as_dict(items), "batch": config.batch_size,
                    "max_len": config.data.max_len, **cost(config)}), flush=True)


if __name__ == "__main__":
  main()
