"""The accelerator run's speed part: `eval.py speed`'s measurement, cell by cell under a clock.

Each (model, length) is measured in a fresh process by the same library call eval.py speed
makes (lra.commands.measuring.run_in_fresh_process), and the tables are eval.py's
(lra.reporting.speed / speed_table), so the figures are eval.py speed's. What this adds: a time
check before every cell (a cell starts only when the time it is expected to take is left),
and rows kept in the work folder, so running the accelerator run again measures only the cells
still missing.
"""
from __future__ import annotations

import json
import os
import time

from lra.commands import measuring
from lra.reporting import files, speed, speed_table
from lra.reporting.paper import PAPER_LENGTHS, PAPER_MODELS, PAPER_SPEED

REAL = dict(lengths=(1024, 2048, 3072, 4096), batch=32, size=dict(measuring.TEXT_BASE_SIZE),
            dtype="bfloat16", repeats=5, first_estimate_s=15.0, cell_limit_s=180.0)
# The dry run's second model fails as XLA does when a device runs out of memory: its cell must
# be recorded as OOM, as the paper's table does, and the run go on.
DRY = dict(lengths=(64, 128), batch=2,
           size=dict(num_layers=1, emb_dim=32, qkv_dim=32, mlp_dim=64, num_heads=2),
           dtype="float32", repeats=2, first_estimate_s=8.0, cell_limit_s=90.0,
           models=("transformer", "test_oom", "performer"), imports=("tests.extra_mixers",))


def settings(dry_run: bool) -> dict:
  """What is measured: every registered model (the Transformer first, then the order of the
  paper's Table 2, its other models, then the rest) at the paper's lengths, batch 32, the Text
  base size, bfloat16."""
  if dry_run:
    return dict(DRY)
  from lra.models import registry
  names = registry.names()
  order = [m for m in (*PAPER_SPEED, *PAPER_MODELS) if m in names]
  order = list(dict.fromkeys(order)) + sorted(set(names) - set(order))
  assert order[0] == "transformer" and tuple(REAL["lengths"]) == tuple(PAPER_LENGTHS)
  return dict(REAL, models=tuple(order))


def cell_order(cfg: dict) -> list[tuple[str, int]]:
  """Length by length, the longest first, each length's Transformer first: every cell the
  time allows has its Transformer baseline (its ratio), and the long lengths, where the
  models differ most, come first."""
  return [(model, length) for length in sorted(cfg["lengths"], reverse=True)
          for model in cfg["models"]]


