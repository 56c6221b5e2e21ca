"""The accuracy, speed and memory tables, and the charts.

  python eval.py accuracy runs/ [--speed=eval_out/speed.json] [--out=eval_out] [--all_paper_rows]
  python eval.py curves runs/listops_a runs/listops_b [--out=eval_out]
  python eval.py recall runs/mqar [--out=eval_out]
  python eval.py length runs/parity [--out=eval_out] [--accuracy]
  python eval.py speed [--models=transformer] [--lengths=1024,2048,3072,4096] [--batch=32]
                       [--emb_dim=256 --qkv_dim=256 --mlp_dim=1024 --num_heads=4 --num_layers=4]
                       [--config.model.KEY=VALUE ...] [--import=MODULE ...]
  python eval.py padding [--models=transformer,gla] [--real=24] [--out=eval_out]

`accuracy` and `recall` read the results.json of finished runs (a folder of many runs will do),
or a folder of them as results/ commits them (lra.reporting.published: `python eval.py recall
results/figure2_cpu --out=results/figure2_cpu` draws the committed chart again), and name each
run relative to the folder named, never by an absolute path. `accuracy` writes
accuracy.{md,csv,json} (and bubble.png when --speed names a speed.json; a chart that would be
empty is skipped, in one line that says why and which --average or measurement would draw it):
the paper's rows of the models that ran (`--all_paper_rows`: every model of the paper), each
cell's runs at chance (lra.reporting.chance) and each row's tested checkpoint; where the runs
hold a grid's --sweep, the sweeps' table (the point chosen on validation, the spread) and
sweep_KEY.png per swept key (lra.reporting.sweeps, sweep_chart). `curves` draws curves.png: train and validation loss and accuracy against step from each run's
metrics.jsonl, a line per run (a run in its model's colour of every chart). `recall` draws
recall.png and writes recall.{md,json}: MQAR test accuracy against the state the model carries
across positions (results.json's carried_state), a line per model over its widths, each point
the best-on-validation run of its sweep (lra.reporting.recall). `length` draws length.png and
writes length.{md,json}: of the runs of a length-generalisation task (results.json's
length_generalisation), test accuracy against test length, a line per model (and per setting
that tells its runs apart), the mean over seeds and the best seed, scaled accuracy ((accuracy
- chance) / (1 - chance)) where the task names its chance, else (or with --accuracy) accuracy
in %; the table gives each line's mean over the test lengths (mean +- std over seeds, best
seed) (lra.reporting.lengths, length_chart). `speed` measures
the real train step of every model at every length in --repeats interleaved rounds (each
round every cell once, in turn, each time in a fresh process), and writes speed.{md,csv,json}
(the median with the min-max over the rounds; every round's figure in the JSON) and
scaling.png; without
--lengths/--batch it measures the paper's grid (1K-4K tokens, batch 32), or on a CPU a CPU-sized
one (512 and 1024 tokens, batch 4), and says so. `--config.model.KEY=VALUE` overrides a
config.model field of every model (after the size flags; values are Python literals), as
train.py takes it, e.g. `--config.model.reversible=True --config.model.num_layers=12`, or a
mixer setting as `--config.model.attention.NAME=VALUE` (the old `--set KEY=VALUE`, relative to
config.model, still works and says how to write it). `--import=MODULE` (repeatable; or
LRA_IMPORT=MODULE,...) imports a module of your own that registers a mixer, so that `speed`
measures it beside the others; `accuracy` accepts it too. `padding` measures how much each
mixer's real outputs and input gradients move when its rows are padded on the right (by 0, 1,
17 and 500 positions) and on the left, and writes padding.{md,json} (lra.reporting.padding,
which says why a mixer is length-dependent or takes no left padding; lra.commands.padding).
"""
import argparse
import json
import sys

from lra import cli, paths, plugins, provenance
from lra.commands import measuring, padding as padding_command
from lra.errors import UserError, run_command
from lra.commands.references import paper_configs
from lra.reporting import accuracy, curves, files, results, speed, speed_table
from lra.reporting.numbers import sig3
from lra.reporting.paper import TASKS

