"""The accelerator run's training part: full-scale cells through train.py, each under a clock,
each ending with a test accuracy.

A cell is one `python train.py --config=... --workdir=...` in its own process, started only
when at least its `min_s` is left. It is given `--config.max_train_time_s`: the seconds left
less what starting (data, model) and ending (the last validation, the test) are expected to
take (TIMES), so the trainer itself ends at the step it reached, validates it and tests the
best checkpoint, whatever the step rate. The step rate of the first logged steps is read from
train.log and the plan (steps reachable against the config's) is logged and recorded.

If the estimate was wrong and the cell still runs at its hard stop, it gets SIGTERM (train.py
finishes its step and saves a checkpoint), and, time allowing, train.py runs again on that
checkpoint with a limit already used up: one more step, then the validation and the test
("stop, then test"). The dry run sends its second cell down that path on purpose.
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

from lra.commands.accelerator.clock import TAIL_LINES
from lra.locations import PACKAGE_ROOT as ROOT  # the checkout: train.py

STEP_LINE = re.compile(r"^step (\d+)/(\d+): .*?([\d.]+) steps/s, ETA ([\d:]+(?:\.\d+)?)")
RUN_MARK = "=== "  # starts each process's part of train.log

# Seconds a cell needs around its training (estimates; docs/accelerator.md gives the reasons):
# start (import, CUDA init, data generation and reading, model init), end (the first
# compilation of the evaluation step, validation, saving, restoring the best and testing it),
# the test rerun of a stopped cell (start plus end plus one step, the train step from the
# compilation cache), and the grace between SIGTERM and SIGKILL.
TIMES = {"real": dict(start_s=60.0, end_s=30.0, test_s=60.0, grace_s=30.0),
         # The dry run's: a 2-core CI machine running another test beside it (there its
         # ListOps cell overran 6 s + 3 s and was stopped by the clock).
         "dry": dict(start_s=12.0, end_s=8.0, test_s=12.0, grace_s=5.0)}
# The limit that is used up by the first step: the test rerun trains one step, then tests.
USED_UP = 1e-9


@dataclasses.dataclass
class Cell:
  """One (task, model) training run."""
  name: str            # the workdir's name under WORK/train
  config: str          # train.py's --config
  overrides: tuple     # further train.py flags
  min_s: float         # not started with less time left than this
  paper: float | None  # the paper's test accuracy (Table 1), percent
  note: str = ""
  max_s: float | None = None  # at most this many seconds of the run (None: all that is left)
  limit: bool = True   # give train.py max_train_time_s (False: only the clock stops it)
  deviation: str = ""  # how the cell differs from the paper's setup, when it does


def _tiny_listops(data_dir: str) -> tuple:
  """The dry run's data and model: tiny, and more steps than the time allows, so that the
  time limit (or the clock) ends it."""
  settings = dict(num_train=160, num_val=40, num_test=40, min_length=10, max_length=60,
                  max_depth=4, max_args=4, workers=1)
  data = tuple(f"--config.data.{k}={v}" for k, v in settings.items())
  return (f"--config.data.data_dir={data_dir}", "--config.data.max_len=60", *data,
          "--config.num_train_steps=100000", "--config.batch_size=8",
          "--config.eval_batch_size=8", "--config.warmup_steps=2", "--config.log_every=20",
          "--config.eval_every=200", "--config.checkpoint_every=200")


def fast_attention(dry_run: bool) -> tuple[tuple, str]:
  """The fast path's flags and its deviation: cuDNN's fused attention, which takes no
  attention dropout (the dry run's CPU has no cuDNN: "auto" picks the exact chunked one)."""
  implementation = "auto" if dry_run else "cudnn"
  return ((f"--config.model.attention.implementation={implementation}",
           "--config.model.attention_dropout_rate=0.0"),
          f"attention implementation {implementation!r} without attention dropout (the "
          f"config's attention_dropout_rate is 0.1)")


def cells(work: str, dry_run: bool, fast: bool = False) -> list[Cell]:
  """The ListOps Transformer first (the repository's base config, bfloat16, 5K steps on the
  LRA-sized generated data), then further full-scale cells in order of value per minute.
  `fast`: the ListOps Transformer takes fast_attention()'s path (a recorded deviation)."""
  extra, deviation = fast_attention(dry_run) if fast else ((), "")
  if dry_run:
    data = os.path.join(work, "data", "listops_dry")
    return [
        Cell("listops_transformer", "configs/listops.py:transformer,cpu",
             _tiny_listops(data) + extra, 10, 36.37,
             "dry run: tiny data and model; ended by its time limit", max_s=35,
             deviation=deviation),
        Cell("listops_performer", "configs/listops.py:performer,cpu", _tiny_listops(data),
             10, 18.01, "dry run: no time limit, so the clock stops it and a rerun tests it",
             max_s=30, limit=False),
    ]
  bf16 = ("--config.model.dtype=bfloat16",)
  return [
      Cell("listops_transformer", "configs/listops.py:transformer", bf16 + extra, 150, 36.37,
           "the repository's base config; data generated with LRA's sizes (96K/2K/2K)",
           deviation=deviation),
      Cell("pathfinder32_performer", "configs/pathfinder.py:performer", bf16, 240, 77.05,
           "Pathfinder-32 hard (200K generated images), the base config, 62.4K steps"),
      Cell("listops_performer", "configs/listops.py:performer", bf16, 150, 18.01,
           "the repository's base config"),
  ]


def _command(cell: Cell, workdir: str, cache: str, limit: float | None) -> list[str]:
  command = [sys.executable, os.path.join(ROOT, "train.py"), f"--config={cell.config}",
             f"--workdir={workdir}", "--config.progress=False",
             f"--config.compilation_cache_dir={cache}", *cell.overrides]
  return command + ([f"--config.max_train_time_s={limit:.6g}"] if limit is not None else [])


def _stop(proc: subprocess.Popen, grace_s: float) -> str:
  """SIGTERM (train.py saves a checkpoint and exits), then SIGKILL after grace_s."""
  proc.send_signal(signal.SIGTERM)
  try:
    code = proc.wait(timeout=grace_s)
    return ("stopped for time (checkpoint saved)" if code == 128 + signal.SIGTERM
            else f"stopped for time (exit code {code})")
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    return f"killed for time ({grace_s:.0f} s after SIGTERM, no checkpoint of the last steps)"


def _first_rate(workdir: str, ended: bool = False) -> dict | None:
  """The step rate of this run's second progress line of train.log (the first one's interval
  includes the compilation): {step, num_train_steps, steps_per_s}; once the process `ended`,
  the first line will do."""
  found = []
  for line in _this_run(os.path.join(workdir, "train.log")):
    m = STEP_LINE.match(line.strip())
    if m:
      found.append({"step": int(m.group(1)), "num_train_steps": int(m.group(2)),
                    "steps_per_s": float(m.group(3))})
  if len(found) >= 2:
    return found[1]
  return dict(found[0], with_compilation=True) if found and ended else None


def _plan_line(cell: Cell, rate: dict, limit: float | None) -> tuple[str, dict]:
  """What the first step rate says: the steps the limit reaches against the config's."""
  steps_per_s, total = rate["steps_per_s"], rate["num_train_steps"]
  plan = dict(rate, seconds_for_all_steps=round(total / steps_per_s, 1))
  line = (f"train: {cell.name}: {steps_per_s:.2f} steps/s at step {rate['step']}; "
          f"{total} steps need ~{plan['seconds_for_all_steps']:.0f} s of training")
  if limit is not None:
    reach = min(total, int(limit * steps_per_s))  # the first steps' compilation included
    plan.update(projected_steps=reach, projected_fraction=round(reach / total, 3))
    line += (f"; the limit of {limit:.0f} s reaches ~{reach} ({100 * reach / total:.0f}% of "
             f"{total})")
  return line, plan


def _run_process(command: list[str], workdir: str, hard_stop: float, grace_s: float,
                 log, watch: Cell | None = None, limit: float | None = None) -> dict:
  """train.py in its own process until it ends or `hard_stop`; its output to train.log.
  `watch`: log the plan once the first step rate is known."""
  os.makedirs(workdir, exist_ok=True)
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "PYTHONUNBUFFERED": "1"}
  start = time.time()
  stopped, plan = None, None
  with open(os.path.join(workdir, "train.log"), "a", encoding="utf-8") as out:
    out.write(f"\n{RUN_MARK}{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(command)}\n")
    out.flush()
    proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    while proc.poll() is None:
      if time.time() >= hard_stop:
        stopped = _stop(proc, grace_s)
        break
      if watch is not None and plan is None:
        rate = _first_rate(workdir)
        if rate is not None:
          line, plan = _plan_line(watch, rate, limit)
          log(line)
      time.sleep(0.5)
  if watch is not None and plan is None:  # it ended before the first wait saw a line
    rate = _first_rate(workdir, ended=True)
    plan = _plan_line(watch, rate, limit)[1] if rate else None
  return {"exit_code": proc.returncode, "wall_s": round(time.time() - start, 1),
          "stopped": stopped, "plan": plan}


