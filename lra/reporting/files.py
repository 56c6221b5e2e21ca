"""Writing report files: JSON (non-finite numbers as null) and CSV."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import numpy as np

from lra import paths


def _plain(obj: Any) -> Any:
  """JSON-safe copy: numpy scalars/arrays to Python, non-finite floats to None."""
  if isinstance(obj, dict):
    return {str(k): _plain(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_plain(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return _plain(obj.tolist())
  if isinstance(obj, np.generic):
    return _plain(obj.item())
  if isinstance(obj, float) and not math.isfinite(obj):
    return None
  return obj


def json_text(obj: Any) -> str:
  return json.dumps(_plain(obj), indent=2, allow_nan=False) + "\n"


def write_json(path, obj: Any) -> None:
  """`path` local or a URL (gs://...); a reader never sees half a file."""
  paths.write_text(path, json_text(obj))


def write_csv(path, rows: list[dict]) -> None:
  paths.write_text(path, csv_text(rows))


def csv_text(rows: list[dict]) -> str:
  """Columns = union of the rows' keys in first-seen order; nested values as JSON text."""
  columns: dict[str, None] = {}
  for row in rows:
    columns.update(dict.fromkeys(row))
  f = io.StringIO(newline="")
  writer = csv.DictWriter(f, fieldnames=list(columns))
  writer.writeheader()
  for row in rows:
    row = _plain(row)
    writer.writerow({k: ("" if v is None else json.dumps(v) if isinstance(v, (dict, list))
                         else v) for k, v in row.items()})
  return f.getvalue()