# eval.py speed's (model, length) grid where --lengths and --batch are not given: the paper's
# Table 2 (Text base model, 1K-4K tokens, batch 32), or on a CPU a smaller one (the paper's
# takes hours per model there): measured on the shared 2-core development machine (matmul peak
# read 93 GFLOP/s, a third of its idle figure), Transformer and Performer took 6.5 minutes.
PAPER_GRID = {"lengths": "1024,2048,3072,4096", "batch": 32}
CPU_GRID = {"lengths": "512,1024", "batch": 4}


def _read_speed(path: str) -> dict:
  """A speed.json written by `eval.py speed`; a missing or malformed one is a user error."""
  remake = "remake it with `python eval.py speed ...`"
  try:
    data = json.loads(paths.resolve(path).read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UserError(f"--speed={path}: cannot read a speed.json ({e})") from None
  if not isinstance(data, dict) or not {"machine", "rows"} <= set(data):
    raise UserError(f"--speed={path}: not a speed.json (no 'machine' and 'rows')")
  if not isinstance(data["machine"], dict) or not isinstance(data["rows"], list):
    raise UserError(f"--speed={path}: 'machine' must be an object and 'rows' a list; {remake}")
  for i, row in enumerate(data["rows"]):
    missing = [k for k in ("model", "length", "status")
               if not isinstance(row, dict) or k not in row]
    if missing:
      raise UserError(f"--speed={path}: row {i} has no {missing[0]!r} field; {remake}")
    if not isinstance(row["length"], int) or row["length"] < 1:
      raise UserError(f"--speed={path}: row {i} has length {row['length']!r}, not a positive "
                      f"integer; {remake}")
  return data


def _writable_folder(out: str) -> None:
  """--out must be a folder (or not exist yet): checked before anything is measured."""
  folder = paths.resolve(out)
  if folder.exists() and not folder.is_dir():
    raise UserError(f"--out={out} is a file, not a folder; name a folder for the tables")


def _existing(runs: list[str]) -> None:
  """Every folder named must exist: a typo must not silently leave a folder of runs out."""
  for path in runs:
    if not paths.resolve(path).exists():
      raise UserError(f"{path}: no such run directory or folder; nothing written")


def _warn(warnings: list[str]) -> None:
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)


def _accuracy(args) -> None:
  from lra.reporting import charts, sweep_chart
  plugins.import_modules(args.imports)  # a module that cannot be imported is refused here too
  _writable_folder(args.out)
  _existing(args.runs)
  measured = _read_speed(args.speed) if args.speed else None  # before anything is written
  warnings: list[str] = []
  found = results.collect_results(args.runs, warnings, references=paper_configs)
  _warn(warnings)
  if not found:
    raise UserError(f"no finished run with a valid results.json under {', '.join(args.runs)}; "
                    f"nothing written (earlier tables in {args.out} are kept)")
  why = None  # a chart that would be empty is skipped: the tables are written all the same
  if measured is not None:
    why = speed.bubble_refusal(accuracy.accuracy_table(found, references=paper_configs),
                               speed.speed_tables(measured["rows"]), args.average)
  table, text = accuracy.write_tables(found, args.out, paper_configs,
                                      all_paper_rows=args.all_paper_rows)
  print(text)
  for swept in sweep_chart.write_charts(table, args.out):  # accuracy against each swept key
    print(f"wrote {swept}")
  chart = paths.resolve(args.out) / "bubble.png"
  if measured is not None and why is None:
    _bubble(charts, chart, table, found, measured, args.average)
  elif why is not None:
    earlier = f" (the {args.out}/bubble.png there is an earlier one)" if chart.exists() else ""
    _warn([f"bubble chart skipped: {why}{earlier}"])
  print(f"wrote {args.out}/accuracy.{{md,csv,json}}")


