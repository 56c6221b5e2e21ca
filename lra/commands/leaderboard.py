"""One command for a grid of training runs: models x tasks, one preset, then the accuracy table.

  python -m lra.commands.leaderboard --models=transformer,performer --tasks=listops,image
      --preset=cpu [--root=runs/leaderboard] [--config.KEY=VALUE ...] [--seeds=0,1,2]
      [--sweep=KEY[,KEY...]=V1,V2,... ...] [--import=MODULE ...] [--print_commands]
      [--slurm=FILE]

Each (task, model) is one `python train.py --config=configs/TASK.py:MODEL[,PRESET]
--workdir=ROOT/TASK/MODEL[-PRESET]` run in its own process, one after another: a finished run
(a valid results.json that records what this grid asks for) is skipped, an unfinished one resumes
from its checkpoints, a failed one is reported and the grid goes on (exit 1 at the end); a
warning that several runs print is shown once. Before the first run, every run's settings are
checked, and so are the runs ROOT already holds: those train.py would not go on with (a changed
setting) are one line, unless --allow_config_change. Then ROOT/table/accuracy.{md,csv,json} is
written as `python eval.py accuracy` writes it, of this grid's runs and of the other models and
tasks under ROOT (a run of a model and task this grid ran, made by another command, is left
out and counted).

--models / --tasks: comma separated; `all` = every registered mixer / every task.
`transformer_chunked` is the Transformer with `model.attention.implementation=chunked` (exact
attention in O(N) memory), `mega_chunk` Mega with the paper's `model.attention.chunk_size` per
task (Mega-chunk); their results.json names the mixer (`transformer`, `mega`), the table gives
each a row of its own (lra.reporting.results.run_label).
--preset: cpu (the configs' `,cpu` sizes), paper (`,paper`: the paper's appendix values) or
base (the plain config: the original repository's base values).
--config.KEY=VALUE: passed on to every run as train.py takes it; --config.KEY@TASK=VALUE or
--config.KEY@MODEL=VALUE to the runs of one task or one model (a key must exist in the config
of every run it reaches; a scoped value overrides the plain one, and a @TASK and a @MODEL
value reaching one run must agree). The old `--set KEY=VALUE`
still works, with one line on its spelling. Before the first run starts, every run's settings
are checked as its train.py checks them (grid_plan.check_runs): a refused one is one line.
--controls adds the window-limited control rows window16 and window64 (attention within a
sliding window of w tokens in every layer, mean-pooled, no global token: how much of each task
local context alone solves); `transformer_rotary` (a --models name) is the Transformer with
rotary positions in place of sinusoidal ones.
--seeds=0,1,2: every (task, model) once per seed (`--config.seed=N`; the data keeps its own
data.seed), all cells of one seed first, in the workdir MODEL[-PRESET]_seedN (seed 0: the name
without --seeds); the table gives each cell's mean +- std over its seeds and how many of
them are at chance (`2/5 at chance`, docs/eval.md).
--sweep=KEY=V1,V2,... (repeatable; several flags make their product; KEY any config key, e.g.
learning_rate, model.emb_dim; values read as the key's type; linked keys that move together,
a parenthesised value per key and point: --sweep=model.emb_dim,model.qkv_dim=(16,16),(32,32)):
every cell (and seed) once per point, in the workdir
MODEL[-PRESET][_seedN]_sweep/KEY=VALUE,KEY=VALUE (every key; lra.commands.sweep_axis); the
table takes each cell's point of best validation accuracy (per seed), names it and gives the
spread over the sweep, and draws accuracy against each swept key, or linked keys
(lra.reporting.sweeps).
--protocol=spt: every cell (and seed) is two runs, in order: a denoise pretraining on its
training inputs (--config.objective=denoise, workdir MODEL[-PRESET][_seedN]_pretrain), then a
fine-tune from its encoder (--config.init_from=that workdir, workdir ..._spt), which runs only
once the pretraining finished; the table lists the fine-tunes as MODEL (SPT) rows.
--allow_config_change is passed on to every run: a run whose settings differ from its
checkpoints' (a changed --config) goes on with them, recorded in its results.json; without it
the grid refuses such runs in one line before the first run starts, and a new --root starts
every run afresh.
--print_commands prints the train.py command of every run and --slurm=FILE writes a SLURM array
script of them; neither runs anything.
--import=MODULE (repeatable; or LRA_IMPORT=MODULE,...): a module of your own that registers a
mixer, imported here before --models is read and passed on to every run's train.py command
(printed and SLURM commands included). Its rows are marked not comparable with the paper:
this repository has no paper-comparable config of a model outside models/.
"""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time

