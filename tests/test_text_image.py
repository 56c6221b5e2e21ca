"""IMDb and CIFAR-10 readers and encodings, on tiny files written here (nothing downloaded)."""
import io
import os
import sys
import tarfile
import tempfile

import numpy as np
import pytest

from lra.data import image, text
from lra.errors import UserError

tfds = pytest.importorskip("tensorflow_datasets")


@pytest.fixture(autouse=True)
def _tfds_temp_dirs_in_tmp_path(tmp_path, monkeypatch):
  """TFDS makes an empty temporary folder each time it reads dataset info; keep them out of
  /tmp."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


# ---------------------------------------------------------------- bytes encoding


def test_encode_bytes_exact_ids():
  ids = text.encode_bytes(b"ab\x00\xff", 6)
  assert ids.dtype == np.uint16 and ids.shape == (6,)
  assert ids.tolist() == [98, 99, 1, 256, 0, 0]


def test_encode_bytes_truncates_and_handles_empty():
  assert text.encode_bytes(b"hello world", 5).tolist() == [105, 102, 109, 109, 112]
  assert text.encode_bytes(b"", 3).tolist() == [0, 0, 0]
  assert text.encode_bytes(b"abc", 0).shape == (0,)
  utf8 = "é".encode("utf-8")  # two bytes, each its own token
  assert text.encode_bytes(utf8, 3).tolist() == [0xC3 + 1, 0xA9 + 1, 0]


# ---------------------------------------------------------------- raw IMDb tarball


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
  info = tarfile.TarInfo(name)
  info.size = len(data)
  tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def imdb_tar(tmp_path, monkeypatch):
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": 3, "test": 2})  # this tiny archive's
  path = tmp_path / "aclImdb_v1.tar.gz"
  with tarfile.open(path, "w:gz") as tar:
    # Archive order differs from name order on purpose; the reader must sort.
    _add(tar, "aclImdb/train/pos/7_9.txt", b"Great film.<br /><br />Loved it. \n")
    _add(tar, "aclImdb/train/neg/3_2.txt", "Dreadful. Caf\u00e9 scene aside.".encode("utf-8"))
    _add(tar, "aclImdb/train/pos/10_8.txt", b"Superb")
    _add(tar, "aclImdb/train/unsup/0_0.txt", b"unlabelled, must be skipped")
    _add(tar, "aclImdb/train/urls_pos.txt", b"http://example.invalid/")
    _add(tar, "aclImdb/train/pos/notes.md", b"not a review")
    _add(tar, "aclImdb/train/labeledBow.feat", b"0 0:1")
    _add(tar, "aclImdb/test/neg/1_1.txt", b"Bad")
    _add(tar, "aclImdb/test/pos/2_10.txt", b"Good")
  return str(path)


def test_load_raw_imdb_train(imdb_tar):
  texts, labels = text.load_raw_imdb(imdb_tar, "train")
  # Sorted by member name: neg/3_2, pos/10_8, pos/7_9. Surrounding whitespace is stripped as
  # the TFDS builder does.
  assert texts == ["Dreadful. Caf\u00e9 scene aside.".encode("utf-8"), b"Superb",
                   b"Great film.<br /><br />Loved it."]
  assert labels.dtype == np.int32 and labels.tolist() == [0, 1, 1]


def test_load_raw_imdb_test(imdb_tar):
  texts, labels = text.load_raw_imdb(imdb_tar, "test")
  assert texts == [b"Bad", b"Good"] and labels.tolist() == [0, 1]


def test_load_raw_imdb_errors(imdb_tar, tmp_path):
  with pytest.raises(UserError):
    text.load_raw_imdb(str(tmp_path / "missing.tar.gz"), "train")
  empty = tmp_path / "other.tar.gz"
  with tarfile.open(empty, "w:gz") as tar:
    _add(tar, "aclImdb/train/unsup/0_0.txt", b"x")
  with pytest.raises(UserError, match="other.tar.gz"):
    text.load_raw_imdb(str(empty), "train")
  with pytest.raises(ValueError, match="split"):
    text.load_raw_imdb(imdb_tar, "unsup")


# ---------------------------------------------------------------- grayscale


def _gray_reference(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Independent float64 version of the formula: (truncated value, the untruncated value)."""
  value = (rgb.astype(np.float64) / 255.0) @ np.array([0.2989, 0.5870, 0.1140]) * 255.5
  return np.floor(value), value


