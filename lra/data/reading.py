"""Reading helpers the task readers share: text that must be UTF-8, and TFDS data sources
(prepared array_record data read without TensorFlow); each failure is one line (UserError)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lra.errors import UserError


def decode_utf8(data: bytes, where: str) -> str:
  """`data` as text; bytes that are not UTF-8 raise UserError naming `where` (file and line)."""
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise UserError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at column "
                    f"{e.start + 1}); the file is damaged or in another encoding, fetch or "
                    "save it again as UTF-8") from None


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
  """tfds.data_source without downloading; a missing dataset raises UserError."""
  try:
    import tensorflow_datasets as tfds  # slow import, only needed for this source
  except ModuleNotFoundError as e:
    if e.name != "tensorflow_datasets":
      raise
    raise UserError("reading a TFDS folder needs tensorflow-datasets: pip install -e '.[tfds]' "
                    f"-c constraints.txt (or {raw_hint})") from e
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except (NotImplementedError, KeyError, FileNotFoundError) as e:
    # TFDS reports a missing dataset as a non-random-access (TFRecord) format when no
    # dataset_info.json exists, or as empty splits; neither names the actual problem.
    raise UserError(f"{_prepare_hint(name, data_dir, raw_hint)}\n(TFDS said: {e})") from e
