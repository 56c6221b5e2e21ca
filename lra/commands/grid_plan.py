"""The grid's plan for python -m lra.commands.leaderboard: its runs (cells x seeds x the
points of a --sweep, lra.commands.sweep_axis, and the stages of a protocol), their workdirs
and train.py commands, and the SLURM script of them. Every config is loaded and every
--config.KEY override (and swept value) checked here, so a mistake is one line before anything
runs; `check_runs` then checks every run's settings as its train.py will (in a child process:
`python -m lra.commands.grid_plan`). The running, skipping and the table are
lra.commands.leaderboard's."""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shlex
import subprocess
import sys

from lra.configs.published.mega import CHUNK_SIZES
from lra import cli, paths, plugins, rules
from lra.commands import sweep_axis
from lra.locations import INSTALLED, PACKAGE_ROOT
from lra.errors import UserError, run_command

# --protocol: how each cell trains. spt (self-pretraining, Amos et al. 2024): a denoise run on
# the cell's training inputs, then a run initialised from its encoder (config.init_from).
PROTOCOLS = ("scratch", "spt")
PRESETS = {"cpu": ",cpu", "paper": ",paper", "base": ""}
# Grid names that are another mixer with settings: (registered mixer, overrides (scope, key,
# value) as lra.cli takes them), a scope being a task whose runs alone take it (alias_settings).
# Each is a row of its own in the table (lra.reporting.results.run_label).
ALIASES = {
    "transformer_chunked": ("transformer", ((None, "model.attention.implementation", "chunked"),)),
    # Mega-chunk: Mega attending within chunks, of the paper's size per task.
    "mega_chunk": ("mega", tuple((task, "model.attention.chunk_size", str(size))
                                 for task, size in CHUNK_SIZES.items())),
    # The Transformer with rotary positions (RoFormer) in place of sinusoidal ones: the
    # position control of Miralles-Gonzalez et al. 2025 (arXiv 2501.14850).
    "transformer_rotary": ("transformer", ((None, "model.positions", "rotary"),)),
}
# Window-limited controls (--controls): attention within a sliding window of w tokens in every
# layer (the Longformer mixer without global tokens, computed sparsely), mean-pooled with no
# CLS token, so that no layer sees past w/2 tokens on either side: the table shows how much of
# each task a model that sees only local context (num_layers * w/2 tokens at most) can solve.
CONTROL_WINDOWS = (16, 64)
ALIASES.update({f"window{w}": ("longformer", (
    (None, "model.attention.window", str(w)), (None, "model.attention.global_positions", "()"),
    (None, "model.pooling", "MEAN"), (None, "model.use_cls", "False")))
    for w in CONTROL_WINDOWS})
CONTROLS = tuple(f"window{w}" for w in CONTROL_WINDOWS)


@dataclasses.dataclass(frozen=True)
class Run:
  task: str
  model: str                   # the grid's name (a registered mixer or an alias)
  workdir: str
  command: tuple[str, ...]     # python train.py ...
  expect: tuple[tuple[str, object], ...]  # recorded config values a finished run must have
  after: str = ""              # the workdir of the run that must finish first (a pretraining)
  items: tuple[tuple[str, str], ...] = ()  # its --config.KEY=VALUE overrides, in order
  point: str = ""              # its sweep point's folder name (lra.commands.sweep_axis)

  @property
  def denoise(self) -> bool:
    """A pretraining stage: its results.json has masked-token figures, no test accuracy."""
    return dict(self.expect).get("objective") == "denoise"

  @property
  def name(self) -> str:
    folder = os.path.basename(self.workdir)
    if self.point:  # in its cell's MODEL-PRESET[_seedN]_sweep folder
      folder = f"{os.path.basename(os.path.dirname(self.workdir))}/{folder}"
    return f"{self.task}/{folder}"


def _names(text: str, flag: str, valid: list[str], every: list[str] | None = None) -> list[str]:
  """'a,all,b' -> names, `all` expanded to `every` (default: the valid ones, aliases aside);
  a bad one is a UserError."""
  items = [t.strip() for t in text.split(",")] if text.strip() else []
  if not items or not all(items):
    raise UserError(f"--{flag}={text!r}: give names, comma separated, or all (valid: "
                    f"{', '.join(valid)})")
  names = []
  for item in items:
    found = [n for n in every or valid if n not in ALIASES] if item == "all" else [item]
    if item != "all" and item not in valid:
      raise UserError(f"--{flag}: unknown name {item!r}{rules.did_you_mean(item, valid)}; "
                      f"valid: all, {', '.join(valid)}")
    names += [n for n in found if n not in names]
  return names


