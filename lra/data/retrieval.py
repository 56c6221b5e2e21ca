"""Retrieval (ACL Anthology Network pairs): reads the release's new_aan_pairs.*.tsv files into
prepared splits, and the task loader.

Each line: label (float) \t id1 \t id2 \t text1 \t text2; no header, no quoting. Each text is
cut to 10,000 bytes, then to `max_len` byte tokens (id = byte + 1), as the original did.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import numpy as np

from lra.data import console, notes, record, store, text
from lra.data.reading import decode_utf8
from lra.data.tasks import SPLITS, Task, require_prepared
from lra.errors import UserError

SPLIT_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
               "test": "new_aan_pairs.test.tsv"}
MAX_BYTES = 10_000


def iter_pairs(path: str) -> Iterator[tuple[int, bytes, bytes]]:
  """(label, text1, text2) per line; a malformed line raises UserError naming file and line."""
  if not os.path.exists(path):
    raise UserError(f"AAN file not found: {path}")
  with open(path, "rb") as f:
    for number, line in enumerate(f, 1):
      # The model reads bytes, but bytes that are not UTF-8 mean a damaged or re-encoded file.
      decode_utf8(line, f"{path}, line {number}")
      columns = line.rstrip(b"\r\n").split(b"\t")
      if len(columns) != 5:
        raise UserError(f"{path}, line {number}: expected 5 tab-separated columns "
                        f"(label id1 id2 text1 text2), got {len(columns)}")
      try:
        label = float(columns[0])
      except ValueError:
        label = -1.0
      if label not in (0.0, 1.0):
        raise UserError(f"{path}, line {number}: label must be 0 or 1, got "
                        f"{columns[0][:20]!r}")
      yield int(label), columns[3][:MAX_BYTES], columns[4][:MAX_BYTES]


def prepare(release_dir: str, data_dir: str, max_len: int = 4000,
            progress: bool = True) -> dict[str, int]:
  """Tokenises the three release files into `data_dir` (memory-mapped .npy, streamed)."""
  sources = {split: os.path.join(release_dir, name) for split, name in SPLIT_FILES.items()}
  for source in sources.values():
    if not os.path.exists(source):
      raise UserError(f"AAN file not found: {source} (expected the release's "
                      f"tsv_data folder with {', '.join(SPLIT_FILES.values())})")
  counts = {}
  for split, source in sources.items():  # every split needs a pair: checked before writing
    with open(source, "rb") as f:
      counts[split] = sum(1 for _ in f)
    if not counts[split]:
      raise UserError(f"{source} is empty: the {split} split would have no pairs; pass the "
                      f"release's tsv_data folder, whose three files all hold pairs")
  # A concurrent prepare of this folder waits for its lock (record.writing), then rewrites it.
  # The splits are published together once all three files have been read, so a malformed
  # file changes nothing; the record comes last.
  made = {"task": "retrieval", "settings": {"max_len": max_len},
          "source": {"release_dir": os.path.abspath(release_dir)}}
  files = record.npy_files(SPLITS, ("inputs", "inputs2", "labels"))
  with record.writing(data_dir, made, files), contextlib.ExitStack() as writers:
    for split, source in sources.items():
      num = counts[split]
      writer = writers.enter_context(store.SplitWriter(data_dir, split, num, {
          "inputs": ((max_len,), np.uint16), "inputs2": ((max_len,), np.uint16),
          "labels": ((), np.int32)}))
      rows = console.bar(iter_pairs(source), total=num, desc=f"retrieval {split}",
                         progress=progress, unit="pair")
      for row, (label, first, second) in enumerate(rows):
        writer[row] = {"inputs": text.encode_bytes(first, max_len),
                       "inputs2": text.encode_bytes(second, max_len), "labels": label}
  return counts


def load(config) -> Task:
  """The prepared Retrieval task: pairs of byte sequences (a dual-encoder task)."""
  data = config.data
  remake = (f"python -m lra.data retrieval --data_dir={data.data_dir} "
            f"--release_dir=PATH/lra_release/tsv_data --max_len={data.max_len}")
  require_prepared(data.data_dir, SPLITS, "Retrieval", remake)
  note = record.check(data.data_dir, "retrieval", data, remake)  # made with these settings
  splits = {s: store.load_split(data.data_dir, s, ["inputs", "inputs2"], data.max_len,
                                remake=remake) for s in SPLITS}
  record.verify(data.data_dir, remake)  # after the files' own checks: no edits since made
  # Pairs with a paper longer than max_len (lra.data.notes).
  note["cut"] = notes.cut_of_rows(splits, ["inputs", "inputs2"], data.max_len)
  return Task.of("retrieval", data.max_len, splits, data=note)
