"""The accelerator run's training part: full-scale cells through train.py, each under a clock.

A cell is one `python train.py --config=... --workdir=...` in its own process. It starts only
when at least its `min_s` is left; at the run's deadline it gets SIGTERM, which train.py
answers by finishing its step and saving a checkpoint, so running the accelerator script
again (same --work) resumes the cell where it stopped. A finished cell's results.json gives
its test accuracy; a stopped one reports its last validation accuracy and its ETA.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_LINE = re.compile(r"^step (\d+)/(\d+): .*?([\d.]+) steps/s, ETA ([\d:]+(?:\.\d+)?)")


@dataclasses.dataclass
class Cell:
  """One (task, model) training run."""
  name: str            # the workdir's name under WORK/train
  config: str          # train.py's --config
  overrides: tuple     # further train.py flags
  min_s: float         # not started with less time left than this
  paper: float | None  # the paper's test accuracy (Table 1), percent
  note: str = ""


def _tiny_listops(data_dir: str) -> tuple:
  settings = dict(num_train=160, num_val=40, num_test=40, min_length=10, max_length=60,
                  max_depth=4, max_args=4, workers=1)
  data = tuple(f"--config.data.{k}={v}" for k, v in settings.items())
  return (f"--config.data.data_dir={data_dir}", "--config.data.max_len=60", *data,
          "--config.num_train_steps=8", "--config.batch_size=8", "--config.eval_batch_size=8",
          "--config.warmup_steps=2", "--config.log_every=2", "--config.eval_every=4",
          "--config.checkpoint_every=4")


def cells(work: str, dry_run: bool) -> list[Cell]:
  """The ListOps Transformer first (the repository's base config, bfloat16, 5K steps on the
  LRA-sized generated data), then further full-scale cells in order of value per minute."""
  if dry_run:
    data = os.path.join(work, "data", "listops_dry")
    return [
        Cell("listops_transformer", "configs/listops.py:transformer,cpu",
             _tiny_listops(data), 10, 36.37, "dry run: tiny data and model, 8 steps"),
        Cell("listops_performer", "configs/listops.py:performer,cpu", _tiny_listops(data),
             10, 18.01, "dry run: the same tiny data, 8 steps"),
    ]
  bf16 = ("--config.model.dtype=bfloat16",)
  return [
      Cell("listops_transformer", "configs/listops.py:transformer", bf16, 90, 36.37,
           "the repository's base config; data generated with LRA's sizes (96K/2K/2K)"),
      Cell("pathfinder32_performer", "configs/pathfinder.py:performer", bf16, 240, 77.05,
           "Pathfinder-32 hard (200K generated images), the base config, 62.4K steps"),
      Cell("listops_performer", "configs/listops.py:performer", bf16, 90, 18.01,
           "the repository's base config"),
  ]


def _command(cell: Cell, workdir: str) -> list[str]:
  return [sys.executable, os.path.join(ROOT, "train.py"), f"--config={cell.config}",
          f"--workdir={workdir}", "--config.progress=False", *cell.overrides]


def _stop(proc: subprocess.Popen, grace_s: float) -> str:
  """SIGTERM (train.py saves a checkpoint and exits), then SIGKILL after grace_s."""
  proc.send_signal(signal.SIGTERM)
  try:
    code = proc.wait(timeout=grace_s)
    return ("stopped for time (checkpoint saved; the same command resumes it)"
            if code == 128 + signal.SIGTERM else f"stopped for time (exit code {code})")
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    return f"killed for time ({grace_s:.0f} s after SIGTERM, no checkpoint of the last steps)"


def _run_process(cell: Cell, workdir: str, deadline: float, grace_s: float) -> dict:
  """train.py in its own process until it ends or the deadline; its output to train.log."""
  os.makedirs(workdir, exist_ok=True)
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "PYTHONUNBUFFERED": "1"}
  start = time.time()
  stopped = None
  with open(os.path.join(workdir, "train.log"), "a", encoding="utf-8") as log:
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(_command(cell, workdir))}\n")
    log.flush()
    proc = subprocess.Popen(_command(cell, workdir), stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT, env=env)
    while proc.poll() is None:
      if time.time() >= deadline:
        stopped = _stop(proc, grace_s)
        break
      time.sleep(0.5)
  return {"exit_code": proc.returncode, "wall_s": round(time.time() - start, 1),
          "stopped": stopped}


def _last_lines(path: str, count: int = 400) -> list[str]:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.readlines()[-count:]
  except OSError:
    return []


def _progress(workdir: str) -> dict:
  """The last progress line of train.log and the last validation row of metrics.jsonl."""
  found: dict = {}
  for line in _last_lines(os.path.join(workdir, "train.log")):
    m = STEP_LINE.match(line.strip())
    if m:
      found.update(step=int(m.group(1)), num_train_steps=int(m.group(2)),
                   steps_per_s=float(m.group(3)), eta=m.group(4))
  for line in _last_lines(os.path.join(workdir, "metrics.jsonl"), 2000):
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      continue
    if isinstance(row, dict) and "val_accuracy" in row:
      found.update(last_val_step=row.get("step"), last_val_accuracy=row["val_accuracy"])
  errors = [l.strip() for l in _last_lines(os.path.join(workdir, "train.log"), 60)
            if l.startswith("error:") and not l.startswith("error: stopped by SIG")]
  if errors:
    found["error"] = errors[-1][:300]
  return found


def _result(cell: Cell, workdir: str, process: dict | None) -> dict:
  out = {"cell": cell.name, "config": cell.config, "overrides": list(cell.overrides),
         "note": cell.note, "paper_test_accuracy": cell.paper, "workdir": workdir}
  if process:
    out.update(process)
  results_path = os.path.join(workdir, "results.json")
  if os.path.exists(results_path):
    with open(results_path, encoding="utf-8") as f:
      res = json.load(f)
    out.update(status="finished", test_accuracy=100 * res["test_accuracy"],
               best_val_accuracy=100 * res["best_val_accuracy"], best_step=res["best_step"],
               test_majority_rate=100 * res["test_majority_rate"],
               num_train_steps=res["num_train_steps"], train_time_s=res.get("train_time_s"),
               counts={k: res.get(f"{k}_count") for k in ("train", "val", "test")},
               hardware=res.get("hardware"),
               dtype=(res.get("config") or {}).get("model", {}).get("dtype"))
    if cell.paper is not None:
      out["difference_to_paper"] = round(out["test_accuracy"] - cell.paper, 2)
  out["progress"] = _progress(workdir)
  if "status" not in out:  # a cell stopped in an earlier run has progress (and a checkpoint)
    out["status"] = "not finished" if process or out["progress"].get("step") else "not started"
  return out


def run(work: str, dry_run: bool, deadline: float, log) -> list[dict]:
  """Every cell in order while the clock allows; returns one result per cell."""
  grace = 15.0 if dry_run else 30.0
  results = []
  for cell in cells(work, dry_run):
    workdir = os.path.join(work, "train", cell.name)
    if os.path.exists(os.path.join(workdir, "results.json")):
      log(f"train: {cell.name} finished in an earlier run; kept")
      results.append(_result(cell, workdir, None))
      continue
    left = deadline - time.time()
    if left < cell.min_s:
      log(f"train: {cell.name} skipped: {left:.0f} s left, it needs at least {cell.min_s:.0f} s")
      result = _result(cell, workdir, None)
      result["skipped"] = f"time: {left:.0f} s left, needs at least {cell.min_s:.0f} s"
      results.append(result)
      continue
    log(f"train: {cell.name} ({cell.config}), up to {left:.0f} s")
    process = _run_process(cell, workdir, deadline - grace, grace)
    result = _result(cell, workdir, process)
    shown = (f"test accuracy {result['test_accuracy']:.2f}% (paper {cell.paper})"
             if result["status"] == "finished" else
             f"{result['status']}, {process['stopped'] or 'exit ' + str(process['exit_code'])}")
    log(f"train: {cell.name}: {shown} ({process['wall_s']:.0f} s)")
    results.append(result)
  return results


def status(work: str, dry_run: bool) -> list[dict]:
  """The cells' state in the work folder, running nothing (when training is not asked for)."""
  return [_result(cell, os.path.join(work, "train", cell.name), None)
          for cell in cells(work, dry_run)]
