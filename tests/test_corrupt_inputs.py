"""Corrupt inputs are refused, not half-read: damaged archives, damaged prepared .npy files,
bytes that are not UTF-8, and out-of-range numbers given to the data command. Each ends with
one UserError line naming the file (and line or member) and what to do; nothing is published.
"""
import io
import os
import tarfile

import numpy as np
import pytest

from lra.data import command, image, listops, retrieval, store, tasks, text
from lra.errors import UserError
from tests import commands
REVIEWS = 20  # per split in the tiny IMDb archive


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
  info = tarfile.TarInfo(name)
  info.size = len(data)
  tar.addfile(info, io.BytesIO(data))


def _imdb(path, mode: str = "w:gz", bad_member: int | None = None) -> str:
  """A tiny aclImdb archive, test split first: REVIEWS reviews a split."""
  rng = np.random.default_rng(0)
  with tarfile.open(path, mode) as tar:
    for split in ("test", "train"):
      for i in range(REVIEWS):
        review = bytes(rng.integers(32, 127, 3000, dtype=np.uint8))
        if split == "train" and i == bad_member:
          review = review[:100] + b"\xff\xfe" + review[100:]  # not UTF-8
        _add(tar, f"aclImdb/{split}/{('neg', 'pos')[i % 2]}/{i}_1.txt", review)
  return str(path)


@pytest.fixture
def tiny_release_counts(monkeypatch):
  """What the tiny fixtures hold, in place of the real downloads' counts."""
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": REVIEWS, "test": REVIEWS})
  monkeypatch.setattr(image, "RELEASE_IMAGES", {"train": 10, "test": 2})


def _published(folder) -> list[str]:
  return sorted(f for f in os.listdir(folder) if f.endswith(".npy")) if os.path.isdir(folder) \
      else []


# ------------------------------------------------------------------------ damaged archives


def test_imdb_gz_with_random_bytes_at_80_percent_is_refused(tmp_path, tiny_release_counts,
                                                            capsys):
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz")
  data = bytearray(open(path, "rb").read())
  at = int(len(data) * 0.8)
  data[at:at + 64] = np.random.default_rng(1).integers(0, 256, 64, dtype=np.uint8).tobytes()
  open(path, "wb").write(bytes(data))
  with pytest.raises(UserError, match="aclImdb_v1.tar.gz is corrupt or truncated"):
    text.load_raw_imdb(path, "train")
  # Through the data command: one line, exit 1, no split published.
  out = tmp_path / "text"
  with pytest.raises(SystemExit) as exit_info:
    command.main(["text", f"--imdb_tar={path}", f"--data_dir={out}"])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.strip()
  assert "corrupt or truncated" in err and len(err.splitlines()) == 1
  assert _published(out) == []


def test_truncated_uncompressed_tar_is_refused(tmp_path, tiny_release_counts):
  path = _imdb(tmp_path / "aclImdb_v1.tar", mode="w")
  with tarfile.open(path) as tar:
    offsets = [member.offset for member in tar.getmembers()]
  data = open(path, "rb").read()
  open(path, "wb").write(data[:offsets[13]])  # cut between two members: 13 test reviews left
  with pytest.raises(UserError, match=r"corrupt or truncated: it holds 13 of the 20 aclImdb/test"):
    text.load_raw_imdb(path, "test")
  with pytest.raises(UserError, match="has no aclImdb/train.*truncated"):
    text.load_raw_imdb(path, "train")


def test_tar_whose_header_is_damaged_is_refused(tmp_path, tiny_release_counts):
  """tarfile ends the member list at a bad header without a word: the data after it counts."""
  path = _imdb(tmp_path / "aclImdb_v1.tar", mode="w")
  with tarfile.open(path) as tar:
    offset = tar.getmembers()[30].offset  # a train review's header
  data = bytearray(open(path, "rb").read())
  data[offset:offset + 64] = b"\x07" * 64
  open(path, "wb").write(bytes(data))
  with pytest.raises(UserError, match="corrupt or truncated: the tar stream ends after 30"):
    text.load_raw_imdb(path, "test")  # even the split read in full before the damage


