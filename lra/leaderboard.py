"""One command for a grid of training runs: models x tasks, one preset, then the accuracy table.

  python -m lra.leaderboard --models=transformer,performer --tasks=listops,image --preset=cpu
                            [--root=runs/leaderboard] [--set KEY=VALUE ...] [--seeds=0,1,2]
                            [--print_commands] [--slurm=FILE]

Each (task, model) is one `python train.py --config=configs/TASK.py:MODEL[,PRESET]
--workdir=ROOT/TASK/MODEL[-PRESET]` run in its own process, one after another: a finished run
(a valid results.json that records what this grid asks for) is skipped, an unfinished one resumes
from its checkpoints, a failed one is reported and the grid goes on (exit 1 at the end). Then
ROOT/table/accuracy.{md,csv,json} is written as `python eval.py accuracy ROOT --out=ROOT/table`
writes it.

--models / --tasks: comma separated; `all` = every registered mixer / every task.
`transformer_chunked` is the Transformer with `model.attention.implementation=chunked` (exact
attention in O(N) memory); its results.json names the mixer `transformer`, the table gives it a
row of its own (lra.reporting.results.run_label).
--preset: cpu (the configs' `,cpu` sizes), paper (`,paper`: the paper's appendix values) or
base (the plain config: the original repository's base values).
--set KEY=VALUE: `--config.KEY=VALUE` for every run; TASK:KEY=VALUE or MODEL:KEY=VALUE for the
runs of one task or one model (a key must exist in the config of every run it reaches).
--seeds=0,1,2: every (task, model) once per seed (`--config.seed=N`; the data keeps its own
data.seed), all cells of one seed first, in the workdir MODEL[-PRESET]_seedN (seed 0: the name
without --seeds); the table gives each cell's mean +- std over its seeds.
--print_commands prints the train.py command of every run and --slurm=FILE writes a SLURM array
script of them; neither runs anything.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shlex
import signal
import sys
import time

from lra import cli, config_record, paths
from lra.errors import UserError, run_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # train.py, configs/
PRESETS = {"cpu": ",cpu", "paper": ",paper", "base": ""}
# Grid names that are another mixer with settings: (registered mixer, --set items).
ALIASES = {"transformer_chunked": ("transformer", ("model.attention.implementation=chunked",))}


@dataclasses.dataclass(frozen=True)
class Run:
  task: str
  model: str                   # the grid's name (a registered mixer or an alias)
  workdir: str
  command: tuple[str, ...]     # python train.py ...
  expect: tuple[tuple[str, object], ...]  # recorded config values a finished run must have

  @property
  def name(self) -> str:
    return f"{self.task}/{os.path.basename(self.workdir)}"


def _names(text: str, flag: str, valid: list[str]) -> list[str]:
  """'a,all,b' -> names, `all` expanded to the registered ones; a bad one is a UserError."""
  items = [t.strip() for t in text.split(",")] if text.strip() else []
  if not items or not all(items):
    raise UserError(f"--{flag}={text!r}: give names, comma separated, or all (valid: "
                    f"{', '.join(valid)})")
  names = []
  for item in items:
    found = [n for n in valid if n not in ALIASES] if item == "all" else [item]
    if item != "all" and item not in valid:
      raise UserError(f"--{flag}: unknown name {item!r} (valid: all, {', '.join(valid)})")
    names += [n for n in found if n not in names]
  return names


def _literal(text: str):
  """A --set value as train.py's override gives it to the config, as JSON records it: a
  Python literal where it is one, else the text itself."""
  return json.loads(json.dumps(cli.literal(text)))


def _parse_set(item: str, scopes: list[str]) -> tuple[str | None, str, str]:
  """'[SCOPE:]KEY=VALUE' -> (scope or None, key, value)."""
  scope, key, value = cli.split_set(item, "KEY=VALUE or TASK:KEY=VALUE or MODEL:KEY=VALUE",
                                    "num_train_steps=100", scoped=True)
  if key.startswith(("-", "config.")):
    raise UserError(f"--set {item!r}: give the config key alone, e.g. --set "
                    f"{key.lstrip('-').removeprefix('config.')}={value}")
  if scope is not None and scope not in scopes:
    raise UserError(f"--set {item!r}: {scope!r} is no task or model of this grid "
                    f"({', '.join(scopes)})")
  return scope, key, value


def _has_key(config, key: str) -> bool:
  node = config
  for part in key.split("."):
    if not hasattr(node, "keys") or part not in node.keys():
      return False
    node = node[part]
  return True


def _config(task: str, model: str, preset: str):
  """The run's config, loaded as train.py loads it (no JAX): a bad one is one line now."""
  from configs import task_config
  try:
    return task_config(task).get_config(model + PRESETS[preset])
  except UserError as e:  # a model's SettingError included
    raise UserError(f"{task} config of {model} ({preset}): {e}") from None