def _last_lines(path: str, count: int = 400) -> list[str]:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.readlines()[-count:]
  except OSError:
    return []


def _this_run(path: str) -> list[str]:
  """The lines of train.log written by the processes of this accelerator run (from the first
  RUN_MARK of the newest block of processes: the file also holds earlier runs')."""
  lines = _last_lines(path, 5000)
  marks = [i for i, line in enumerate(lines) if line.startswith(RUN_MARK)]
  return lines[marks[-1]:] if marks else lines


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
  errors = [l.strip() for l in _last_lines(os.path.join(workdir, "train.log"), TAIL_LINES)
            if l.startswith("error:") and not l.startswith("error: stopped by SIG")]
  if errors:
    found["error"] = errors[-1][:300]
  return found


def _result(cell: Cell, workdir: str, process: dict | None, since: float | None) -> dict:
  """The cell's record; `since`: when this accelerator run started it (its results.json is
  this run's only if written after)."""
  out = {"cell": cell.name, "config": cell.config, "overrides": list(cell.overrides),
         "note": cell.note, "deviation": cell.deviation or None,
         # Relative to --work (train/NAME): the record may be committed to results/.
         "paper_test_accuracy": cell.paper, "workdir": os.path.join("train", cell.name)}
  if process:
    out.update(process)
  res = _results(workdir)
  if res is not None:
    steps = res["num_train_steps"]
    planned = res.get("planned_num_train_steps", steps)
    out.update(status="finished", test_accuracy=100 * res["test_accuracy"],
               best_val_accuracy=100 * res["best_val_accuracy"], best_step=res["best_step"],
               test_majority_rate=100 * res["test_majority_rate"],
               steps_trained=steps, planned_num_train_steps=planned,
               all_steps_trained=steps == planned, stopped_early=res.get("stopped_early"),
               train_time_s=res.get("train_time_s"),
               counts={k: res.get(f"{k}_count") for k in ("train", "val", "test")},
               hardware=res.get("hardware"),
               dtype=(res.get("config") or {}).get("model", {}).get("dtype"),
               this_run=since is not None and os.path.getmtime(
                   os.path.join(workdir, "results.json")) >= since)
    if cell.paper is not None:
      out["difference_to_paper"] = round(out["test_accuracy"] - cell.paper, 2)
  out["progress"] = _progress(workdir)
  if "status" not in out:  # a cell stopped in an earlier run has progress (and a checkpoint)
    out["status"] = "not finished" if process or out["progress"].get("step") else "not started"
  out["tail"] = [line.rstrip("\n") for line in
                 _this_run(os.path.join(workdir, "train.log"))[-TAIL_LINES:]] if process else []
  return out