def _read_rows(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _machine(work: str, dtype: str, log) -> dict:
  """The device and its matmul peak, measured once per work folder (a fresh process)."""
  path = os.path.join(work, "speed_machine.json")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  log("speed: measuring the machine's matmul peak (one process)")
  machine = measuring.machine_in_fresh_process(dtype, timeout_s=300)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(machine, f)
  return machine


def _estimate(rows: list[dict], first: float) -> float:
  """Seconds a cell is expected to take: the median of the cells measured so far (this run and
  earlier ones), else `first`."""
  walls = sorted(r["wall_s"] for r in rows if isinstance(r.get("wall_s"), (int, float)))
  return walls[len(walls) // 2] if walls else first


def _measure_cells(cfg: dict, rows_path: str, done: set, deadline: float, log) -> list[dict]:
  """Measures the missing cells in order while the clock allows; returns the skipped ones."""
  skipped = []
  for model, length in cell_order(cfg):
    if (model, length) in done:
      continue
    estimate = _estimate(_read_rows(rows_path), cfg["first_estimate_s"])
    left = deadline - time.time()
    if left < 1.2 * estimate:
      skipped.append({"model": model, "length": length,
                      "why": f"time: {left:.0f} s left, a cell takes ~{estimate:.0f} s"})
      continue
    timeout = min(cfg["cell_limit_s"], left)
    start = time.time()
    row = measuring.run_in_fresh_process(model, length, cfg["batch"], cfg["size"],
                                         cfg["dtype"], cfg["repeats"], timeout,
                                         imports=cfg.get("imports", ()))
    wall = time.time() - start
    if row["status"].startswith("error: timed out") and timeout < cfg["cell_limit_s"]:
      skipped.append({"model": model, "length": length,
                      "why": f"time: stopped at the run's clock after {timeout:.0f} s"})
      continue  # cut by the budget, not a measurement: the next run measures it again
    row["wall_s"] = round(wall, 1)
    with open(rows_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(row) + "\n")
    done.add((model, length))
    # An OOM cell is a result (as in the paper's table), not a failure of the run.
    shown = f"{row['steps_per_s']:.3f} steps/s" if row["status"] == "ok" else row["status"]
    log(f"speed: {model} @ {length}: {shown} ({wall:.0f} s)")
  return skipped


def run(work: str, dry_run: bool, deadline: float, log) -> dict:
  """Measures what the time allows; returns {'machine', 'rows', 'skipped', 'settings'}."""
  cfg = settings(dry_run)
  os.makedirs(work, exist_ok=True)
  rows_path = os.path.join(work, "speed_rows.jsonl")
  wanted = {(m, n) for m in cfg["models"] for n in cfg["lengths"]}
  rows = [r for r in _read_rows(rows_path) if (r["model"], r["length"]) in wanted]
  done = {(r["model"], r["length"]) for r in rows}
  if rows:
    log(f"speed: {len(done)} of {len(wanted)} cells measured by an earlier run, kept")
  machine = None
  if done != wanted and deadline - time.time() > cfg["first_estimate_s"]:
    machine = _machine(work, cfg["dtype"], log)
  skipped = _measure_cells(cfg, rows_path, done, deadline, log) if machine else [
      {"model": m, "length": n, "why": "time: none left for the speed part"}
      for m in cfg["models"] for n in cfg["lengths"] if (m, n) not in done]
  if machine is None and os.path.exists(os.path.join(work, "speed_machine.json")):
    machine = _machine(work, cfg["dtype"], log)
  return {"machine": machine, "rows": _read_rows(rows_path), "skipped": skipped,
          "settings": {k: v for k, v in cfg.items() if k != "first_estimate_s"}}


def write(result: dict, out: str) -> str:
  """speed.md (eval.py speed's tables, plus what was skipped) and speed.json; returns the
  markdown."""
  rows = result["rows"]
  cfg = result["settings"]
  machine = dict(result["machine"] or {})
  machine.update(batch=cfg["batch"], model_size=cfg["size"], dtype=cfg["dtype"])
  for row in rows:  # as eval.py speed does: each row with the machine's peak
    row.setdefault("matmul_peak_flops_per_s", machine.get("matmul_peak_flops_per_s"))
  text = (speed_table.speed_markdown(speed.speed_tables(rows), machine) if rows
          else "No speed cell was measured.\n")
  text = f"Compute dtype {cfg['dtype']}.\n\n" + text
  if result["skipped"]:
    text += (f"\nNot measured in this run ({len(result['skipped'])} cells; running the same "
             "command again measures them, keeping these):\n\n")
    by_model: dict[str, list] = {}
    for s in result["skipped"]:
      by_model.setdefault(s["model"], []).append(s)
    text += "\n".join(f"- {model}: {', '.join(str(s['length']) for s in cells)} "
                      f"({cells[0]['why']})" for model, cells in by_model.items()) + "\n"
  table = speed.speed_tables(rows) if rows else None
  with open(os.path.join(out, "speed.md"), "w", encoding="utf-8") as f:
    f.write(text)
  with open(os.path.join(out, "speed.json"), "w", encoding="utf-8") as f:
    f.write(files.json_text({"machine": machine, "rows": rows, "skipped": result["skipped"],
                             "tables": table, "paper_table2_steps_per_s": PAPER_SPEED,
                             "settings": cfg}))
  return text