def _literal(text: str):
  """An override's value as train.py's override gives it to the config, as JSON records it: a
  Python literal where it is one, else the text itself."""
  return json.loads(json.dumps(cli.literal(text)))


def _check_scope(item: tuple[str | None, str, str], scopes: list[str]) -> None:
  if item[0] is not None and item[0] not in scopes:
    raise UserError(f"{cli.spelled(*item)}: {item[0]!r} is no task or model of this grid "
                    f"({', '.join(scopes)})")


def _has_key(config, key: str) -> bool:
  node = config
  for part in key.split("."):
    if not hasattr(node, "keys") or part not in node.keys():
      return False
    node = node[part]
  return True


def _config(task: str, model: str, preset: str):
  """The run's config, loaded as train.py loads it (no JAX): a bad one is one line now."""
  from lra.configs import task_config
  try:
    return task_config(task).get_config(model + PRESETS[preset])
  except UserError as e:  # a model's SettingError included
    raise UserError(f"{task} config of {model} ({preset}): {e}") from None


def _script_paths() -> tuple[tuple[str, ...], str]:
  """train.py and configs/ as the commands name them: relative where this process runs in
  the repository (the printed commands then read as the README's), else absolute; an installed
  package (no checkout) runs `python -m lra.commands.train`."""
  if INSTALLED:
    return ("-m", "lra.commands.train"), os.path.join(PACKAGE_ROOT, "configs")
  here = os.path.samefile(os.getcwd(), PACKAGE_ROOT)
  return (("train.py",), "configs") if here else ((os.path.join(PACKAGE_ROOT, "train.py"),),
                                                  os.path.join(PACKAGE_ROOT, "configs"))


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


def alias_settings(model: str, task: str) -> tuple[str, list[tuple[str, str]]]:
  """(the registered mixer, its (key, value) settings on `task`) of a grid name: an alias's
  (ALIASES; an item scoped to a task overrides the unscoped one), else (model, [])."""
  mixer, items = ALIASES.get(model, (model, ()))
  found = {}
  for scope, key, value in sorted(items, key=lambda item: item[0] is not None):
    if scope in (None, task):
      found[key] = value
  return mixer, list(found.items())


def _cell_settings(task: str, model: str, preset: str, sets: list, axis: list
                   ) -> tuple[int, list[tuple[str, str]], tuple[sweep_axis.Point, ...]]:
  """(num_train_steps, the (key, value) overrides, the sweep's points) of one cell, each key
  and swept value checked first."""
  mixer, extra = alias_settings(model, task)
  config = _config(task, mixer, preset)
  # A scoped value overrides the plain one; a @TASK and a @MODEL value, equally specific,
  # must agree (one scope's values were compared as the command line was read).
  scoped = [item for item in sets if item[0] in (task, model)]
  cli.agree(scoped, where=f"{task}/{model}")
  overridden = {key for _, key, _ in scoped}
  found = dict(extra)  # in the command line's order
  found.update((key, value) for scope, key, value in sets
               if scope in (task, model) or (scope is None and key not in overridden))
  mine = list(found.items())
  for key, value in mine:
    if not _has_key(config, key):
      raise UserError(f"{cli.spelled(None, key, value)}: the {task} config of {model} has no "
                      f"key {key!r} (see configs/base.py and configs/{task}.py); a key that "
                      f"only some runs have takes a scope: {cli.PREFIX}KEY@TASK=VALUE or "
                      f"{cli.PREFIX}KEY@MODEL=VALUE")
  return config.num_train_steps, mine, sweep_axis.points(axis, config, [k for k, _ in mine],
                                                         f"{task}/{model}")