from lra import cli, config_record, paths, plugins
from lra.errors import UserError, fail, run_command
from lra.commands.grid_plan import ALIASES, Run, array_tasks, check_runs, plan, slurm_script

# What train.py's "use a new --workdir, or add --allow_config_change" means for a grid run.
GRID_ADVICE = ("in this grid: a new --root gives every run a new workdir; --allow_config_change "
               "on the grid's command is passed on to every run")


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
  why = _pretrain_problem(found) if run.denoise else results.problem(found)
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


def _pretrain_problem(found) -> str | None:
  """Why a pretraining's results.json is not a finished denoise run (None when it is): it has
  masked-token figures on validation instead of a test accuracy (lra.training.pretrain)."""
  if not isinstance(found, dict) or found.get("objective") != "denoise":
    return "not a denoise run's"
  if any(key not in found for key in ("task", "model")):
    return "no task or model field"
  value = found.get("val_masked_accuracy")
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
    return f"val_masked_accuracy={value!r} is not an accuracy between 0 and 1"
  return None


def _score(found: dict) -> str:
  if found.get("objective") == "denoise":
    return f"masked-token accuracy on validation {found['val_masked_accuracy']:.4f}"
  return f"test accuracy {found['test_accuracy']:.4f}"


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
    self.warned: set[str] = set()  # the runs' warnings shown so far: each once per grid
    for signum in self.OTHER:
      signal.signal(signum, self._handle)

  def _handle(self, signum, frame):
    del frame
    signal.signal(signum, signal.SIG_DFL)
    self.signum = self.signum or signum
    if self.child is not None and self.child.poll() is None:
      self.child.send_signal(self.OTHER[signum])


def _pass_on(line: str, out, warned: set[str]) -> None:
  """A line of a run's output to `out`, but a `warning:` line shown before in this grid (the
  same short-run warning from every point of a sweep)."""
  if line.startswith("warning: "):
    if line in warned:
      return
    warned.add(line)
  out.write(line)
  out.flush()


def execute(run: Run, stop: Stop) -> tuple[int, str]:
  """Runs train.py; its stdout and stderr pass through (a warning once per grid), and the
  last stderr line is kept (a user error is one `error:` line). Returns (exit status, last
  stderr line)."""
  import subprocess
  import threading
  # -u: its lines reach this pipe as they are printed, as they reached the terminal.
  proc = subprocess.Popen([sys.executable, "-u", *run.command[1:]], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace",
                          preexec_fn=_die_with_parent)
  stop.child = proc
  def stdout():  # beside stderr, so that neither pipe fills up while the other is read
    for line in proc.stdout:
      _pass_on(line, sys.stdout, stop.warned)
  out = threading.Thread(target=stdout)
  out.start()
  last = ""
  for line in proc.stderr:
    _pass_on(line, sys.stderr, stop.warned)
    last = line.strip() or last
  out.join()
  code = proc.wait()
  stop.child = None
  if code < 0:
    last = f"killed by {signal.Signals(-code).name}"
  return code, last


def _say(text: str) -> None:
  print(text, flush=True)  # before a child writes to the same stdout


