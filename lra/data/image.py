"""CIFAR-10 for the LRA Image task: grayscale pixels as a sequence of 1,024 tokens; readers
and the task loader.

Each 32x32 RGB image becomes grayscale exactly as the original pipeline computed it with
``tf.image.rgb_to_grayscale`` on uint8 images, then is flattened row-major. Pixel values 0..255
are the tokens themselves, so a black pixel is token 0: whether that counts as padding (the
original's ``inputs > 0`` mask did) is decided by the task code, not here.

Two sources: TFDS ``cifar10`` prepared as array_record (``tfds.data_source``, no TensorFlow
needed), or the "CIFAR-10 binary version" (``cifar-10-batches-bin`` or its tarball).
"""

from __future__ import annotations

import os
import posixpath

import numpy as np

from lra.data import archive, record, store
from lra.data.tasks import FACTS, SPLITS, Task, require_prepared
from lra.data.reading import open_tfds_source
from lra.errors import UserError

SIDE = 32
SEQ_LEN = SIDE * SIDE
RECORD_BYTES = 1 + 3 * SEQ_LEN  # label byte, then the R, G and B planes
RAW_FILES: dict[str, tuple[str, ...]] = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}
# What the CIFAR-10 binary version holds (10,000 images per batch file): fewer means a damaged
# download. Tests set smaller counts for their tiny files.
RELEASE_IMAGES: dict[str, int] = {"train": 50_000, "test": 10_000}

_TO_FLOAT = np.float32(1 / 255)  # tf.image.convert_image_dtype uint8 -> float32
_FROM_FLOAT = np.float32(255.5)  # convert_image_dtype float32 -> uint8 (dtype max + 0.5)
_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], np.float32)


def rgb_to_gray(rgb: np.ndarray) -> np.ndarray:
  """uint8 [..., 3] -> uint8 [...], matching tf.image.rgb_to_grayscale on uint8 images.

  All in float32, as TensorFlow computes it:
    x = float32(rgb) * float32(1/255)
    g = x[..., 0] * 0.2989 + x[..., 1] * 0.5870 + x[..., 2] * 0.1140   (float32 weights)
    gray = uint8(trunc(g * float32(255.5)))
  The sum is taken left to right with every operation rounded to float32. This matches
  TensorFlow 2.21 (CPU) on all 256**3 colours; np.tensordot / matmul would not (BLAS sums in
  another order and differs on a few dozen colours). g <= 0.9999 keeps g * 255.5 below 256, so
  no clipping is needed.
  """
  rgb = np.asarray(rgb)
  if rgb.dtype != np.uint8 or rgb.ndim < 1 or rgb.shape[-1] != 3:
    raise ValueError(f"expected uint8 [..., 3], got {rgb.dtype} {rgb.shape}")
  x = rgb.astype(np.float32) * _TO_FLOAT
  gray = x[..., 0] * _WEIGHTS[0]
  gray += x[..., 1] * _WEIGHTS[1]
  gray += x[..., 2] * _WEIGHTS[2]
  gray *= _FROM_FLOAT
  return gray.astype(np.uint8)  # float -> uint8 truncates toward zero, like tf.cast


