"""A config as results.json and the checkpoints record it: JSON (tuples become lists), and
flattened to dotted keys for comparisons ("model.attention.block_size")."""
from __future__ import annotations

import json
from typing import Any


def as_json(config) -> dict:
  """The config as it reads back from JSON."""
  return json.loads(json.dumps(config.to_dict()))


def flat(tree: dict, prefix: str = "") -> dict[str, Any]:
  """{dotted key: value} of a nested dict."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out