def plan(args) -> list[Run]:
  """The grid's runs (every cell of one seed, then the next seed's), every config loaded and
  every --config.KEY override checked first: a mistake is one line before anything runs."""
  from lra.data.tasks import FACTS, NAMES
  from lra.models import registry
  # Outside mixers register first (--import, LRA_IMPORT); every run imports them too.
  imports = tuple(f"--import={spec}" for spec in plugins.import_modules(args.imports))
  allow = ("--allow_config_change",) if args.allow_config_change else ()
  if args.preset not in PRESETS:
    raise UserError(f"--preset={args.preset!r}: give one of {', '.join(PRESETS)}")
  tasks = _names(args.tasks, "tasks", list(FACTS), list(NAMES))  # all: LRA's six (MQAR by name)
  models = _names(args.models, "models", registry.names() + list(ALIASES))
  models += [name for name in CONTROLS if getattr(args, "controls", False) and name not in models]
  sets = list(args.sets)  # (scope, key, value) from lra.cli.take_overrides
  for item in sets:
    _check_scope(item, tasks + models)
  seeds = _seeds(args.seeds)
  if seeds != [None] and any(key == "seed" for _, key, _ in sets):
    raise UserError(f"{cli.PREFIX}seed=...: --seeds gives each run its seed; give one of the "
                    f"two")
  if args.protocol not in PROTOCOLS:
    raise UserError(f"--protocol={args.protocol!r}: give one of {', '.join(PROTOCOLS)}")
  if args.protocol != "scratch" and any(key in ("objective", "init_from") for _, key, _ in sets):
    raise UserError(f"{cli.PREFIX}objective / {cli.PREFIX}init_from: --protocol="
                    f"{args.protocol} sets them for each stage; give one of the two")
  if paths.resolve(args.root).exists() and not paths.resolve(args.root).is_dir():
    raise UserError(f"--root={args.root} is a file; name a folder for the runs")
  train, configs = _script_paths()
  axis = sweep_axis.parse(getattr(args, "sweep", None) or [])
  cells = [(task, model, _cell_settings(task, model, args.preset, sets, axis))
           for task in tasks for model in models]
  runs = []
  for seed, (task, model, (steps, mine, points)) in itertools.product(seeds, cells):
    mine = mine + ([("seed", str(seed))] if seed is not None else [])
    config = f"--config={configs}/{task}.py:{ALIASES.get(model, (model,))[0]}" + PRESETS[
        args.preset]
    cell = _workdir(args.root, task, model, args.preset, seed)
    for point in points:  # one without --sweep
      for workdir, stage, after in _stages(args.protocol, sweep_axis.workdir(cell, point)):
        items = mine + list(point.items) + stage
        expect = {"num_train_steps": steps, **{key: _literal(value) for key, value in items},
                  **dict(point.expect)}  # as the field's type reads it
        command = ("python", *train, *imports, config, f"--workdir={workdir}",
                   *(f"--config.{k}={v}" for k, v in items), *allow)
        runs.append(Run(task, model, workdir, command, tuple(expect.items()), after,
                        tuple(items), point.name))
  return runs


def _stages(protocol: str, workdir: str) -> list[tuple[str, list[tuple[str, str]], str]]:
  """A cell's stages in order: (workdir, its own --config items, the workdir it waits for)."""
  if protocol == "scratch":
    return [(workdir, [], "")]
  pretrain = workdir + "_pretrain"
  return [(pretrain, [("objective", "denoise")], ""),
          (workdir + "_spt", [("init_from", pretrain)], pretrain)]


def array_tasks(runs: list[Run]) -> list[list[Run]]:
  """The runs grouped by array task: a run that waits for the one before it joins its task."""
  tasks: list[list[Run]] = []
  for run in runs:
    if run.after and tasks and tasks[-1][-1].workdir == run.after:
      tasks[-1].append(run)
    else:
      tasks.append([run])
  return tasks


def slurm_script(runs: list[Run], invocation: str, root: str) -> str:
  """A SLURM array script: array task i runs the commands of task i (from this directory)."""
  tasks = array_tasks(runs)
  staged = len(tasks) < len(runs)
  lines = ["#!/bin/bash", f"# Written by: {invocation}",
           "# One array task per run. Add your cluster's #SBATCH lines (partition, --gres, "
           "--time);", "# submit with: sbatch THIS_FILE. A run that is stopped or fails "
           "resumes when its task", "# runs again (sbatch --array=I THIS_FILE). Afterwards: "
           f"python eval.py accuracy {shlex.quote(root)} --out={shlex.quote(root + '/table')}"]
  if staged:  # one task per cell keeps the order without SLURM dependencies between jobs
    lines[2] = "# One array task per cell, which runs the cell's stages in order (cmd1 && cmd2):"
    lines.insert(3, "# the fine-tune starts only if its pretraining succeeded. Add your "
                    "cluster's #SBATCH lines (partition, --gres, --time);")
  lines += ["#SBATCH --job-name=lra-grid",
            f"#SBATCH --array=0-{len(tasks) - 1}", "set -euo pipefail",
            f"cd {shlex.quote(os.getcwd())}", "RUNS=("]
  lines += [f"  {shlex.quote(' && '.join(shlex.join(run.command) for run in task))}"
            for task in tasks]
  lines += [")", 'eval "${RUNS[$SLURM_ARRAY_TASK_ID]}"']
  return "\n".join(lines) + "\n"


