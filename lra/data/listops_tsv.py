"""The ListOps TSV files (the LRA release's `listops-1000/basic_*.tsv`, and what the generator
writes): the fixed vocabulary, the original's tokenisation and the reader.

A file: the header `Source\\tTarget`, then one `expression\\tlabel` line per example (the
release's lines end in CRLF, the generator's in LF: both are read).
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from lra.data.reading import decode_utf8
from lra.data.tasks import FACTS
from lra.errors import UserError

OPERATORS: tuple[str, ...] = ("[MIN", "[MAX", "[MED", "[SM")
HEADER = "Source\tTarget"
NUM_CLASSES = FACTS["listops"].num_classes

# Fixed vocabulary (the original built it from a Python set, so its ids varied between runs).
PAD_ID = 0
VOCAB: tuple[str, ...] = OPERATORS + tuple(str(v) for v in range(10)) + ("X",)
OOV_ID = len(VOCAB) + 1
_TOKEN_IDS = {tok: i + 1 for i, tok in enumerate(VOCAB)}

# Unknown tokens are read as OOV_ID (as the original's vocabulary did) while they are rare: at
# most this share of a file's tokens. A release file has none, so a few are damage the model
# can live with (counted and said); more are another vocabulary or format, which would train on
# noise, and the file is refused. A line more than half unknown is not a ListOps expression at
# all, however large the file around it, and is refused at once.
RARE_UNKNOWN = 0.001


def tokenize(source: str) -> list[int]:
  """The original preprocessing: ']' -> 'X', drop '(' and ')', split on whitespace."""
  return [_TOKEN_IDS.get(t, OOV_ID) for t in _tokens(source)]


def _tokens(source: str) -> list[str]:
  return source.replace("]", "X").replace("(", "").replace(")", "").split()


class Split(NamedTuple):
  inputs: np.ndarray   # int32 [N, max_length], 0-padded and cut to max_length
  labels: np.ndarray   # int32 [N]
  lengths: np.ndarray  # int64 [N]: each example's tokens before the cut
  unknown: dict | None  # {"count", "tokens", "file", "first_line", "first_token"} or None


class _Unknown:
  """Counts a file's unknown tokens; refuses the file where they are not rare."""

  def __init__(self, path: str):
    self.path, self.count, self.tokens, self.first = path, 0, 0, None

  def add(self, line_no: int, tokens: list[str], ids: list[int]) -> None:
    self.tokens += len(ids)
    unknown = ids.count(OOV_ID)
    if not unknown:
      return
    self.count += unknown
    token = next(t for t in tokens if t not in _TOKEN_IDS)
    if self.first is None:
      self.first = (line_no, token)
    if 2 * unknown > len(ids):
      raise self._refused(line_no, token, f"{unknown} of the line's {len(ids)} tokens are "
                                          f"unknown: it is not a ListOps expression")

  def _refused(self, line_no: int, token: str, why: str) -> UserError:
    return UserError(f"{self.path}, line {line_no}: unknown token {token!r} (the vocabulary: "
                     f"{' '.join(VOCAB)}, brackets); {why}; the file is damaged or of another "
                     f"format")

  def result(self) -> dict | None:
    if not self.count:
      return None
    if self.count > RARE_UNKNOWN * self.tokens:
      raise self._refused(*self.first, f"{self.count} unknown tokens in the file "
                                       f"({self.count / self.tokens:.2%} of its "
                                       f"{self.tokens:,}), more than the {RARE_UNKNOWN:.1%} "
                                       f"read as the unknown id")
    return {"count": self.count, "tokens": self.tokens, "file": os.path.basename(self.path),
            "first_line": self.first[0], "first_token": self.first[1]}


def read_tsv(path: str | os.PathLike, max_length: int) -> Split:
  """Reads a ListOps TSV: the examples cut to max_length, their lengths before the cut and
  the unknown tokens (RARE_UNKNOWN). A missing or malformed file raises UserError naming the
  file and line."""
  path = os.fspath(path)
  if max_length < 1:
    raise UserError(f"max_length must be >= 1, got {max_length}")
  if not os.path.isfile(path):
    raise UserError(f"ListOps split file not found: {path}")

  def bad(line_no: int, what: str) -> UserError:
    return UserError(f"{path}, line {line_no}: {what}")

  inputs: list[np.ndarray] = []
  labels: list[int] = []
  lengths: list[int] = []
  unknown = _Unknown(path)
  with open(path, "rb") as f:
    lines = (decode_utf8(raw, f"{path}, line {n}") for n, raw in enumerate(f, start=1))
    header = next(lines, "")
    if not header:
      raise bad(1, f"file is empty, expected header {HEADER!r}")
    if header.rstrip("\r\n") != HEADER:
      raise bad(1, f"expected header {HEADER!r}, got {header.rstrip(chr(13) + chr(10))[:60]!r}")
    for line_no, line in enumerate(lines, start=2):
      columns = line.rstrip("\r\n").split("\t")
      if len(columns) != 2:
        raise bad(line_no, f"expected 2 tab-separated columns, got {len(columns)}")
      try:
        label = int(columns[1])
      except ValueError:
        label = -1
      if not 0 <= label < NUM_CLASSES:
        raise bad(line_no, f"label must be an integer 0..{NUM_CLASSES - 1}, got "
                           f"{columns[1][:20]!r}")
      tokens = _tokens(columns[0])
      ids = [_TOKEN_IDS.get(t, OOV_ID) for t in tokens]
      unknown.add(line_no, tokens, ids)
      row = np.zeros(max_length, dtype=np.int32)
      row[:min(len(ids), max_length)] = ids[:max_length]
      inputs.append(row)
      labels.append(label)
      lengths.append(len(ids))
  found = unknown.result()
  if not inputs:
    return Split(np.zeros((0, max_length), np.int32), np.zeros((0,), np.int32),
                 np.zeros((0,), np.int64), found)
  return Split(np.stack(inputs), np.asarray(labels, dtype=np.int32),
               np.asarray(lengths, dtype=np.int64), found)


def read_split(path: str | os.PathLike, max_length: int) -> tuple[np.ndarray, np.ndarray]:
  """read_tsv's int32 inputs [N, max_length] (0-padded, cut) and labels [N]."""
  split = read_tsv(path, max_length)
  return split.inputs, split.labels