def _bubble(charts, path, table: dict, found: list[dict], measured: dict, average: str) -> None:
  tables = speed.speed_tables(measured["rows"])
  scores, steps, memory, length = speed.bubble_inputs(table, tables, average)
  what = f"{average} test" if average in TASKS else "average"
  notes = (speed.size_note(measured["machine"], found, length),
           speed.steps_note(table, average, set(scores) & set(steps) & set(memory)))
  marked = frozenset(row["model"] for row in table["rows"]
                     if (row["cells"][average]["not_comparable"] if average in TASKS
                         else not row[f"{average}_comparable"]))
  charts.bubble_chart(path, scores, steps, memory,
                      f"accuracy ({average}) vs speed at {length} tokens; "
                      f"{measured['machine'].get('device_kind', '?')}",
                      ylabel=f"{what} accuracy (%)",
                      baseline=accuracy.guessing_baseline(table, average),
                      notes=tuple(n for n in notes if n), marked=marked,
                      spread=accuracy.spread(table, average))  # error bars over seeds
  print(f"wrote {path}")


def _curves(args) -> None:
  from lra.reporting import charts
  _writable_folder(args.out)
  warnings: list[str] = []
  models: dict[str, str | None] = {}  # each run's model, for its colour
  found = curves.read_curves(args.runs, warnings, models)  # a missing or bad file: one line
  _warn(warnings)
  path = paths.resolve(args.out) / "curves.png"
  charts.curves_chart(path, found, curves.PANELS,
                      f"Training curves ({len(found)} run{'s' * (len(found) > 1)})", models)
  print(f"wrote {args.out}/curves.png ({', '.join(found)})")


def _recall(args) -> None:
  from lra.reporting import recall
  _writable_folder(args.out)
  _existing(args.runs)
  warnings: list[str] = []
  points, text = recall.write_recall(args.runs, args.out, warnings)
  _warn(warnings)
  if not points:
    raise UserError(f"no finished MQAR run with a recorded carried_state under "
                    f"{', '.join(args.runs)}; nothing written")
  print(text)
  print(f"wrote {args.out}/recall.{{md,json,png}}")


def _length(args) -> None:
  from lra.reporting import length_chart, lengths
  _writable_folder(args.out)
  _existing(args.runs)
  warnings: list[str] = []
  runs = lengths.read_runs(args.runs, warnings)
  lines, text = length_chart.write_lengths(
      runs, args.out, lengths.ACCURACY if args.accuracy else lengths.SCALED)
  _warn(warnings)
  if not lines:
    raise UserError(f"no finished run with per-length test accuracy (results.json's "
                    f"length_generalisation) under {', '.join(args.runs)}; nothing written")
  print(text)
  print(f"wrote {args.out}/length.{{md,json,png}}")


def _positive(args, names: tuple[str, ...]) -> None:
  for name in names:
    value = getattr(args, name)
    if not value > 0:
      raise UserError(f"--{name}={value} must be positive")


def _lengths(text: str) -> list[int]:
  try:
    lengths = [int(x) for x in text.split(",")]
  except ValueError:
    lengths = []
  if not lengths or min(lengths) < 1 or len(set(lengths)) < len(lengths):
    raise UserError(f"--lengths={text}: give distinct positive token counts, e.g. "
                    f"--lengths=1024,2048")
  return lengths


def _check_models(models: list[str], lengths: list[int], batch: int, size: dict, dtype: str,
                  sets: dict) -> None:
  """Builds every (model, length) config as the measuring process will (no JAX device is
  touched): a bad name or setting is one line before anything is measured."""
  from lra import models as model_lib
  from lra.data.tasks import FACTS
  text = FACTS["text"]  # the measured task
  for model in models:
    for length in lengths:
      try:
        config = measuring.measured_config(model, length, batch, size, dtype, sets)
        model_lib.build(config.model.to_dict(), vocab_size=text.vocab_size,
                        num_classes=text.num_classes, max_len=length, pair=text.pair)
      except UserError as e:  # a model's SettingError included
        raise UserError(f"model {model} at length {length} (size flags and --config.model overrides): {e}; "
                        f"nothing measured") from None


