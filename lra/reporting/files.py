"""Writing report files: JSON (non-finite numbers as null) and CSV."""
from __future__ import annotations

import csv
import json
import math
import os
from typing import Any

import numpy as np


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


def write_json(path: str, obj: Any) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(_plain(obj), f, indent=2, allow_nan=False)
    f.write("\n")
  os.replace(tmp, path)  # a reader never sees half a file


def write_csv(path: str, rows: list[dict]) -> None:
  """Columns = union of the rows' keys in first-seen order; nested values as JSON text."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  columns: dict[str, None] = {}
  for row in rows:
    columns.update(dict.fromkeys(row))
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(columns))
    writer.writeheader()
    for row in rows:
      row = _plain(row)
      writer.writerow({k: ("" if v is None else json.dumps(v) if isinstance(v, (dict, list))
                           else v) for k, v in row.items()})