def test_truncated_gzip_and_not_an_archive(tmp_path, tiny_release_counts):
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz")
  data = open(path, "rb").read()
  open(path, "wb").write(data[:-300])
  with pytest.raises(UserError, match="corrupt or truncated: reading failed"):
    text.load_raw_imdb(path, "test")
  other = tmp_path / "notes.tar.gz"
  other.write_bytes(b"just some text, not an archive")
  with pytest.raises(UserError, match="notes.tar.gz is not a tar or tar.gz archive"):
    text.load_raw_imdb(str(other), "test")


def test_imdb_counts_are_the_release_s(tmp_path, monkeypatch):
  """Unless a test says otherwise, an archive must hold the 25,000 reviews a split."""
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz")
  with pytest.raises(UserError, match="holds 20 of the 25000 aclImdb/train reviews"):
    text.load_raw_imdb(path, "train")
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": REVIEWS - 1, "test": REVIEWS})
  with pytest.raises(UserError, match="holds 20 aclImdb/train reviews, not the 19"):
    text.load_raw_imdb(path, "train")


def test_text_command_publishes_nothing_when_one_split_is_short(tmp_path, monkeypatch):
  """Both splits are read before either is written: a short test split leaves train unwritten."""
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": REVIEWS, "test": REVIEWS + 1})
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz")
  with pytest.raises(SystemExit):
    command.main(["text", f"--imdb_tar={path}", f"--data_dir={tmp_path / 'text'}"])
  assert _published(tmp_path / "text") == []


def _cifar_folder(folder, per_file: int = 2, test: int = 2) -> str:
  os.makedirs(folder)
  rng = np.random.default_rng(0)
  for name, num in [(f"data_batch_{i}.bin", per_file) for i in range(1, 6)] + [
      ("test_batch.bin", test)]:
    records = [bytes([k % 10]) + rng.integers(0, 256, 3072, dtype=np.uint8).tobytes()
               for k in range(num)]
    (folder / name).write_bytes(b"".join(records))
  return str(folder)


def test_cifar_archive_with_random_bytes_and_short_batches(tmp_path, tiny_release_counts):
  folder = _cifar_folder(tmp_path / "cifar-10-batches-bin")
  tar_path = tmp_path / "cifar-10-binary.tar.gz"
  with tarfile.open(tar_path, "w:gz") as tar:
    tar.add(folder, arcname="cifar-10-batches-bin")
  assert image.load_raw_cifar10(str(tar_path), "train")[0].shape == (10, 1024)
  data = bytearray(tar_path.read_bytes())
  at = int(len(data) * 0.8)
  data[at:at + 64] = np.random.default_rng(2).integers(0, 256, 64, dtype=np.uint8).tobytes()
  tar_path.write_bytes(bytes(data))
  with pytest.raises(UserError, match="cifar-10-binary.tar.gz is corrupt or truncated"):
    image.load_raw_cifar10(str(tar_path), "test")
  # A batch file cut at a record boundary: fewer images than CIFAR-10 has.
  short = _cifar_folder(tmp_path / "short", per_file=2, test=1)
  with pytest.raises(UserError, match="corrupt or truncated: its test files hold 1 of the 2"):
    image.load_raw_cifar10(short, "test")


# ------------------------------------------------------------------- text that is not UTF-8


def test_imdb_review_that_is_not_utf8_names_the_member(tmp_path, tiny_release_counts):
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz", bad_member=3)
  with pytest.raises(UserError, match=r"member aclImdb/train/pos/3_1.txt: not UTF-8 text "
                                      r"\(byte 0xff at column 101\)"):
    text.load_raw_imdb(path, "train")


def test_listops_tsv_that_is_not_utf8_names_the_line(tmp_path, listops_dir):
  for split in tasks.SPLITS:
    name = f"basic_{split}.tsv"
    (tmp_path / name).write_bytes(open(os.path.join(listops_dir, name), "rb").read())
  path = tmp_path / "basic_val.tsv"
  lines = path.read_bytes().split(b"\n")
  lines[2] = lines[2].replace(b"[MAX", b"[M\xe9X", 1).replace(b"[MIN", b"[M\xe9N", 1)
  path.write_bytes(b"\n".join(lines))
  with pytest.raises(UserError, match=r"basic_val.tsv, line 3: not UTF-8"):
    listops.read_split(path, 40)
  from tests.tiny import tiny_config
  with pytest.raises(UserError, match=r"basic_val.tsv, line 3: not UTF-8.*python -m lra.data"):
    tasks.load(tiny_config(str(tmp_path)))