def run_grid(runs: list[Run]) -> tuple[dict, Stop]:
  """Every run in turn; returns ({"done"|"skipped"|"failed"|"stopped"|"not run": [(run,
  text)]}, the Stop). A run that waits for another (a fine-tune, its pretraining) is not run
  when that one failed or was not run."""
  stop, start = Stop(), time.time()
  outcome = {"done": [], "skipped": [], "failed": [], "stopped": [], "not run": []}
  for i, run in enumerate(runs, 1):
    if stop.signum:
      break
    head = f"[{i}/{len(runs)}] {run.name}"
    left = f"{len(runs) - i} left"
    if run.after in {r.workdir for r, _ in outcome["failed"] + outcome["not run"]}:
      text = f"its pretraining {run.after} did not finish"
      outcome["not run"].append((run, text))
      _say(f"{head}: not run ({text}); {left}, going on")
      continue
    found, why = finished(run)
    if found is not None:
      outcome["skipped"].append((run, ""))
      _say(f"{head}: skipped, finished before ({_score(found)}); {left}, grid "
           f"{_clock(time.time() - start)}")
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
      _say(f"{head}: done, {_score(result)}; {took}; {left}")
    elif stop.signum:
      outcome["stopped"].append((run, last))
      _say(f"{head}: stopped (exit {code}; it resumes when the grid runs again); {took}")
    else:
      text = f"exit {code}: {last}" if code else "exit 0 but no valid results.json"
      outcome["failed"].append((run, text))
      _say(f"{head}: FAILED ({text}); {took}; {left}, going on")
      if "--workdir" in last:  # train.py's advice, in the grid's terms
        _say(f"  {GRID_ADVICE}")
  return outcome, stop


def _tabled(root: str, runs: list[Run], warnings: list[str]) -> tuple[list[str], list[str]]:
  """(the run folders of the closing table, those under root it leaves out): this grid's
  finished runs, and the runs under root of the (task, mixer)s it did not run; another
  command's run of a model and task that this grid ran (another sweep, other seeds or
  settings) is left out, so the table shows what this grid ran."""
  from lra.reporting import published, results
  mine = {str(paths.resolve(run.workdir)) for run in runs}
  cells = {(run.task, ALIASES.get(run.model, (run.model,))[0]) for run in runs}
  kept, left = [], []
  for result in results.read_results([root], warnings):
    folder = published.place(result)  # on this machine (its "workdir" is its name in root)
    if folder in mine or (result["task"], result["mixer"]) not in cells:
      kept.append(folder)
    else:
      left.append(folder)
  return kept, left


def write_table(root: str, runs: list[Run]) -> None:
  """The accuracy table of this grid's `runs` (and of the other models and tasks under root),
  as `python eval.py accuracy` writes it (lra.reporting), in ROOT/table."""
  from lra.commands.references import paper_configs
  from lra.reporting import accuracy, results
  warnings: list[str] = []
  folders, left = _tabled(root, runs, warnings)
  found = results.collect_results(folders, warnings, references=paper_configs,
                                  root=root) if folders else []  # runs named within root
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)
  if not found:
    _say(f"no finished run under {root}: no table written")
    return
  out = paths.resolve(root) / "table"
  table, text = accuracy.write_tables(found, out, paper_configs)
  _say(f"{text}\nwrote the accuracy table of {root}: {out}/accuracy.{{md,csv,json}}")
  if left:
    _say(f"not in it: {len(left)} run{'s' if len(left) > 1 else ''} under {root} of the models "
         f"and tasks this grid ran, made by another command (e.g. {left[0]}); python eval.py "
         f"accuracy {shlex.quote(root)} tables every run there")
  from lra.reporting import sweep_chart
  for chart in sweep_chart.write_charts(table, out):  # accuracy against each swept key
    _say(f"wrote {chart}")
  _length_chart(folders, root, out)


def _length_chart(folders: list[str], root: str, out) -> None:
  """ROOT/table/length.{md,json,png} where runs hold per-length test figures (a
  length-generalisation task: lra.reporting.lengths); their read warnings are said above."""
  from lra.reporting import length_chart, lengths, results
  warnings: list[str] = []
  runs = lengths.usable(results.read_results(folders, [], root), warnings)
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)
  if length_chart.write_lengths(runs, out)[0]:
    _say(f"wrote the length-generalisation chart and table of {root}: "
         f"{out}/length.{{md,json,png}}")


