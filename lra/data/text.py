"""IMDb reviews for the LRA Text task: byte-level encoding, two readers and the task loader.

Reviews are classified from their raw UTF-8 bytes: token id = byte + 1, 0 = padding (vocab 257).
Two sources give the same texts and labels: the TFDS ``imdb_reviews`` dataset prepared as
array_record (read with ``tfds.data_source``, no TensorFlow needed), or the original
``aclImdb_v1.tar.gz`` read directly.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from lra.data import archive, notes, record, store
from lra.data.reading import decode_utf8, open_tfds_source
from lra.data.tasks import FACTS, Task, require_prepared
from lra.errors import UserError

PAD_ID = 0
RAW_SPLITS: tuple[str, ...] = ("train", "test")


def encode_bytes(data: bytes, max_len: int) -> np.ndarray:
  """Returns uint16 ids [max_len]: byte + 1, truncated to max_len, zero padded."""
  if max_len < 0:
    raise UserError(f"max_len must be >= 0, got {max_len}")
  ids = np.zeros(max_len, np.uint16)
  head = np.frombuffer(bytes(data[:max_len]), np.uint8)
  ids[:head.size] = head.astype(np.uint16) + 1
  return ids


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
      "pass the raw aclImdb_v1.tar.gz to lra.data.text.load_raw_imdb instead.")
  texts: list[bytes] = []
  labels = np.empty(len(source), np.int32)
  for i in range(len(source)):
    example = source[i]
    texts.append(_as_bytes(example["text"]))
    labels[i] = int(example["label"])
  if labels.size and (labels.min() < 0 or labels.max() >= FACTS["text"].num_classes):
    raise UserError(f"imdb_reviews split {split!r} has labels outside 0..1 "
                    "(the 'unsupervised' split is unlabelled)")
  return texts, labels


# What aclImdb_v1.tar.gz holds (12,500 pos + 12,500 neg per split): fewer means the archive is
# damaged. Tests set smaller counts for their tiny archives.
RELEASE_REVIEWS: dict[str, int] = {"train": 25_000, "test": 25_000}


def load_raw_imdb(tar_path: str, split: str) -> tuple[list[bytes], np.ndarray]:
  """Reads aclImdb/<split>/{pos,neg}/*.txt from aclImdb_v1.tar.gz without extracting it.

  Returns (texts, int32 labels: 1 = pos, 0 = neg), sorted by member name. Each text has
  surrounding whitespace stripped, as the TFDS builder does, so both sources agree. A damaged
  archive, a review count other than RELEASE_REVIEWS[split] or a review that is not UTF-8
  raises UserError.
  """
  if split not in RAW_SPLITS:
    raise ValueError(f"split must be one of {RAW_SPLITS}, got {split!r}")
  if os.path.isdir(tar_path):
    raise UserError(f"{tar_path} is a folder; pass the IMDb tarball aclImdb_v1.tar.gz itself")
  if not os.path.isfile(tar_path):
    raise UserError(f"IMDb tarball not found: {tar_path}")
  pattern = re.compile(rf"aclImdb/{split}/(pos|neg)/[^/]+\.txt")
  members = archive.read_members(tar_path, pattern.fullmatch)
  if not members:
    raise UserError(f"{tar_path} has no aclImdb/{split}/pos/*.txt or "
                    f"aclImdb/{split}/neg/*.txt members: it is not aclImdb_v1.tar.gz, or it is "
                    "truncated; fetch it again")
  expected = RELEASE_REVIEWS[split]
  if len(members) < expected:
    raise archive.corrupt(tar_path, f"it holds {len(members)} of the {expected} "
                          f"aclImdb/{split} reviews of aclImdb_v1.tar.gz")
  if len(members) > expected:
    raise UserError(f"{tar_path} holds {len(members)} aclImdb/{split} reviews, not the "
                    f"{expected} of aclImdb_v1.tar.gz; pass the original download")
  names = sorted(members)
  for name in names:
    decode_utf8(members[name], f"{tar_path}, member {name}")
  texts = [members[name].strip() for name in names]
  labels = [1 if pattern.fullmatch(name).group(1) == "pos" else 0 for name in names]
  return texts, np.asarray(labels, np.int32)


def load(config) -> Task:
  """The prepared Text task; validation is a held-out part of train, or the test split."""
  data = config.data
  remake = (f"python -m lra.data text --data_dir={data.data_dir} "
            f"--imdb_tar=PATH/aclImdb_v1.tar.gz --max_len={data.max_len}  (or --tfds_dir=DIR)")
  require_prepared(data.data_dir, ("train", "test"), "Text", remake)
  note = record.check(data.data_dir, "text", data, remake)  # made with the config's settings
  num_train = store.num_rows(data.data_dir, "train", remake)
  if data.validation == "heldout":
    # A fixed random 10% of train, so validation never sees the test set.
    order = np.random.default_rng(data.split_seed).permutation(num_train)
    num_val = int(round(num_train * data.val_fraction))
    train_index, val_index = np.sort(order[num_val:]), np.sort(order[:num_val])
    val_source = "train"
  elif data.validation == "test":  # the original: validate on the test split
    train_index, val_index, val_source = np.arange(num_train), None, "test"
  else:
    raise UserError(f"config.data.validation={data.validation!r} is not 'heldout' or 'test'")
  load_split = lambda split, index=None: store.load_split(data.data_dir, split, ["inputs"],
                                                          data.max_len, index, remake)
  splits = {"train": load_split("train", train_index), "val": load_split(val_source, val_index),
            "test": load_split("test")}
  record.verify(data.data_dir, remake)  # after the files' own checks: no edits since made
  note["cut"] = notes.cut_of_rows(splits, ["inputs"], data.max_len)  # rows longer than max_len
  return Task.of("text", data.max_len, splits, data=note)