def _aan_line(label: int, first: bytes, second: bytes) -> bytes:
  return b"\t".join([str(float(label)).encode(), b"a", b"b", first, second]) + b"\n"


def test_aan_tsv_that_is_not_utf8_names_the_line_and_changes_nothing(tmp_path):
  release = tmp_path / "tsv_data"
  release.mkdir()
  for split, name in retrieval.SPLIT_FILES.items():
    (release / name).write_bytes(b"".join(_aan_line(i % 2, b"some text %d" % i, b"other")
                                          for i in range(4)))
  out = tmp_path / "retrieval"
  retrieval.prepare(str(release), str(out), max_len=16, progress=False)
  before = {f: (out / f).read_bytes() for f in _published(out)}
  assert len(before) == 9
  val = release / retrieval.SPLIT_FILES["val"]
  val.write_bytes(val.read_bytes() + _aan_line(1, b"caf\xe9", b"x"))  # latin-1, line 5
  with pytest.raises(UserError, match=r"new_aan_pairs.eval.tsv, line 5: not UTF-8"):
    retrieval.prepare(str(release), str(out), max_len=32, progress=False)
  # The earlier data is untouched: no split of the failed run was published.
  assert {f: (out / f).read_bytes() for f in _published(out)} == before
  assert not [f for f in os.listdir(out) if f.startswith(".tmp-")]  # no unfinished files left


def test_pathfinder_metadata_that_is_not_utf8_names_the_line(tmp_path):
  from lra.data import pathfinder
  meta = tmp_path / "curv_baseline" / "metadata"
  meta.mkdir(parents=True)
  (meta / "0.npy").write_bytes(b"imgs/0 sample_0.png 0 1 4\nimgs/0 sample_1.png 0 0 \xff\n")
  with pytest.raises(UserError, match=r"0.npy, line 2: not UTF-8"):
    pathfinder.read_metadata(str(tmp_path / "curv_baseline"))


# ------------------------------------------------------------- damaged prepared .npy files


def _prepared_image(tmp_path, monkeypatch) -> str:
  """Tiny Image data made by the data command (9 / 1 / 2 images), as a user would make it."""
  monkeypatch.setattr(image, "RELEASE_IMAGES", {"train": 10, "test": 2})
  folder = _cifar_folder(tmp_path / "cifar")
  command.main(["image", f"--cifar={folder}", f"--data_dir={tmp_path / 'image'}"])
  return str(tmp_path / "image")


def _truncate(file: str) -> None:
  with open(file, "r+b") as f:
    f.truncate(os.path.getsize(file) - 4)  # the last row, cut short


