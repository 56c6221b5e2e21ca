"""The one way a test starts the project's commands as subprocesses (train.py, eval.py, the
grid `python -m lra.commands.leaderboard`, `python -m lra.data`, scripts/): run() waits for
one, start() and finish() are for one that a test signals or kills on the way.

Every command gets the test environment: this process's variables (the session's compilation
cache among them), the checkout first on PYTHONPATH, JAX on the CPU, ONE CPU device unless
the test asks for more with devices=N (tests/conftest.py gives the pytest processes 8 fake
devices for the in-process sharding tests; a train.py run on 8 of them compiles an 8-way
program for nothing), and XLA's cheapest compile (FAST_COMPILE: a test's command is nearly
all compiling; xla_flags="" gives XLA's full optimisation, as a user's run has it). An exit
code other than the expected one fails the test with the command and the tail of its output.
A test that starts a command is marked @pytest.mark.commands (pytest.ini; `pytest -m
commands` selects them); run() and start() check that it is."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# XLA's cheapest compile (a third less CPU time for a tiny train.py run): the commands of the
# tests are all compiling and hardly any training. The HLO, so the FLOP counts and XLA's memory
# analysis, is the same; only the machine code is less optimised.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
NONZERO = "non-zero"  # expect=NONZERO: any exit code but 0
TAIL = 3000  # characters of each output stream a failure shows

_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=\S*")
_current_test = None  # the running test's item (set by tests/conftest.py)


def environment(devices: int = 1, xla_flags: str | None = None, path=(), env=None) -> dict:
  """The environment of a command: os.environ, PYTHONPATH = the checkout then `path`,
  JAX_PLATFORMS=cpu, XLA_FLAGS = the inherited ones without their device count, then
  `xla_flags` (None: FAST_COMPILE), then `devices` fake CPU devices where more than 1; last
  `env`, where a value of None removes the variable."""
  xla_flags = FAST_COMPILE if xla_flags is None else xla_flags
  inherited = _DEVICE_COUNT.sub("", os.environ.get("XLA_FLAGS", "")).split()
  flags = [*inherited, *xla_flags.split()]
  if devices != 1:
    flags.append(f"--xla_force_host_platform_device_count={devices}")
  out = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *map(str, path)]),
         "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}
  for key, value in (env or {}).items():
    if value is None:
      out.pop(key, None)
    else:
      out[key] = value
  return out


def _command(args) -> list[str]:
  _check_marked()
  return [sys.executable, *map(os.fspath, args)]


def _check_marked() -> None:
  if _current_test is not None and _current_test.get_closest_marker("commands") is None:
    pytest.fail(f"{_current_test.nodeid} starts a command: mark it @pytest.mark.commands",
                pytrace=False)


def _text(stream) -> str:
  if stream is None:
    return ""
  return stream.decode(errors="replace") if isinstance(stream, bytes) else stream


def _report(command, cwd, what: str, stdout, stderr, output=None) -> str:
  parts = [f"{shlex.join(command)}\n  (in {cwd}) {what}"]
  if output is not None:  # stdout and stderr went to this file
    text = ""
    if os.path.exists(output):
      with open(output, errors="replace") as f:
        text = f.read()
    parts.append(f"--- its output, {output} (last {TAIL} characters) ---\n{text[-TAIL:]}")
  for name, stream in (("stdout", stdout), ("stderr", stderr)):
    text = _text(stream)
    if text:
      parts.append(f"--- {name} (last {TAIL} characters) ---\n{text[-TAIL:]}")
  return "\n".join(parts)


def _expected(returncode: int, expect) -> bool:
  if expect is None:
    return True
  if expect == NONZERO:
    return returncode != 0
  return returncode == expect


def run(*args, cwd=ROOT, expect=0, timeout: float = 600, devices: int = 1,
        xla_flags: str | None = None, path=(), env=None, output=None,
        **kwargs) -> subprocess.CompletedProcess:
  """`python ARGS` in `cwd`, waited for (text output captured, or stdout and stderr both into
  the file `output`). Fails the test with the command and its output where the exit code is
  not `expect` (an int, NONZERO, or None: any) or the command runs past `timeout` seconds."""
  command = _command(args)
  env = environment(devices, xla_flags, path, env)
  if output is None:
    kwargs.setdefault("capture_output", True)
    streams = {}
  else:
    f = open(output, "w")
    streams = dict(stdout=f, stderr=subprocess.STDOUT)
  try:
    proc = subprocess.run(command, cwd=cwd, env=env, text=True, timeout=timeout, **streams,
                          **kwargs)
  except subprocess.TimeoutExpired as e:
    pytest.fail(_report(command, cwd, f"ran past its {timeout} s and was killed", e.stdout,
                        e.stderr, output))
  finally:
    if output is not None:
      f.close()
  if not _expected(proc.returncode, expect):
    pytest.fail(_report(command, cwd, f"exited {proc.returncode}, expected {expect}",
                        proc.stdout, proc.stderr, output))
  return proc


def error_line(proc) -> str:
  """The one `error: ...` line of a command that failed as a user's mistake should: a
  non-zero exit, one such line on stderr, no traceback."""
  lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  return lines[0]


def start(*args, cwd=ROOT, devices: int = 1, xla_flags: str | None = None, path=(), env=None,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs) -> subprocess.Popen:
  """`python ARGS` started in `cwd` and not waited for (text pipes unless told otherwise);
  finish() waits for it."""
  command = _command(args)
  proc = subprocess.Popen(command, cwd=cwd, env=environment(devices, xla_flags, path, env),
                          stdout=stdout, stderr=stderr, text=True, **kwargs)
  proc.cwd = cwd
  return proc


def finish(proc: subprocess.Popen, expect=0, timeout: float = 600) -> tuple[str, str]:
  """(stdout, stderr) of a started command, once it ended; fails the test as run() does."""
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(_report(proc.args, proc.cwd, f"ran past its {timeout} s and was killed", out,
                        err))
  if not _expected(proc.returncode, expect):
    pytest.fail(_report(proc.args, proc.cwd, f"exited {proc.returncode}, expected {expect}",
                        out, err))
  return _text(out), _text(err)