def _grid(args, platform: str) -> str | None:
  """Fills in --lengths and --batch where not given: the paper's grid, or on a CPU the
  CPU-sized one; returns the line that says so on a CPU (None elsewhere or when both given)."""
  missing = [k for k in ("lengths", "batch") if getattr(args, k) is None]
  grid = CPU_GRID if platform == "cpu" else PAPER_GRID
  for key in missing:
    setattr(args, key, grid[key])
  if platform != "cpu" or not missing:
    return None
  return (f"CPU: the CPU-sized grid (lengths {args.lengths}, batch {args.batch}; the paper's "
          f"{PAPER_GRID['lengths']} at batch {PAPER_GRID['batch']} takes hours per model on a "
          f"CPU): give --lengths and --batch to choose; --models to measure fewer")


def _measure(args, models: list[str], lengths: list[int], size: dict, sets: dict,
             imports: tuple[str, ...]) -> list[dict]:
  """Every (model, length) once per round for --repeats rounds, in turn (round-robin), each
  time in a fresh process that times one round of steps; a row per cell with every round's
  figure (measuring.measure_rounds)."""
  def report(number: int, row: dict) -> None:
    shown = f"{sig3(row['steps_per_s'])} steps/s" if row["status"] == "ok" else row["status"]
    print(f"  round {number}/{args.repeats}: {row['model']} @ {row['length']}: {shown}",
          flush=True)
  with measuring.compile_cache() as cache:
    def one(model: str, length: int) -> dict:
      return measuring.run_in_fresh_process(model, length, args.batch, size, args.dtype, 1,
                                            args.timeout, imports, sets, compile_cache=cache)
    cells = [(model, length) for model in models for length in lengths]
    return measuring.measure_rounds(cells, args.repeats, one, report)


