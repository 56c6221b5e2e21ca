"""`python eval.py padding`: the padding table of every registered mixer, measured by
lra.commands.padding_measure (JAX, imported once the flags are checked) and laid out by
lra.reporting.padding (which declares the shapes, the settings and why a mixer need not be
invariant), printed as markdown and written to OUT/padding.{md,json}."""
from __future__ import annotations

import sys
import time

from lra import hardware, paths, plugins, provenance
from lra.errors import UserError
from lra.reporting import padding as table


def add_parser(sub) -> None:
  """The `padding` subcommand on eval.py's subparsers."""
  p = sub.add_parser("padding", help="how much each mixer's real outputs and gradients move "
                                     "when its rows are padded (right and left)")
  p.add_argument("--models", default="", help="comma separated; default every registered "
                 "model (and the named variants of those measured)")
  p.add_argument("--real", type=int, default=table.REAL, help="real tokens per row")
  plugins.add_flag(p, ", measured beside the others")
  p.add_argument("--out", default="eval_out")
  p.set_defaults(run=run)


def _models(text: str) -> list[str] | None:
  """The --models names (checked against the registry), or None for every one."""
  from lra.models import registry
  if not text:
    return None
  names = [m.strip() for m in text.split(",")]
  if not all(names) or len(set(names)) < len(names):
    raise UserError(f"--models={text}: give distinct model names, comma separated")
  for name in names:
    registry.get(name)  # an unknown name: one line listing the valid ones
  return names


def run(args) -> None:
  """Measures every row in this process (tiny shapes, one compile each), then writes the
  table; a mixer that leaks is a warning line, the table is written all the same."""
  folder = paths.resolve(args.out)
  if folder.exists() and not folder.is_dir():
    raise UserError(f"--out={args.out} is a file, not a folder; name a folder for the tables")
  if args.real < 1:
    raise UserError(f"--real={args.real} must be positive")
  plugins.import_modules(args.imports)  # before the registry is asked
  names = _models(args.models)
  import jax
  from lra.commands import padding_measure
  from lra.reporting import files
  rows = []
  for label in padding_measure.rows_to_measure(names):
    start = time.perf_counter()
    rows.append(padding_measure.measure(label, real=args.real))
    shown = rows[-1].get("verdict") or "refused"
    print(f"  {label}: {shown} ({time.perf_counter() - start:.1f} s)", flush=True)
  text = table.markdown(rows, real=args.real)
  machine = dict(hardware.describe_cpu(), platform=jax.default_backend(),
                 device_kind=jax.devices()[0].device_kind)
  files.write_json(folder / "padding.json", dict(
      machine=machine, software=provenance.software(), real=args.real, width=table.WIDTH,
      heads=table.HEADS, batch=table.BATCH, junk=table.JUNK,
      tolerance=table.TOLERANCE, rows=rows))
  paths.write_text(folder / "padding.md", text + "\n")
  print(text)
  for row in rows:
    if "refused" not in row and table.leaks(row):
      print(f"warning: {row['row']} {row['verdict']}: its real outputs move with padding "
            f"where it declares no reason to", file=sys.stderr)
  print(f"wrote {args.out}/padding.{{md,json}}")