def _test_after_stop(cell: Cell, workdir: str, cache: str, deadline: float, times: dict,
                     log) -> dict:
  """train.py again on the checkpoint a stop saved, with its limit used up: one more step,
  then the validation and the test of the best checkpoint."""
  log(f"train: {cell.name}: testing the checkpoint it saved (one more step, then the test)")
  return _run_process(_command(cell, workdir, cache, USED_UP), workdir, deadline,
                      times["grace_s"], log)


def _one_cell(cell: Cell, workdir: str, cache: str, deadline: float, test_deadline: float,
              times: dict, log) -> dict:
  """A cell from its start to its test accuracy (or the reason there is none): the limit ends
  its training so that it is tested by its end; if it still runs then, the clock stops it and
  a rerun tests it, before `test_deadline` (later parts give up that time)."""
  since = time.time()
  end = deadline if cell.max_s is None else min(deadline, since + cell.max_s)
  # The limit counts training time over resumes: a cell an earlier run ended early goes on.
  limit = (max(end - since - times["start_s"] - times["end_s"], USED_UP)
           + _earlier_train_time(workdir) if cell.limit else None)
  log(f"train: {cell.name} ({cell.config}), up to {end - since:.0f} s"
      + (f"; max_train_time_s={limit:.0f}" if limit is not None else "; no time limit"))
  process = _run_process(_command(cell, workdir, cache, limit), workdir, end,
                         times["grace_s"], log, watch=cell, limit=limit)
  process["max_train_time_s"] = limit
  stopped = process["stopped"] or ""
  if _results(workdir) is None and stopped.startswith("stopped for time (checkpoint"):
    if test_deadline - time.time() >= times["test_s"]:
      rerun = _test_after_stop(cell, workdir, cache, test_deadline, times, log)
      process["test_after_stop"] = {k: rerun[k] for k in ("exit_code", "wall_s", "stopped")}
    else:
      process["test_after_stop"] = {"skipped": f"{test_deadline - time.time():.0f} s left"}
  return _result(cell, workdir, process, since)