def _speed(args) -> None:
  """Measures every (model, length) in a fresh process; every flag is checked before anything
  is measured (the models at the grid's lengths once the machine, and so the grid, is known)."""
  from lra.reporting import charts
  from lra.models import registry
  _writable_folder(args.out)
  _positive(args, ("repeats", "timeout", *measuring.TEXT_BASE_SIZE) +
            (("batch",) if args.batch is not None else ()))
  # Before the registry is asked: their mixers are measured (all of them without --models).
  imports = plugins.portable(plugins.import_modules(args.imports))
  models = [m.strip() for m in args.models.split(",")] if args.models else registry.names()
  if not all(models) or len(set(models)) < len(models):
    raise UserError(f"--models={args.models}: give distinct model names, comma separated")
  if args.lengths is not None:
    _lengths(args.lengths)
  size = {k: getattr(args, k) for k in measuring.TEXT_BASE_SIZE}
  sets = measuring.model_sets(args.sets)
  chosen = args.lengths is not None and args.batch is not None
  if chosen:  # else the grid depends on the machine: checked once it is known
    _check_models(models, _lengths(args.lengths), args.batch, size, args.dtype, sets)
  machine = measuring.machine_in_fresh_process(args.dtype)
  note = _grid(args, machine["platform"])
  lengths = _lengths(args.lengths)
  if not chosen:
    _check_models(models, lengths, args.batch, size, args.dtype, sets)
  if note:
    print(f"{note} ({len(models)} model{'s' * (len(models) > 1)} x {len(lengths)} lengths "
          f"x {args.repeats} rounds, one process each)", flush=True)
  machine.update(batch=args.batch, model_size={**size, **{k: cli.literal(v) for k, v in
                                                          sets.items()}}, dtype=args.dtype,
                 software=provenance.software())
  print(f"machine: {machine['device_kind']} x{machine['device_count']}, matmul peak "
        f"{machine['matmul_peak_flops_per_s'] / 1e9:.0f} GFLOP/s ({args.dtype})", flush=True)
  rows = _measure(args, models, lengths, size, sets, tuple(imports))
  for row in rows:
    row["matmul_peak_flops_per_s"] = machine["matmul_peak_flops_per_s"]
  out = paths.resolve(args.out)  # a local folder or a URL such as gs://bucket/eval
  text = speed_table.speed_markdown(speed.speed_tables(rows), machine)
  # Each file whole, written only now that every row is in; a full or read-only disk is one
  # line (run_command).
  files.write_json(out / "speed.json", {"machine": machine, "rows": rows})
  files.write_csv(out / "speed.csv", rows)
  paths.write_text(out / "speed.md", text + "\n")
  charts.scaling_chart(out / "scaling.png", rows,
                       f"Train step vs length ({machine['device_kind']}, batch {args.batch})")
  print(text)
  print(f"wrote {args.out}/speed.{{md,csv,json}} and {args.out}/scaling.png")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python eval.py", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="command", required=True)
  a = sub.add_parser("accuracy", help="the accuracy table of finished runs")
  a.add_argument("runs", nargs="+", help="run directories, or folders holding them")
  a.add_argument("--out", default="eval_out")
  a.add_argument("--speed", help="a speed.json, for the accuracy-speed-memory bubble chart")
  a.add_argument("--average", default="avg5", choices=("avg5", "avg6", *TASKS),
                 help="the chart's accuracy: avg5, avg6, or one task's name")
  plugins.add_flag(a, " (accepted as by every command; the tables need no model code: a "
                      "model outside models/ is marked not comparable with the paper)")
  a.add_argument("--all_paper_rows", action="store_true",
                 help="also the paper's rows of models that did not run (figures only)")
  a.set_defaults(run=_accuracy)
  c = sub.add_parser("curves", help="train/validation loss and accuracy against step (PNG)")
  c.add_argument("runs", nargs="+", help="run directories (each with its metrics.jsonl)")
  c.add_argument("--out", default="eval_out")
  c.set_defaults(run=_curves)
  r = sub.add_parser("recall", help="MQAR accuracy against state size (Zoology's Figure 2)")
  r.add_argument("runs", nargs="+", help="MQAR run directories, or folders holding them")
  r.add_argument("--out", default="eval_out")
  r.set_defaults(run=_recall)
  g = sub.add_parser("length", help="accuracy against test length (length generalisation)")
  g.add_argument("runs", nargs="+", help="run directories, or folders holding them")
  g.add_argument("--out", default="eval_out")
  g.add_argument("--accuracy", action="store_true",
                 help="accuracy in %% rather than scaled accuracy (0 = chance, 1 = perfect)")
  g.set_defaults(run=_length)
  s = sub.add_parser("speed", help="steps/s and memory of the train step against length")
  s.add_argument("--models", default="", help="comma separated (grid aliases such as "
                 "mega_chunk too); default every registered model")
  s.add_argument("--lengths", help=f"default {PAPER_GRID['lengths']}; on a CPU "
                 f"{CPU_GRID['lengths']} (the CPU-sized grid)")
  s.add_argument("--batch", type=int, help=f"default {PAPER_GRID['batch']}; on a CPU "
                 f"{CPU_GRID['batch']}")
  for key, value in measuring.TEXT_BASE_SIZE.items():
    s.add_argument(f"--{key}", type=int, default=value)
  s.add_argument("--dtype", default="float32", help="compute dtype, e.g. bfloat16 on a GPU")
  s.add_argument("--repeats", type=int, default=5,
                 help="rounds: every (model, length) is timed once per round, in turn, each "
                      "time in a fresh process; the median and the min-max are reported")
  s.add_argument("--timeout", type=float, default=1800,
                 help="seconds per (model, length) and round")
  plugins.add_flag(s, ", imported in each measuring process too")
  s.epilog = ("--config.model.KEY=VALUE (repeatable) overrides a config.model field of every "
              "model after the size flags, e.g. --config.model.reversible=True, or a mixer "
              "setting: --config.model.attention.NAME=VALUE")
  s.add_argument("--out", default="eval_out")
  s.set_defaults(run=_speed)
  padding_command.add_parser(sub)
  return p


def _parse_and_run(argv: list[str]) -> None:
  rest, sets = cli.take_overrides(argv, set_root="model.")
  args = parser().parse_args(rest)
  if sets and args.command != "speed":
    raise UserError(f"{cli.spelled(*sets[0])}: only eval.py speed takes config overrides")
  args.sets = sets
  args.run(args)


def main(argv=None) -> None:
  run_command(_parse_and_run, sys.argv[1:] if argv is None else list(argv))  # one line


if __name__ == "__main__":
  main()
