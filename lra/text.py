"""IMDb reviews for the LRA Text task: byte-level encoding and two readers.

Reviews are classified from their raw UTF-8 bytes: token id = byte + 1, 0 = padding (vocab 257).
Two sources give the same texts and labels: the TFDS ``imdb_reviews`` dataset prepared as
array_record (read with ``tfds.data_source``, no TensorFlow needed), or the original
``aclImdb_v1.tar.gz`` read directly.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Sequence
from typing import Any

import numpy as np

PAD_ID = 0
VOCAB_SIZE = 257  # 256 byte values shifted by one, plus padding
NUM_CLASSES = 2
RAW_SPLITS: tuple[str, ...] = ("train", "test")


def encode_bytes(data: bytes, max_len: int) -> np.ndarray:
  """Returns uint16 ids [max_len]: byte + 1, truncated to max_len, zero padded."""
  if max_len < 0:
    raise ValueError(f"max_len must be >= 0, got {max_len}")
  ids = np.zeros(max_len, np.uint16)
  head = np.frombuffer(bytes(data[:max_len]), np.uint8)
  ids[:head.size] = head.astype(np.uint16) + 1
  return ids


def _prepare_hint(name: str, data_dir: str | None, raw_hint: str) -> str:
  where = repr(data_dir) if data_dir is not None else (
      "None (the TFDS default: $TFDS_DATA_DIR or ~/tensorflow_datasets)")
  dir_arg = repr(data_dir) if data_dir is not None else "None"
  return (f"TFDS dataset {name!r} is not prepared as array_record under data_dir={where}. "
          "Prepare it once on a machine with TensorFlow installed:\n"
          f"  python -c \"import tensorflow_datasets as tfds; tfds.builder({name!r}, "
          f"data_dir={dir_arg}, file_format='array_record').download_and_prepare()\"\n"
          f"or {raw_hint}")


def open_tfds_source(name: str, split: str, data_dir: str | None, raw_hint: str) -> Sequence[Any]:
  """tfds.data_source without downloading; a missing dataset raises FileNotFoundError."""
  import tensorflow_datasets as tfds  # slow import, only needed for this source
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except (NotImplementedError, KeyError, FileNotFoundError) as e:
    # TFDS reports a missing dataset as a non-random-access (TFRecord) format when no
    # dataset_info.json exists, or as empty splits; neither names the actual problem.
    raise FileNotFoundError(f"{_prepare_hint(name, data_dir, raw_hint)}\n(TFDS said: {e})") from e


def _as_bytes(text: Any) -> bytes:
  # Prepared data gives bytes; tfds' mocked or decoded sources can give str.
  if isinstance(text, (bytes, np.bytes_)):
    return bytes(text)
  if isinstance(text, (str, np.str_)):
    return str(text).encode("utf-8")
  if isinstance(text, np.ndarray) and text.shape == ():
    return _as_bytes(text.item())
  raise TypeError(f"unexpected text feature type {type(text).__name__}")


def load_tfds_imdb(split: str, data_dir: str | None) -> tuple[list[bytes], np.ndarray]:
  """Reads TFDS imdb_reviews (plain_text); returns (texts as UTF-8 bytes, int32 labels).

  Order is the data source's index order. Labels: 0 = neg, 1 = pos. ``split`` is any TFDS split
  string ("train", "test", "train[:90%]", ...).
  """
  source = open_tfds_source(
      "imdb_reviews", split, data_dir,
      "pass the raw aclImdb_v1.tar.gz to lra.text.load_raw_imdb instead.")
  texts: list[bytes] = []
  labels = np.empty(len(source), np.int32)
  for i in range(len(source)):
    example = source[i]
    texts.append(_as_bytes(example["text"]))
    labels[i] = int(example["label"])
  if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    raise ValueError(f"imdb_reviews split {split!r} has labels outside 0..1 "
                     "(the 'unsupervised' split is unlabelled)")
  return texts, labels


def load_raw_imdb(tar_path: str, split: str) -> tuple[list[bytes], np.ndarray]:
  """Reads aclImdb/<split>/{pos,neg}/*.txt from aclImdb_v1.tar.gz without extracting it.

  Returns (texts, int32 labels: 1 = pos, 0 = neg), sorted by member name. Each text has
  surrounding whitespace stripped, as the TFDS builder does, so both sources agree.
  """
  if split not in RAW_SPLITS:
    raise ValueError(f"split must be one of {RAW_SPLITS}, got {split!r}")
  if not os.path.isfile(tar_path):
    raise FileNotFoundError(f"IMDb tarball not found: {tar_path}")
  pattern = re.compile(rf"aclImdb/{split}/(pos|neg)/[^/]+\.txt")
  found: list[tuple[str, bytes, int]] = []
  # One pass in archive order: jumping back in a gzip stream would re-decompress from the start.
  try:
    with tarfile.open(tar_path, "r|*") as tar:
      for member in tar:
        match = pattern.fullmatch(member.name)
        if not (match and member.isfile()):
          continue
        handle = tar.extractfile(member)
        assert handle is not None  # regular files always have contents
        found.append((member.name, handle.read().strip(), 1 if match.group(1) == "pos" else 0))
  except tarfile.TarError as e:
    raise ValueError(f"{tar_path} is not a readable tar archive: {e}") from e
  if not found:
    raise ValueError(f"{tar_path} has no aclImdb/{split}/pos/*.txt or "
                     f"aclImdb/{split}/neg/*.txt members")
  found.sort(key=lambda item: item[0])
  texts = [text for _, text, _ in found]
  labels = [label for _, _, label in found]
  return texts, np.asarray(labels, np.int32)
