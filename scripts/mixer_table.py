"""The table of a grid's runs of one task: accuracy against the majority class, parameters,
wall time and machine, with each run's results.json kept beside it.

  python scripts/mixer_table.py runs/quick_listops --out=results/quick_listops

Writes OUT/table.md, OUT/table.json and OUT/<model>/results.json (a copy of every run's, with
its paths relative: lra.reporting.published.portable). The parameter count comes from building
each run's recorded model on its task (no training). ROOT may be such an OUT: the table is
drawn again from the copies (`python scripts/mixer_table.py results/quick_listops --out=...`);
table.json names each run relative to ROOT.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lra.errors import UserError, run_command  # noqa: E402  (after the path above)


def _parameters(result: dict) -> int:
  """Parameters of the run's model, from its recorded config (shapes only, nothing runs)."""
  import jax
  import jax.numpy as jnp
  import ml_collections
  from lra.data import tasks
  from lra.training import trainer
  config = ml_collections.ConfigDict(result["config"])
  task = tasks.load(config)
  model = trainer.build_model(config, task)
  dummy = jnp.zeros((1, task.max_len), jnp.int32)
  inputs = (dummy, dummy) if task.pair else (dummy,)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), *inputs)["params"]
  return int(sum(x.size for x in jax.tree_util.tree_leaves(shapes)))


def _row(result: dict, workdir: str) -> dict:
  majority = result["test_majority_rate"]
  hardware = result.get("hardware", {})
  return {
      "model": result["label"], "test_accuracy": result["test_accuracy"],
      "majority_rate": majority, "times_majority": result["test_accuracy"] / majority,
      "best_val_accuracy": result["best_val_accuracy"], "best_step": result["best_step"],
      "num_train_steps": result["num_train_steps"], "parameters": _parameters(result),
      "train_time_s": result["train_time_s"],
      "machine": f"{hardware.get('device_kind', '?')} x{hardware.get('device_count', '?')}, "
                 f"jax {hardware.get('jax_version', '?')}",
      "workdir": workdir,
  }


def _markdown(rows: list[dict]) -> str:
  lines = ["| model | test accuracy | majority | x majority | best val (step) | parameters | "
           "train time (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['model']} | {r['test_accuracy']:.4f} | {r['majority_rate']:.4f} | "
                 f"{r['times_majority']:.2f} | {r['best_val_accuracy']:.4f} ({r['best_step']}) "
                 f"| {r['parameters']:,} | {r['train_time_s']:.0f} |")
  machines = sorted({r["machine"] for r in rows})
  lines.append("")
  lines.append(f"Machine: {'; '.join(machines)}. Steps: "
               f"{', '.join(sorted({str(r['num_train_steps']) for r in rows}))}.")
  return "\n".join(lines) + "\n"


def _table(args: argparse.Namespace) -> None:
  from lra.commands.references import paper_configs
  from lra.reporting import published, results
  warnings: list[str] = []
  found = results.collect_results([args.root], warnings, references=paper_configs)
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)
  if not found:
    raise UserError(f"no finished run under {args.root}")
  rows = []
  for result in found:
    result = {**result, "label": result["model"]}
    rows.append(_row(result, result["workdir"]))
    target = os.path.join(args.out, result["label"], "results.json")
    if os.path.abspath(target) != result["path"]:  # ROOT is not OUT
      os.makedirs(os.path.dirname(target), exist_ok=True)
      with open(result["path"]) as f:
        record = published.portable(json.load(f), published.place(result))
      with open(target, "w") as f:
        json.dump(record, f, indent=1)  # as the trainer writes it
  rows.sort(key=lambda r: -r["test_accuracy"])
  with open(os.path.join(args.out, "table.json"), "w") as f:
    json.dump(rows, f, indent=1)
  text = _markdown(rows)
  with open(os.path.join(args.out, "table.md"), "w") as f:
    f.write(text)
  print(text)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("root", help="a grid's root (python -m lra.commands.leaderboard --root)")
  parser.add_argument("--out", required=True, help="folder for table.md, table.json, copies")
  run_command(_table, parser.parse_args(argv))


if __name__ == "__main__":
  main()