def _script_paths() -> tuple[str, str]:
  """train.py and configs/ as the commands name them: relative where this process runs in
  the repository (the printed commands then read as the README's), else absolute."""
  here = os.path.exists(REPO) and os.path.samefile(os.getcwd(), REPO)
  return ("train.py", "configs") if here else (os.path.join(REPO, "train.py"),
                                               os.path.join(REPO, "configs"))


def _workdir(root: str, task: str, model: str, preset: str, seed: int | None) -> str:
  """ROOT/TASK/MODEL[-PRESET][_seedN]: seed 0 (or none) keeps the name a grid without --seeds
  gives, so its finished runs are found."""
  name = (model if preset == "base" else f"{model}-{preset}") + (f"_seed{seed}" if seed else "")
  return f"{root.rstrip('/')}/{task}/{name}" if paths.is_remote(root) else os.path.join(
      root, task, name)


def _seeds(text: str | None) -> list[int | None]:
  """--seeds=0,1,2 -> [0, 1, 2]; [None] without it (the config's own seed, as before)."""
  if text is None:
    return [None]
  items = [t.strip() for t in text.split(",")]
  if not all(t.isascii() and t.isdigit() for t in items) or len(set(map(int, items))) < len(
      items):
    raise UserError(f"--seeds={text!r}: give distinct non-negative integers, comma separated, "
                    f"e.g. --seeds=0,1,2")
  return [int(t) for t in items]


def _cell_settings(task: str, model: str, preset: str, sets: list
                   ) -> tuple[int, list[tuple[str, str]]]:
  """(num_train_steps, the (key, value) overrides) of one cell, each key checked first."""
  mixer, extra = ALIASES.get(model, (model, ()))
  config = _config(task, mixer, preset)
  mine = [_parse_set(item, [])[1:] for item in extra] + [
      (key, value) for scope, key, value in sets if scope in (None, task, model)]
  for key, value in mine:
    if not _has_key(config, key):
      raise UserError(f"--set {key}={value}: the {task} config of {model} has no key "
                      f"{key!r} (see configs/base.py and configs/{task}.py); a key that "
                      f"only some runs have takes a scope: TASK:KEY=VALUE or "
                      f"MODEL:KEY=VALUE")
  return config.num_train_steps, mine


def plan(args) -> list[Run]:
  """The grid's runs (every cell of one seed, then the next seed's), every config loaded and
  every --set key checked first: a mistake is one line before anything runs."""
  from lra.data.tasks import NAMES
  from models import registry
  if args.preset not in PRESETS:
    raise UserError(f"--preset={args.preset!r}: give one of {', '.join(PRESETS)}")
  tasks = _names(args.tasks, "tasks", list(NAMES))
  models = _names(args.models, "models", registry.names() + list(ALIASES))
  sets = [_parse_set(item, tasks + models) for item in args.sets]
  seeds = _seeds(args.seeds)
  if seeds != [None] and any(key == "seed" for _, key, _ in sets):
    raise UserError("--set seed=...: --seeds gives each run its seed; give one of the two")
  if paths.resolve(args.root).exists() and not paths.resolve(args.root).is_dir():
    raise UserError(f"--root={args.root} is a file; name a folder for the runs")
  train, configs = _script_paths()
  cells = [(task, model, _cell_settings(task, model, args.preset, sets))
           for task in tasks for model in models]
  runs = []
  for seed, (task, model, (steps, mine)) in itertools.product(seeds, cells):
    mine = mine + ([("seed", str(seed))] if seed is not None else [])
    expect = {"num_train_steps": steps, **{key: _literal(value) for key, value in mine}}
    workdir = _workdir(args.root, task, model, args.preset, seed)
    command = ("python", train, f"--config={configs}/{task}.py:{ALIASES.get(model, (model,))[0]}"
               f"{PRESETS[args.preset]}", f"--workdir={workdir}",
               *(f"--config.{k}={v}" for k, v in mine))
    runs.append(Run(task, model, workdir, command, tuple(expect.items())))
  return runs


