"""The accelerator run's clock and log, the record of each part, and a part run in its own
process or guarded against a traceback."""
from __future__ import annotations

import subprocess
import time
import traceback

from lra.locations import PACKAGE_ROOT as ROOT  # the checkout: each part runs there

TAIL_LINES = 60  # of each part's output, into tails.txt


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


def child(run: Run, name: str, command: list[str], timeout: float, planned: float,
          env: dict) -> bool:
  """One part in its own process (in the checkout's root); its output's tail goes to the log
  when it fails."""
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


def guarded(run: Run, name: str, part):
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