def check_runs(runs: list[Run], preset: str, root: str = "", resumed: tuple[Run, ...] = (),
               allow: bool = False) -> None:
  """Every run's settings checked as its train.py checks them before it loads data (the
  overrides read as train.py reads them, the trainer's rules, the model built and traced for
  the task's sizes), before the first run starts: one line names the run and the setting.
  `resumed`: the runs that would go on from a run their workdir holds under `root`; those that
  train.py would refuse to go on with (another setting that changes the result, a divergence:
  lra.training.workdir.resume_problems) are one line for them all, naming --root and
  --allow_config_change, unless `allow`. In one child process: a model's check may ask JAX for
  its backend (the Transformer's implementation), which the grid's own process never starts
  (a TPU takes one process at a time, and a GPU's memory would stay held while the runs
  train)."""
  review = {run.workdir for run in resumed}
  cells = {}  # one check of each distinct (task, mixer, overrides[, workdir to review])
  for run in runs:
    mixer = ALIASES.get(run.model, (run.model,))[0]
    held = run.workdir if run.workdir in review else ""
    cells.setdefault((run.task, mixer, run.items, held), run.name)
  imports = [a[len("--import="):] for a in runs[0].command if a.startswith("--import=")]
  request = {"preset": preset, "imports": imports, "root": root, "allow": allow,
             "runs": [[name, *cell] for cell, name in cells.items()]}
  proc = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request),
                        capture_output=True, text=True, errors="replace")
  last = proc.stderr.strip().splitlines()[-1:]
  if proc.returncode and last and last[0].startswith("error: ") and "Traceback" not in \
      proc.stderr:
    raise UserError(last[0][len("error: "):])
  if proc.returncode:  # a bug: its traceback
    sys.stderr.write(proc.stderr)
    raise RuntimeError(f"checking the grid's runs failed (exit {proc.returncode}); see above")


def _held_problems(config, workdir: str) -> list[str]:
  """What train.py would refuse to go on with in `workdir` under `config` (as run_dir's
  _check_run reads it: the newest intact checkpoint's settings, else config.json), reading
  only; [] for a workdir that holds no run."""
  from lra.training import checkpoint, workdir as workdir_lib
  folder = paths.resolve(workdir)
  found = checkpoint.find_intact(folder, ("checkpoints",))
  step, meta = (found[1], found[2]) if found is not None else (None, None)
  reference = (meta or {}).get("config") or workdir_lib.read_json(folder / "config.json")
  if reference is None and step is None:
    return []
  return workdir_lib.resume_problems(config, folder, reference, step or 0)


def _check_in_child(request: dict) -> None:
  """check_runs' child: raises the UserError of the first run whose settings are refused,
  then one for every run its workdir's run refuses to go on with."""
  from lra.commands.train import check_before_data
  plugins.import_modules(request["imports"])
  built: set[str] = set()
  refused = []
  for name, task, mixer, items, workdir in request["runs"]:
    config = _config(task, mixer, request["preset"])
    try:
      for key, value in items:
        cli.set_value(config, key, value)
      check_before_data(config, built)
    except UserError as e:
      raise UserError(f"{name}: {e} (nothing has run; a setting that only some runs take "
                      f"goes to them alone: {cli.PREFIX}KEY@TASK=VALUE or {cli.PREFIX}"
                      f"KEY@MODEL=VALUE)") from None
    try:
      found = _held_problems(config, workdir) if workdir else []
    except UserError as e:  # another model or task there, a run longer than asked
      raise UserError(f"{name}: {e} (nothing has run; in a grid a new --root gives every run "
                      f"a new workdir)") from None
    if found:
      refused.append(f"{name}: {', '.join(found)}")
  if refused and not request["allow"]:
    more = f"; and {len(refused) - 1} more" if len(refused) > 1 else ""
    raise UserError(f"--root={request['root']} holds {len(refused)} of this grid's runs made "
                    f"otherwise than it asks ({refused[0]}{more}), which train.py would not go "
                    f"on with; nothing has run: give a new --root to run them afresh, or add "
                    f"--allow_config_change to go on with them (recorded in their "
                    f"results.json)")


if __name__ == "__main__":
  run_command(_check_in_child, json.loads(sys.stdin.read()))