def run(work: str, dry_run: bool, deadline: float, log, fast: bool = False,
        test_deadline: float | None = None) -> list[dict]:
  """Every cell in order while the clock allows (cells start and train before `deadline`; a
  stopped cell's test may run until `test_deadline`); returns one result per cell."""
  test_deadline = deadline if test_deadline is None else test_deadline
  times = TIMES["dry" if dry_run else "real"]
  cache = os.path.join(work, "jax_cache")
  results = []
  for cell in cells(work, dry_run, fast):
    workdir = os.path.join(work, "train", cell.name)
    if _results(workdir) is not None and not _extends(cell, workdir):
      log(f"train: {cell.name} finished in an earlier run; kept")
      results.append(_result(cell, workdir, None, None))
      continue
    left = deadline - time.time()
    if left < cell.min_s:
      log(f"train: {cell.name} skipped: {left:.0f} s left, it needs at least {cell.min_s:.0f} s")
      result = _result(cell, workdir, None, None)
      result["skipped"] = f"time: {left:.0f} s left, needs at least {cell.min_s:.0f} s"
      results.append(result)
      continue
    result = _one_cell(cell, workdir, cache, deadline, test_deadline, times, log)
    if result["status"] == "finished":
      shown = (f"test accuracy {result['test_accuracy']:.2f}% (paper {cell.paper}) after "
               f"{result['steps_trained']} of {result['planned_num_train_steps']} steps")
    else:
      shown = f"{result['status']}, {result['stopped'] or 'exit ' + str(result['exit_code'])}"
    log(f"train: {cell.name}: {shown} ({time.time() - deadline + left:.0f} s)")
    results.append(result)
  return results


def _results(workdir: str) -> dict | None:
  path = os.path.join(workdir, "results.json")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _extends(cell: Cell, workdir: str) -> bool:
  """A finished cell that its time limit ended early: a later run trains it further."""
  return bool((_results(workdir) or {}).get("stopped_early")) and cell.limit


def _earlier_train_time(workdir: str) -> float:
  """The training seconds of a cell an earlier run ended early (0 for a new cell)."""
  return float((_results(workdir) or {}).get("train_time_s") or 0.0)


def status(work: str, dry_run: bool, fast: bool = False) -> list[dict]:
  """The cells' state in the work folder, running nothing (when training is not asked for)."""
  return [_result(cell, os.path.join(work, "train", cell.name), None, None)
          for cell in cells(work, dry_run, fast)]