def _check_against_reference(rgb: np.ndarray) -> None:
  got = image.rgb_to_gray(rgb)
  assert got.dtype == np.uint8 and got.shape == rgb.shape[:-1]
  want, value = _gray_reference(rgb)
  # float32 rounding can only move the result where the exact value is next to an integer.
  near_integer = np.abs(value - np.round(value)) < 1e-4
  differ = got != want
  assert not np.any(differ & ~near_integer)
  assert np.mean(~differ) >= 0.999
  assert np.all(np.abs(got.astype(np.int64) - want) <= 1)


def test_rgb_to_gray_known_values():
  rgb = np.array([[255, 255, 255], [0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255]],
                 np.uint8)
  # 255.5 * weights: 76.37, 149.98, 29.13; white 255.5 * 0.9999 = 255.47.
  assert image.rgb_to_gray(rgb).tolist() == [255, 0, 76, 149, 29]


def test_rgb_to_gray_all_grey_levels():
  levels = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
  _check_against_reference(levels)
  got = image.rgb_to_gray(levels).astype(np.int64)
  # The weights sum to 0.9999, so a grey level maps to itself or one below, never above.
  assert np.all((got == np.arange(256)) | (got == np.arange(256) - 1))


def test_rgb_to_gray_random_colours_and_shapes():
  rng = np.random.default_rng(0)
  rgb = rng.integers(0, 256, size=(200_000, 3), dtype=np.uint8)
  _check_against_reference(rgb)
  batch = rgb[:2 * 32 * 32].reshape(2, 32, 32, 3)
  assert np.array_equal(image.rgb_to_gray(batch).reshape(-1), image.rgb_to_gray(rgb[:2048]))
  with pytest.raises(ValueError):
    image.rgb_to_gray(rgb.astype(np.float32))
  with pytest.raises(ValueError):
    image.rgb_to_gray(rgb[:, :2])


# ---------------------------------------------------------------- raw CIFAR-10 binary


def _cifar_batch(rng: np.random.Generator, labels: list[int]) -> tuple[bytes, np.ndarray]:
  """Binary records and the [N, 32, 32, 3] images they hold."""
  images = rng.integers(0, 256, size=(len(labels), 32, 32, 3), dtype=np.uint8)
  records = [bytes([label]) + img.transpose(2, 0, 1).tobytes()  # R plane, G plane, B plane
             for label, img in zip(labels, images)]
  return b"".join(records), images


@pytest.fixture
def cifar_raw(tmp_path, monkeypatch):
  """A cifar-10-batches-bin folder and the same files as a tarball, plus the expected data."""
  monkeypatch.setattr(image, "RELEASE_IMAGES", {"train": 15, "test": 3})  # these tiny files'
  rng = np.random.default_rng(1)
  folder = tmp_path / "cifar-10-batches-bin"
  folder.mkdir()
  expected = {}
  train_images, train_labels = [], []
  for i in range(1, 6):
    labels = [(3 * i + j) % 10 for j in range(i)]  # batch i holds i records
    data, imgs = _cifar_batch(rng, labels)
    (folder / f"data_batch_{i}.bin").write_bytes(data)
    train_images.append(imgs)
    train_labels += labels
  expected["train"] = (np.concatenate(train_images), train_labels)
  data, imgs = _cifar_batch(rng, [9, 0, 5])
  (folder / "test_batch.bin").write_bytes(data)
  expected["test"] = (imgs, [9, 0, 5])
  (folder / "batches.meta.txt").write_text("airplane\n")
  tar_path = tmp_path / "cifar-10-binary.tar.gz"
  with tarfile.open(tar_path, "w:gz") as tar:
    # Reverse order, so the reader cannot rely on archive order.
    for name in sorted(os.listdir(folder), reverse=True):
      tar.add(folder / name, arcname=f"cifar-10-batches-bin/{name}")
  return str(folder), str(tar_path), expected


