"""What a task's data notes beside its splits (Task.data, written into results.json) and says
when it loads: rows cut to max_len, tokens read as the unknown id.

The cut is measured on the examples as read, whatever made them (a record of ours or files
given by hand): {"from": the longest example's length, "to": max_len, "examples": N,
"examples_cut": n, "share": n / N, "splits": {split: {"examples", "examples_cut", "share",
"longest"}}}, or None when no example is longer than max_len. ("from" and "to" keep the names
of the earlier record, which held the two lengths only.) Prepared Text and Retrieval rows were
cut to the data's own max_len when prepared (the task's 4,000 tokens): their lengths are those
of the prepared rows.
"""
from __future__ import annotations

import sys

import numpy as np


def _split(examples: int, cut_n: int, longest: int) -> dict:
  return {"examples": examples, "examples_cut": cut_n,
          "share": cut_n / examples if examples else 0.0, "longest": longest}


def _total(splits: dict[str, dict], max_len: int) -> dict | None:
  cut_n = sum(s["examples_cut"] for s in splits.values())
  if not cut_n:
    return None
  examples = sum(s["examples"] for s in splits.values())
  return {"from": max(s["longest"] for s in splits.values()), "to": max_len,
          "examples": examples, "examples_cut": cut_n, "share": cut_n / examples,
          "splits": splits}


def cut(lengths: dict[str, np.ndarray], max_len: int) -> dict | None:
  """The cut record of splits whose examples have `lengths` (tokens, before any cut)."""
  splits = {}
  for split, lengths_N in lengths.items():
    lengths_N = np.asarray(lengths_N)
    splits[split] = _split(len(lengths_N), int(np.count_nonzero(lengths_N > max_len)),
                           int(lengths_N.max()) if len(lengths_N) else 0)
  return _total(splits, max_len)


def _tokens_at(rows, column: int) -> np.ndarray:
  """Which rows of `rows` (a lra.data.store.Rows) hold a token (not padding 0) at `column`."""
  return np.asarray(rows.base[:, column])[rows.index] != 0


def _longest(rows, below: int) -> int:
  """The longest row's length, knowing that no row holds a token at column `below`. The
  prepared rows' tokens are contiguous from the start, so some row is longer than j exactly
  when a row holds a token at column j: a search reads a few columns, not the rows (real data
  has a row as long as it may be, found by the first read)."""
  low, high = -1, below  # a token at column `low` (-1: none found yet), none at `high`
  while high - low > 1:
    middle = high - 1 if low == -1 and high == below else (low + high) // 2
    if _tokens_at(rows, middle).any():
      low = middle
    else:
      high = middle
  return low + 1


def cut_of_rows(splits: dict[str, dict], fields, max_len: int) -> dict | None:
  """The cut record of prepared byte rows (lra.data.store.Rows in each split's `fields`) read
  at `max_len`: an example is cut if any of its fields is (a Retrieval pair: either paper)."""
  rows = {split: [arrays[f] for f in fields] for split, arrays in splits.items()}
  width = next(iter(rows.values()))[0].base.shape[1]
  if max_len >= width:  # no row is longer than max_len
    return None
  over = {split: np.any([_tokens_at(r, max_len) for r in rs], axis=0)
          for split, rs in rows.items()}
  if not any(o.any() for o in over.values()):
    return None
  records = {}
  for split, rs in rows.items():  # the longest: past max_len where a row is cut, else within
    below = width if over[split].any() else max_len
    records[split] = _split(len(over[split]), int(np.count_nonzero(over[split])),
                            max(_longest(r, below) for r in rs))
  return _total(records, max_len)


def lines(name: str, data: dict) -> list[str]:
  """What the task's data note says when it loads: one line each."""
  said = []
  made = data.get("cut")
  if made:
    per_split = ", ".join(f"{split} {s['examples_cut']:,} of {s['examples']:,}"
                          for split, s in made["splits"].items())
    said.append(f"warning: {name} data: {made['examples_cut']:,} of {made['examples']:,} "
                f"examples ({made['share']:.1%}) are longer than max_len={made['to']} and are "
                f"cut to it ({per_split}); the longest has {made['from']:,} tokens, so "
                f"config.data.max_len={made['from']} would read every example whole")
  for split, u in (data.get("unknown_tokens") or {}).items():
    said.append(f"note: {name} data: {u['count']:,} unknown token(s) in the {split} split "
                f"({u['count'] / u['tokens']:.3%} of its tokens) read as the unknown id, the "
                f"first in {u['file']}, line {u['first_line']}: {u['first_token']!r}")
  return said


def say(name: str, data: dict) -> None:
  """Prints `lines` once: in a training process (JAX loaded: the data layer never imports
  it), process 0 only, as the trainer's own lines."""
  jax = sys.modules.get("jax")
  if jax is not None and jax.process_index() != 0:
    return
  for line in lines(name, data):
    print(line, flush=True)