def load_tfds_cifar10(split: str, data_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
  """Reads TFDS cifar10; returns (uint8 [N, 1024] grayscale, row-major; int32 [N] labels).

  ``split`` is passed to TFDS unchanged, so "train[:90%]" / "train[90%:]" / "test" work.
  Order is the data source's index order.
  """
  source = open_tfds_source(
      "cifar10", split, data_dir,
      "pass cifar-10-batches-bin (or cifar-10-binary.tar.gz) to "
      "lra.data.image.load_raw_cifar10 instead.")
  pixels = np.empty((len(source), SEQ_LEN), np.uint8)
  labels = np.empty(len(source), np.int32)
  for i in range(len(source)):
    example = source[i]
    image = np.asarray(example["image"])
    if image.shape != (SIDE, SIDE, 3):
      raise UserError(f"cifar10 {split!r} example {i}: image shape {image.shape}, "
                      f"expected {(SIDE, SIDE, 3)}")
    pixels[i] = rgb_to_gray(image).reshape(-1)
    labels[i] = int(example["label"])
  return pixels, labels


def _decode_batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
  if len(data) % RECORD_BYTES:
    raise UserError(f"{name}: {len(data)} bytes is not a multiple of {RECORD_BYTES}; "
                    f"record {len(data) // RECORD_BYTES} is truncated "
                    f"({len(data) % RECORD_BYTES} of {RECORD_BYTES} bytes)")
  records = np.frombuffer(data, np.uint8).reshape(-1, RECORD_BYTES)
  labels = records[:, 0]
  classes = FACTS["image"].num_classes
  bad = np.flatnonzero(labels >= classes)
  if bad.size:
    raise UserError(f"{name}: record {bad[0]} has label {labels[bad[0]]}, "
                    f"expected 0..{classes - 1}")
  # Planes R, G, B of SEQ_LEN row-major pixels each -> [N, SEQ_LEN, 3].
  rgb = records[:, 1:].reshape(-1, 3, SEQ_LEN).transpose(0, 2, 1)
  return rgb_to_gray(rgb), labels.astype(np.int32)


def _read_raw_files(path: str, names: tuple[str, ...]) -> list[tuple[str, bytes]]:
  """(display name, contents) of each file, from a folder or a tarball, in ``names`` order."""
  if os.path.isdir(path):
    out = []
    for name in names:
      file = os.path.join(path, name)
      if not os.path.isfile(file):
        raise UserError(f"CIFAR-10 batch file not found: {file}")
      with open(file, "rb") as f:
        out.append((file, f.read()))
    return out
  if not os.path.isfile(path):
    raise UserError(f"CIFAR-10 binary data not found: {path} (expected the folder "
                    "cifar-10-batches-bin or the tarball cifar-10-binary.tar.gz)")
  found: dict[str, tuple[str, bytes]] = {}
  for member, data in archive.read_members(path, lambda m: posixpath.basename(m) in names).items():
    found.setdefault(posixpath.basename(member), (f"{path}:{member}", data))
  missing = [name for name in names if name not in found]
  if missing:
    raise UserError(f"{path} has no member named {', '.join(missing)}")
  return [found[name] for name in names]


def load_raw_cifar10(path: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  """Reads the CIFAR-10 binary version: uint8 [N, 1024] grayscale and int32 [N] labels.

  ``path`` is the folder cifar-10-batches-bin or the tarball cifar-10-binary.tar.gz (read
  without extracting). "train" is data_batch_1..5.bin in that order, "test" is test_batch.bin.
  """
  if split not in RAW_FILES:
    raise ValueError(f"split must be one of {tuple(RAW_FILES)}, got {split!r}")
  decoded = [_decode_batch(data, name) for name, data in _read_raw_files(path, RAW_FILES[split])]
  labels = np.concatenate([labels for _, labels in decoded])
  if len(labels) < RELEASE_IMAGES[split]:
    raise archive.corrupt(path, f"its {split} files hold {len(labels)} of the "
                          f"{RELEASE_IMAGES[split]} images of CIFAR-10")
  if len(labels) > RELEASE_IMAGES[split]:
    raise UserError(f"{path}: its {split} files hold {len(labels)} images, not the "
                    f"{RELEASE_IMAGES[split]} of CIFAR-10; pass the original download")
  return np.concatenate([pixels for pixels, _ in decoded]), labels


def load(config) -> Task:
  """The prepared Image task; black pixels are real tokens unless config.data.black_is_padding."""
  data = config.data
  remake = (f"python -m lra.data image --data_dir={data.data_dir} "
            f"--cifar=PATH/cifar-10-binary.tar.gz  (or --tfds_dir=DIR)")
  require_prepared(data.data_dir, SPLITS, "Image", remake)
  note = record.check(data.data_dir, "image", data, remake)  # made by this code, as image data
  splits = {s: store.load_split(data.data_dir, s, ["inputs"], SEQ_LEN, remake=remake)
            for s in SPLITS}
  record.verify(data.data_dir, remake)  # after the files' own checks: no edits since made
  return Task.of("image", SEQ_LEN, splits, padding=data.black_is_padding, data=note)
