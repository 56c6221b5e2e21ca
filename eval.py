"""The accuracy, speed and memory tables, and the charts.

  python eval.py accuracy runs/ [--speed=eval_out/speed.json] [--out=eval_out]
  python eval.py speed [--models=transformer] [--lengths=1024,2048,3072,4096] [--batch=32]
                       [--emb_dim=256 --qkv_dim=256 --mlp_dim=1024 --num_heads=4 --num_layers=4]
                       [--set KEY=VALUE ...]

`accuracy` reads the results.json of finished runs (a folder of many runs will do) and writes
accuracy.{md,csv,json} (and bubble.png when --speed names a speed.json). `speed` measures the real
train step of every model at every length, each in a fresh process, and writes
speed.{md,csv,json} and scaling.png. `--set` overrides any config.model field for every model
(after the size flags; values are Python literals), e.g. `--set reversible=True --set
num_layers=12`, or a mixer setting as `--set attention.NAME=VALUE`.
"""
import argparse
import json
import sys

from lra import paths
from lra.errors import UserError, run_command, user_errors
from lra.reporting import accuracy, benchmark, files, markdown, results, speed
from lra.reporting.paper import TASKS


def _read_speed(path: str) -> dict:
  """A speed.json written by `eval.py speed`; a missing or malformed one is a user error."""
  try:
    data = json.loads(paths.resolve(path).read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise UserError(f"--speed={path}: cannot read a speed.json ({e})") from None
  if not isinstance(data, dict) or not {"machine", "rows"} <= set(data):
    raise UserError(f"--speed={path}: not a speed.json (no 'machine' and 'rows')")
  return data


def _accuracy(args) -> None:
  from lra.reporting import charts
  warnings: list[str] = []
  found = results.collect_results(args.runs, warnings)
  for w in warnings:
    print(f"warning: {w}", file=sys.stderr)
  table = accuracy.accuracy_table(found)
  text = markdown.accuracy_markdown(table)
  out = paths.resolve(args.out)  # a local folder or a URL such as gs://bucket/eval
  paths.write_text(out / "accuracy.md", text + "\n")
  files.write_csv(out / "accuracy.csv", accuracy.accuracy_rows(table))
  files.write_json(out / "accuracy.json", table)
  print(text)
  if args.speed:
    measured = _read_speed(args.speed)
    tables = speed.speed_tables(measured["rows"])
    if args.average in TASKS:  # a single task's accuracy, while the averages are missing
      for row in table["rows"]:
        row[args.average] = row["cells"][args.average]["ours"]
    scores, steps, memory, length = speed.bubble_inputs(table, tables, args.average)
    path = out / "bubble.png"
    what = f"{args.average} test" if args.average in TASKS else "average"
    charts.bubble_chart(path, scores, steps, memory,
                        f"accuracy ({args.average}) vs speed at {length} tokens; "
                        f"{measured['machine'].get('device_kind', '?')}",
                        ylabel=f"{what} accuracy (%)")
    print(f"wrote {path}")
  print(f"wrote {args.out}/accuracy.{{md,csv,json}}")


def _speed(args) -> None:
  from lra.reporting import charts
  from models import registry
  models = args.models.split(",") if args.models else registry.names()
  lengths = [int(x) for x in args.lengths.split(",")]
  size = {k: getattr(args, k) for k in benchmark.TEXT_BASE_SIZE}
  sets = benchmark.parse_sets(args.sets)
  from configs import text
  # Every model has the same config.model fields (mixer settings are checked per model); the
  # measured config is the Text task's, as in lra.reporting.benchmark.
  benchmark.override(text.get_config("transformer").model,
                     {k: v for k, v in sets.items() if not k.startswith("attention.")})
  machine = benchmark.machine_in_fresh_process(args.dtype)
  machine.update(batch=args.batch, model_size={**size, **sets}, dtype=args.dtype)
  print(f"machine: {machine['device_kind']} x{machine['device_count']}, matmul peak "
        f"{machine['matmul_peak_flops_per_s'] / 1e9:.0f} GFLOP/s ({args.dtype})", flush=True)
  rows = []
  for model in models:
    for length in lengths:
      row = benchmark.run_in_fresh_process(model, length, args.batch, size, args.dtype,
                                           args.repeats, args.timeout, tuple(args.imports),
                                           tuple(args.sets))
      row["matmul_peak_flops_per_s"] = machine["matmul_peak_flops_per_s"]
      rows.append(row)
      shown = (f"{row['steps_per_s']:.3f} steps/s" if row["status"] == "ok" else row["status"])
      print(f"  {model} @ {length}: {shown}", flush=True)
  out = paths.resolve(args.out)  # a local folder or a URL such as gs://bucket/eval
  files.write_json(out / "speed.json", {"machine": machine, "rows": rows})
  files.write_csv(out / "speed.csv", rows)
  text = markdown.speed_markdown(speed.speed_tables(rows), machine)
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
  a.add_argument("--average", default="avg5",
                 help="the chart's accuracy: avg5, avg6, or one task's name")
  a.set_defaults(run=_accuracy)
  s = sub.add_parser("speed", help="steps/s and memory of the train step against length")
  s.add_argument("--models", default="", help="comma separated; default every registered model")
  s.add_argument("--lengths", default="1024,2048,3072,4096")
  s.add_argument("--batch", type=int, default=32)
  for key, value in benchmark.TEXT_BASE_SIZE.items():
    s.add_argument(f"--{key}", type=int, default=value)
  s.add_argument("--dtype", default="float32", help="compute dtype, e.g. bfloat16 on a GPU")
  s.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is kept")
  s.add_argument("--timeout", type=float, default=1800, help="seconds per (model, length)")
  s.add_argument("--import", dest="imports", action="append", default=[],
                 help="a module to import in each measuring process (registers a new mixer)")
  s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                 help="override a config.model field for every model, after the size flags "
                      "(repeatable), e.g. --set reversible=True --set num_layers=12")
  s.add_argument("--out", default="eval_out")
  s.set_defaults(run=_speed)
  return p


def main(argv=None) -> None:
  args = parser().parse_args(argv)
  run_command(args.run, args, user_errors())  # a bad flag, run or file: one line


if __name__ == "__main__":
  main()