DAMAGES = {
    "zero bytes": ("train", "labels", lambda f: open(f, "wb").close(), "not a readable .npy"),
    "truncated inputs": ("val", "inputs", _truncate, "bytes, its header's shape"),
    "truncated labels": ("test", "labels", _truncate, "bytes, its header's shape"),
    "pickled": ("train", "inputs", lambda f: np.save(f, np.array([{"a": 1}] * 9, object),
                                                     allow_pickle=True), "pickled Python"),
    "wrong ndim": ("val", "inputs", lambda f: np.save(f, np.zeros((1, 32, 32), np.uint8)),
                   r"shape \(1, 32, 32\), expected 2-D"),
    "wrong dtype": ("test", "inputs", lambda f: np.save(f, np.zeros((2, 1024), np.float32)),
                    "float32 array"),
    "wrong rows": ("train", "inputs", lambda f: np.save(f, np.zeros((3, 1024), np.uint8)),
                   "has 3 rows but .*train.labels.npy has 9"),
    "not npy": ("val", "labels", lambda f: open(f, "wb").write(b"hello, world, 12345"),
                "magic string"),
    "missing field": ("test", "inputs", os.remove, "is missing"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_prepared_file_is_one_line_with_the_command(tmp_path, monkeypatch, damage):
  from lra.configs import image as image_config
  split, field, spoil, what = DAMAGES[damage]
  data_dir = _prepared_image(tmp_path, monkeypatch)
  config = image_config.get_config("transformer,cpu")
  config.data.data_dir = data_dir
  assert tasks.load(config).splits["train"]["inputs"].shape == (9, 1024)
  file = store.path(data_dir, split, field)
  spoil(file)
  with pytest.raises(UserError, match=what) as info:
    tasks.load(config)
  message = str(info.value)
  assert file in message and f"python -m lra.data image --data_dir={data_dir}" in message
  assert "allow_pickle" not in message and "\n" not in message


def test_prepared_fields_stay_memory_mapped(tmp_path):
  store.write_split(str(tmp_path), "train", {"inputs": np.ones((4, 8), np.uint16),
                                             "labels": np.arange(4, dtype=np.int32)})
  split = store.load_split(str(tmp_path), "train", ["inputs"], 8, remake="remake")
  assert isinstance(split["inputs"].base, np.memmap)
  np.testing.assert_array_equal(split["labels"], np.arange(4))


def test_text_labels_of_zero_bytes_is_one_line(tmp_path, tiny_release_counts):
  from lra.configs import text as text_config
  path = _imdb(tmp_path / "aclImdb_v1.tar.gz")
  command.main(["text", f"--imdb_tar={path}", f"--data_dir={tmp_path / 'text'}"])
  open(store.path(str(tmp_path / "text"), "train", "labels"), "wb").close()
  config = text_config.get_config("transformer,cpu")
  config.data.data_dir = str(tmp_path / "text")
  with pytest.raises(UserError, match=r"train.labels.npy is damaged.*python -m lra.data text"):
    tasks.load(config)


# --------------------------------------------------------- numbers given to the data command


@pytest.mark.commands
def test_listops_negative_num_train_exits_1_with_one_line_and_writes_nothing(tmp_path):
  out = tmp_path / "listops"
  result = commands.run("-m", "lra.data", "listops", f"--data_dir={out}", "--num_train=-5",
                        "--num_val=10", "--num_test=10", "--min_length=5", "--max_length=40",
                        "--max_depth=3", "--max_args=4", "--workers=1", timeout=120, expect=1)
  assert result.stderr.strip().splitlines() == [
      "error: --num_train=-5 is out of range: python -m lra.data listops needs --num_train >= 1"]
  assert not out.exists()


def test_generator_refuses_a_negative_split_size(tmp_path):
  """train.py's generation on first use goes through the same entry."""
  with pytest.raises(UserError, match="num_train=-5"):
    listops.generate_split_files(tmp_path, num_train=-5, num_val=10, num_test=10, min_length=5,
                                 max_length=40, max_depth=3, max_args=4, workers=1,
                                 progress=False)
  assert os.listdir(tmp_path) == []


SMALL = ["--num_train=8", "--num_val=2", "--num_test=2", "--min_length=5", "--max_depth=3",
         "--max_args=4", "--workers=1"]  # so that main, which runs these, is quick too
BAD_NUMBERS = [
    (["listops", *SMALL, "--max_length=40", "--num_val=0"], "--num_val=0"),
    (["listops", *SMALL, "--min_length=30", "--max_length=20"],
     "--min_length=30 and --max_length=20"),
    (["listops", *SMALL, "--max_length=40", "--max_depth=0"], "--max_depth=0"),
    (["listops", *SMALL, "--max_length=40", "--workers=-1"], "--workers=-1"),
    (["text", "--max_len=0", "--imdb_tar=x.tar.gz"], "--max_len=0"),
    (["retrieval", "--max_len=-3", "--release_dir=x"], "--max_len=-3"),
    (["pathfinder", "--num_images=5", "--workers=1"], "--num_images=5"),
    (["pathfinder", "--num_images=20", "--seed=-1", "--workers=1"], "--seed=-1"),
]


@pytest.mark.parametrize("argv,flag", BAD_NUMBERS)
def test_out_of_range_numbers_are_refused_before_anything_is_written(tmp_path, capsys, argv,
                                                                     flag):
  out = tmp_path / "data"
  with pytest.raises(SystemExit) as info:
    command.main([*argv, f"--data_dir={out}"])  # a later flag overrides an earlier one
  assert info.value.code == 1
  err = capsys.readouterr().err.strip()
  assert err.startswith(f"error: {flag}") and len(err.splitlines()) == 1
  assert not out.exists()