@pytest.mark.parametrize("source", ["folder", "tar"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_load_raw_cifar10(cifar_raw, source, split):
  folder, tar_path, expected = cifar_raw
  pixels, labels = image.load_raw_cifar10(folder if source == "folder" else tar_path, split)
  images, want_labels = expected[split]
  assert pixels.dtype == np.uint8 and pixels.shape == (len(want_labels), 1024)
  assert labels.dtype == np.int32 and labels.tolist() == want_labels
  for got, img in zip(pixels, images):
    gray = image.rgb_to_gray(img)
    assert np.array_equal(got, gray.reshape(-1))
    assert got[5 * 32 + 7] == gray[5, 7]  # row-major: row 5, column 7


def test_load_raw_cifar10_errors(cifar_raw, tmp_path):
  folder, _, _ = cifar_raw
  with open(os.path.join(folder, "test_batch.bin"), "ab") as f:
    f.write(b"\x01\x02")
  with pytest.raises(UserError, match=r"test_batch\.bin.*record 3"):
    image.load_raw_cifar10(folder, "test")

  bad_label = tmp_path / "bad"
  bad_label.mkdir()
  data, _ = _cifar_batch(np.random.default_rng(2), [1, 12])
  (bad_label / "test_batch.bin").write_bytes(data)
  with pytest.raises(UserError, match=r"test_batch\.bin.*record 1.*12"):
    image.load_raw_cifar10(str(bad_label), "test")

  os.remove(os.path.join(folder, "data_batch_4.bin"))
  with pytest.raises(UserError, match="data_batch_4"):
    image.load_raw_cifar10(folder, "train")
  with pytest.raises(UserError):
    image.load_raw_cifar10(str(tmp_path / "nowhere"), "test")
  with pytest.raises(ValueError, match="split"):
    image.load_raw_cifar10(folder, "validation")


# ---------------------------------------------------------------- TFDS, mocked


def _mocked():
  # USE_CODE builds the dataset info from the builder class: no metadata files, no TensorFlow.
  return tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE)


def test_load_tfds_imdb_mocked():
  with _mocked():
    texts, labels = text.load_tfds_imdb("train", None)
    source = tfds.data_source("imdb_reviews", split="train", download=False)
    raw = [source[i]["text"] for i in range(len(source))]
  assert len(texts) == 6 and all(isinstance(t, bytes) for t in texts)
  # The mock yields str; the loader must give back its UTF-8 bytes in index order.
  assert texts == [t.encode("utf-8") if isinstance(t, str) else t for t in raw]
  assert labels.dtype == np.int32 and labels.shape == (6,)
  assert set(labels.tolist()) <= {0, 1}


def test_load_tfds_cifar10_mocked():
  with _mocked():
    pixels, labels = image.load_tfds_cifar10("train[:90%]", None)
    source = tfds.data_source("cifar10", split="train[:90%]", download=False)
    images = [np.asarray(source[i]["image"]) for i in range(len(source))]
  assert pixels.dtype == np.uint8 and pixels.shape == (6, 1024)
  assert labels.dtype == np.int32 and labels.shape == (6,)
  assert labels.min() >= 0 and labels.max() <= 9
  assert np.array_equal(pixels, np.stack([image.rgb_to_gray(i).reshape(-1) for i in images]))


# ---------------------------------------------------------------- TFDS, real array_record files


def _write_array_record_dataset(data_dir: str, name: str, splits: dict[str, list[bytes]]) -> None:
  """Prepares `name` in data_dir as TFDS would, from already serialized tf.Examples."""
  from array_record.python import array_record_module
  from tensorflow_datasets.core import naming

  builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
  os.makedirs(builder.data_path, exist_ok=True)
  infos = []
  for split, records in splits.items():
    template = naming.ShardedFileTemplate(data_dir=builder.data_path, dataset_name=name,
                                          split=split, filetype_suffix="array_record")
    path = os.fspath(template.sharded_filepaths(1)[0])
    writer = array_record_module.ArrayRecordWriter(path, "group_size:1")
    for record in records:
      writer.write(record)
    writer.close()
    infos.append(tfds.core.SplitInfo(name=split, shard_lengths=[len(records)],
                                     num_bytes=os.path.getsize(path), filename_template=template))
  builder.info.set_splits(tfds.core.SplitDict(infos))
  builder.info.write_to_directory(builder.data_path)


def _tf_example(features: dict[str, bytes | int]) -> bytes:
  from tensorflow_datasets.proto import tf_example_pb2
  example = tf_example_pb2.Example()
  for key, value in features.items():
    if isinstance(value, bytes):
      example.features.feature[key].bytes_list.value.append(value)
    else:
      example.features.feature[key].int64_list.value.append(value)
  return example.SerializeToString()


def _png(img: np.ndarray) -> bytes:
  from PIL import Image
  buffer = io.BytesIO()
  Image.fromarray(img).save(buffer, format="PNG")
  return buffer.getvalue()


def test_load_tfds_imdb_prepared(tmp_path):
  reviews = {"train": [(b"A fine film.", 1), ("Caf\u00e9 noir".encode("utf-8"), 0),
                       (b"Meh<br />", 0)],
             "test": [(b"Yes", 1)]}
  _write_array_record_dataset(str(tmp_path), "imdb_reviews", {
      split: [_tf_example({"text": t, "label": l}) for t, l in rows]
      for split, rows in reviews.items()})
  texts, labels = text.load_tfds_imdb("train", str(tmp_path))
  assert texts == [t for t, _ in reviews["train"]]
  assert labels.dtype == np.int32 and labels.tolist() == [1, 0, 0]
  texts, labels = text.load_tfds_imdb("test", str(tmp_path))
  assert texts == [b"Yes"] and labels.tolist() == [1]


def test_load_tfds_cifar10_prepared(tmp_path):
  rng = np.random.default_rng(3)
  images = rng.integers(0, 256, size=(10, 32, 32, 3), dtype=np.uint8)
  labels = [7, 0, 9, 3, 3, 1, 2, 5, 8, 4]
  _write_array_record_dataset(str(tmp_path), "cifar10", {
      "train": [_tf_example({"id": f"train_{i}".encode(), "image": _png(img), "label": label})
                for i, (img, label) in enumerate(zip(images, labels))],
      "test": [_tf_example({"id": b"test_0", "image": _png(images[0]), "label": 6})]})
  want = image.rgb_to_gray(images).reshape(10, 1024)
  for split, rows in [("train[:90%]", slice(0, 9)), ("train[90%:]", slice(9, 10)),
                      ("train", slice(0, 10))]:
    pixels, got_labels = image.load_tfds_cifar10(split, str(tmp_path))
    assert pixels.dtype == np.uint8 and got_labels.dtype == np.int32
    assert np.array_equal(pixels, want[rows])
    assert got_labels.tolist() == labels[rows]
  pixels, got_labels = image.load_tfds_cifar10("test", str(tmp_path))
  assert np.array_equal(pixels, want[:1]) and got_labels.tolist() == [6]


def test_tfds_not_prepared_is_a_user_error(tmp_path):
  with pytest.raises(UserError, match="download_and_prepare") as info:
    text.load_tfds_imdb("train", str(tmp_path))
  assert str(tmp_path) in str(info.value) and "load_raw_imdb" in str(info.value)
  with pytest.raises(UserError, match="file_format='array_record'") as info:
    image.load_tfds_cifar10("train", str(tmp_path))
  assert str(tmp_path) in str(info.value) and "load_raw_cifar10" in str(info.value)


def test_tfds_missing_package_is_a_user_error(tmp_path, monkeypatch):
  """tensorflow-datasets is an extra: without it, reading a TFDS folder says how to install it
  (the raw sources and every other task work without it)."""
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
  with pytest.raises(UserError, match=r"pip install -e '\.\[tfds\]'") as info:
    image.load_tfds_cifar10("train", str(tmp_path))
  assert "load_raw_cifar10" in str(info.value)