def finished(run: Run) -> tuple[dict | None, str]:
  """(its results, "") when `run` can be skipped, else (None, why it runs: "" for a new run).
  train.py decides the rest: it resumes, extends, re-tests, or refuses in one line."""
  from lra.reporting import results
  file = paths.resolve(run.workdir) / "results.json"
  if not file.exists():
    return None, ""
  try:
    found = json.loads(file.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    return None, f"its results.json is unreadable ({type(e).__name__})"
  why = results.problem(found)
  mixer = ALIASES.get(run.model, (run.model,))[0]
  if why is None and (found["task"], found["model"]) != (run.task, mixer):
    why = f"it is a run of {found['model']} on {found['task']}"
  if why is not None:
    return None, f"its results.json is not valid ({why})"
  recorded = config_record.flat(found.get("config") or {})
  for key, value in run.expect:
    if recorded.get(key, "(none)") != value:
      return None, (f"its results.json records {key}={recorded.get(key, '(none)')!r}, this "
                    f"grid asks for {value!r}")
  return found, ""


def _clock(seconds: float) -> str:
  s = int(seconds)
  return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _die_with_parent() -> None:
  """In the child: SIGTERM when this grid process dies (even by SIGKILL), so no trainer goes
  on alone holding its workdir's lock; it saves a checkpoint and stops (Linux only)."""
  try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


class Stop:
  """SIGTERM or Ctrl-C to the grid: the running trainer saves and stops, and no other starts.

  The trainer is in this process group, so it may already have had the same signal from the
  terminal or the scheduler; a second one of a kind kills it at once (train.py), so it is told
  with the other stop signal, which it handles the same way. A second signal here kills."""
  OTHER = {signal.SIGINT: signal.SIGTERM, signal.SIGTERM: signal.SIGINT}

  def __init__(self):
    self.signum, self.child = None, None
    for signum in self.OTHER:
      signal.signal(signum, self._handle)

  def _handle(self, signum, frame):
    del frame
    signal.signal(signum, signal.SIG_DFL)
    self.signum = self.signum or signum
    if self.child is not None and self.child.poll() is None:
      self.child.send_signal(self.OTHER[signum])


def execute(run: Run, stop: Stop) -> tuple[int, str]:
  """Runs train.py; its stdout passes through, its stderr too, and its last line is kept
  (a user error is one `error:` line). Returns (exit status, last stderr line)."""
  import subprocess
  proc = subprocess.Popen([sys.executable, *run.command[1:]], stderr=subprocess.PIPE,
                          text=True, errors="replace", preexec_fn=_die_with_parent)
  stop.child = proc
  last = ""
  for line in proc.stderr:
    sys.stderr.write(line)
    sys.stderr.flush()
    last = line.strip() or last
  code = proc.wait()
  stop.child = None
  if code < 0:
    last = f"killed by {signal.Signals(-code).name}"
  return code, last


def _say(text: str) -> None:
  print(text, flush=True)  # before a child writes to the same stdout


def run_grid(runs: list[Run]) -> tuple[dict, Stop]:
  """Every run in turn; returns ({"done"|"skipped"|"failed"|"stopped": [(run, text)]}, the
  Stop)."""
  stop, start = Stop(), time.time()
  outcome = {"done": [], "skipped": [], "failed": [], "stopped": []}
  for i, run in enumerate(runs, 1):
    if stop.signum:
      break
    head = f"[{i}/{len(runs)}] {run.name}"
    left = f"{len(runs) - i} left"
    found, why = finished(run)
    if found is not None:
      outcome["skipped"].append((run, ""))
      _say(f"{head}: skipped, finished before (test accuracy "
           f"{found['test_accuracy']:.4f}); {left}, grid {_clock(time.time() - start)}")
      continue
    resuming = (paths.resolve(run.workdir) / "checkpoints").exists()
    _say(f"{head}: {'resuming' if resuming else 'starting'}{f' ({why})' if why else ''}; "
         f"{left} after it, grid {_clock(time.time() - start)}")
    run_start = time.time()
    code, last = execute(run, stop)
    took = f"run {_clock(time.time() - run_start)}, grid {_clock(time.time() - start)}"
    result = finished(run)[0] if code == 0 else None
    if result is not None:
      outcome["done"].append((run, ""))
      _say(f"{head}: done, test accuracy {result['test_accuracy']:.4f}; {took}; {left}")
    elif stop.signum:
      outcome["stopped"].append((run, last))
      _say(f"{head}: stopped (exit {code}; it resumes when the grid runs again); {took}")
    else:
      text = f"exit {code}: {last}" if code else "exit 0 but no valid results.json"
      outcome["failed"].append((run, text))
      _say(f"{head}: FAILED ({text}); {took}; {left}, going on")
  return outcome, stop


def write_table(root: str) -> None:
  """The accuracy table of every run under root, as `python eval.py accuracy ROOT
  --out=ROOT/table` writes it (lra.reporting)."""
  from lra.references import paper_configs
  from lra.reporting import accuracy, results
  warnings: list[str] = []
  found = results.collect_results([root], warnings, references=paper_configs)
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)
  if not found:
    _say(f"no finished run under {root}: no table written")
    return
  out = paths.resolve(root) / "table"
  _, text = accuracy.write_tables(found, out, paper_configs)
  _say(f"{text}\nwrote the accuracy table of {root}: {out}/accuracy.{{md,csv,json}}")