def _summary(outcome: dict, total: int, seconds: float) -> None:
  counts = [f"{len(v)} {k}" for k, v in outcome.items()
            if v or k in ("done", "skipped", "failed")]
  if total > sum(map(len, outcome.values())):
    counts.append(f"{total - sum(map(len, outcome.values()))} not started")
  _say(f"grid: {total} runs: {', '.join(counts)}; {_clock(seconds)}")
  for run, text in outcome["failed"]:
    _say(f"  failed: {run.name} ({text}); to retry: {shlex.join(run.command)}")
  for run, text in outcome["not run"]:
    _say(f"  not run: {run.name} ({text})")


def _main(args) -> None:
  runs = plan(args)
  if args.print_commands or args.slurm:
    if args.print_commands:
      for run in runs:
        print(shlex.join(run.command))
    if args.slurm:
      if paths.resolve(args.slurm).is_dir():
        raise UserError(f"--slurm={args.slurm} is a folder; name the script file to write")
      invocation = shlex.join(["python", "-m", "lra.commands.leaderboard", *args.argv])
      paths.write_text(args.slurm, slurm_script(runs, invocation, args.root))
      tasks = len(array_tasks(runs))
      what = f"{len(runs)} runs" if tasks == len(runs) else f"{tasks} cells of two stages"
      print(f"wrote {args.slurm}: a SLURM array of {what} (sbatch {args.slurm})")
    return
  # Every run's settings, and the runs the root already holds, before the first one starts.
  resumed = tuple(run for run in runs if finished(run)[0] is None
                  and paths.resolve(run.workdir).exists())
  check_runs(runs, args.preset, args.root, resumed, args.allow_config_change)
  start = time.time()
  outcome, stop = run_grid(runs)
  _summary(outcome, len(runs), time.time() - start)
  if stop.signum:
    name = signal.Signals(stop.signum).name
    fail(f"stopped by {name}; to resume, run the same command again", 128 + stop.signum)
  write_table(args.root, runs)
  if outcome["failed"]:
    sys.exit(1)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m lra.commands.leaderboard", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--models", default="", help="comma separated mixer names, or all")
  p.add_argument("--tasks", default="", help="comma separated task names, or all")
  p.add_argument("--preset", default="", help="cpu, paper or base")
  p.add_argument("--root", default="runs/leaderboard", help="one workdir per run under it")
  p.add_argument("--controls", action="store_true",
                 help="add the window-limited control rows (window16, window64: attention "
                      "within w tokens only) to --models")
  p.add_argument("--seeds", metavar="0,1,2",
                 help="run every cell once per seed (config.seed); the table: mean +- std")
  p.add_argument("--sweep", action="append", default=[], metavar="KEY[,KEY...]=V1,V2,...",
                 help="run every cell once per value (repeatable: the product); linked keys "
                      "move together: KEY1,KEY2=(V1a,V2a),(V1b,V2b); the table takes each "
                      "cell's best point on validation")
  p.add_argument("--protocol", default="scratch", metavar="scratch|spt",
                 help="spt: each cell is a denoise pretraining, then a fine-tune from it")
  plugins.add_flag(p, ", passed on to every run")
  p.add_argument("--allow_config_change", action="store_true",
                 help="passed on to every run: a run whose settings differ from its "
                      "checkpoints' goes on with them (recorded in its results.json)")
  p.add_argument("--print_commands", action="store_true",
                 help="print one train.py command per run; run nothing")
  p.add_argument("--slurm", metavar="FILE", help="write a SLURM array script; run nothing")
  return p


def main(argv=None) -> None:
  argv = sys.argv[1:] if argv is None else list(argv)
  run_command(_parse_and_run, argv)  # a bad name, override, preset or --seeds: one line, exit 1


def parse_args(argv: list[str]):
  """The grid's flags, its --config.KEY[@SCOPE]=VALUE overrides as `args.sets`."""
  rest, sets = cli.take_overrides(argv, scoped=True)
  args = parser().parse_args(rest)
  args.sets = sets
  args.argv = argv  # for the SLURM script's note of how it was made
  return args


def _parse_and_run(argv: list[str]) -> None:
  _main(parse_args(argv))


if __name__ == "__main__":
  main()