def _summary(outcome: dict, total: int, seconds: float) -> None:
  counts = [f"{len(v)} {k}" for k, v in outcome.items() if v or k != "stopped"]
  if total > sum(map(len, outcome.values())):
    counts.append(f"{total - sum(map(len, outcome.values()))} not started")
  _say(f"grid: {total} runs: {', '.join(counts)}; {_clock(seconds)}")
  for run, text in outcome["failed"]:
    _say(f"  failed: {run.name} ({text}); to retry: {shlex.join(run.command)}")


def slurm_script(runs: list[Run], invocation: str, root: str) -> str:
  """A SLURM array script: array task i runs command i (from this directory)."""
  lines = ["#!/bin/bash", f"# Written by: {invocation}",
           "# One array task per run. Add your cluster's #SBATCH lines (partition, --gres, "
           "--time);", "# submit with: sbatch THIS_FILE. A run that is stopped or fails "
           "resumes when its task", "# runs again (sbatch --array=I THIS_FILE). Afterwards: "
           f"python eval.py accuracy {shlex.quote(root)} --out={shlex.quote(root + '/table')}",
           "#SBATCH --job-name=lra-grid",
           f"#SBATCH --array=0-{len(runs) - 1}", "set -euo pipefail",
           f"cd {shlex.quote(os.getcwd())}", "RUNS=("]
  lines += [f"  {shlex.quote(shlex.join(run.command))}" for run in runs]
  lines += [")", 'eval "${RUNS[$SLURM_ARRAY_TASK_ID]}"']
  return "\n".join(lines) + "\n"


def _main(args) -> None:
  runs = plan(args)
  if args.print_commands or args.slurm:
    if args.print_commands:
      for run in runs:
        print(shlex.join(run.command))
    if args.slurm:
      if paths.resolve(args.slurm).is_dir():
        raise UserError(f"--slurm={args.slurm} is a folder; name the script file to write")
      invocation = shlex.join(["python", "-m", "lra.leaderboard", *args.argv])
      paths.write_text(args.slurm, slurm_script(runs, invocation, args.root))
      print(f"wrote {args.slurm}: a SLURM array of {len(runs)} runs (sbatch {args.slurm})")
    return
  start = time.time()
  outcome, stop = run_grid(runs)
  _summary(outcome, len(runs), time.time() - start)
  if stop.signum:
    name = signal.Signals(stop.signum).name
    print(f"error: stopped by {name}; to resume, run the same command again", file=sys.stderr)
    sys.exit(128 + stop.signum)
  write_table(args.root)
  if outcome["failed"]:
    sys.exit(1)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m lra.leaderboard", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--models", default="", help="comma separated mixer names, or all")
  p.add_argument("--tasks", default="", help="comma separated task names, or all")
  p.add_argument("--preset", default="", help="cpu, paper or base")
  p.add_argument("--root", default="runs/leaderboard", help="one workdir per run under it")
  p.add_argument("--set", dest="sets", action="append", default=[],
                 metavar="[TASK:|MODEL:]KEY=VALUE",
                 help="--config.KEY=VALUE for every run (or one task's, one model's runs)")
  p.add_argument("--seeds", metavar="0,1,2",
                 help="run every cell once per seed (config.seed); the table: mean +- std")
  p.add_argument("--print_commands", action="store_true",
                 help="print one train.py command per run; run nothing")
  p.add_argument("--slurm", metavar="FILE", help="write a SLURM array script; run nothing")
  return p


def main(argv=None) -> None:
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parser().parse_args(argv)
  args.argv = argv  # for the SLURM script's note of how it was made
  run_command(_main, args)  # a bad name, --set, preset or --seeds: one line, exit 1


if __name__ == "__main__":
  main()
