"""Generated data edited or deleted after it was made is refused (lra.data.record): the
record holds each file's size and SHA-256; an appended row, a deleted split, a same-size edit,
an edit whose modification time was set back and an edited prepared array are each one line
naming the file and the command that makes it again; a copy is not an edit, and each file is
hashed once and then vouched for (on a read-only folder: on each load)."""
import errno
import hashlib
import os
import shutil

import numpy as np
import pytest

from lra.configs import retrieval as retrieval_config
from lra.data import command, listops, record, retrieval, store, tasks
from lra.errors import UserError
from tests.tiny import tiny_config

SMALL = dict(num_train=40, num_val=8, num_test=8, min_length=5, max_length=30, max_depth=3,
             max_args=4, seed=0)
SMALL_FLAGS = [f"--{k}={v}" for k, v in SMALL.items()] + ["--workers=1"]


def _generated(data_dir) -> None:
  command.main(["listops", f"--data_dir={data_dir}", *SMALL_FLAGS])


def _listops(data_dir, **changes):
  config = tiny_config(str(data_dir))
  config.data.update({**SMALL, "workers": 1, "max_len": 32, **changes})
  return config


def _refused(fn, *args) -> str:
  with pytest.raises(UserError) as error:
    fn(*args)
  assert "\n" not in str(error.value)
  return str(error.value)



def test_the_record_holds_each_files_size_and_sha256(tmp_path):
  _generated(tmp_path)
  files = record.read(tmp_path)["files"]
  assert sorted(files) == sorted(listops.FILES.values())
  for name, entry in files.items():
    data = (tmp_path / name).read_bytes()
    assert entry["bytes"] == len(data)
    assert entry["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_row_appended_to_a_generated_file_is_refused_not_read_nor_generated_over(tmp_path,
                                                                                 capsys):
  _generated(tmp_path)
  train = tmp_path / "basic_train.tsv"
  with open(train, "a") as f:
    f.write("( [MAX 1 2 ] )\t2\n")
  edited = train.read_bytes()
  message = _refused(tasks.load, _listops(tmp_path))
  assert message.startswith(f"{train} was changed after this code made it ("), message
  assert f"delete {tmp_path} and make it again with: python -m lra.data listops" in message
  assert "point data_dir at another folder" in message
  capsys.readouterr()
  with pytest.raises(SystemExit) as stop:  # the data command does not write over it either
    command.main(["listops", f"--data_dir={tmp_path}", *SMALL_FLAGS, "--num_train=30"])
  err = capsys.readouterr().err.splitlines()
  assert stop.value.code == 1 and len(err) == 1 and str(train) in err[0], err
  assert train.read_bytes() == edited


def test_a_deleted_split_is_refused_not_generated_again(tmp_path):
  _generated(tmp_path)
  (tmp_path / "basic_val.tsv").unlink()
  train = (tmp_path / "basic_train.tsv").read_bytes()
  config = _listops(tmp_path)
  config.data.generate_if_missing = True
  message = _refused(tasks.load, config)
  assert message.startswith(f"{tmp_path / 'basic_val.tsv'} was deleted after this code made "
                            f"it"), message
  assert not (tmp_path / "basic_val.tsv").exists()
  assert (tmp_path / "basic_train.tsv").read_bytes() == train


def test_a_same_size_edit_is_found_by_its_hash_and_a_copy_is_not_an_edit(tmp_path):
  _generated(tmp_path / "made")
  copy = tmp_path / "copy"
  shutil.copytree(tmp_path / "made", copy, copy_function=shutil.copy)  # new modification times
  assert len(tasks.load(_listops(copy)).splits["train"]["labels"]) == 40  # same content: used
  test = copy / "basic_test.tsv"
  lines = test.read_text().splitlines(keepends=True)
  label = lines[1].rstrip("\n")[-1]
  lines[1] = lines[1].rstrip("\n")[:-1] + str((int(label) + 1) % 10) + "\n"  # same size
  test.write_text("".join(lines))
  message = _refused(tasks.load, _listops(copy))
  assert message.startswith(f"{test} was changed after this code made it (its SHA-256"), message


def _edit_a_label_keeping_size_and_times(path) -> None:
  """Every label moved on by one, the size kept and the times set back."""
  before = os.stat(path)
  lines = path.read_text().splitlines(keepends=True)
  path.write_text("".join(l[:-2] + str((int(l[-2]) + 1) % 10) + "\n" if l[-2].isdigit() else l
                         for l in lines))
  os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert os.path.getsize(path) == before.st_size


def test_an_edit_with_its_modification_time_set_back_is_refused(tmp_path):
  _generated(tmp_path)
  assert len(tasks.load(_listops(tmp_path)).splits["train"]["labels"]) == 40  # vouched for
  train = tmp_path / "basic_train.tsv"
  _edit_a_label_keeping_size_and_times(train)
  message = _refused(tasks.load, _listops(tmp_path))
  assert message.startswith(f"{train} was changed after this code made it (its SHA-256"), message


def test_files_are_hashed_once_after_a_copy_and_then_vouched_for(tmp_path, monkeypatch):
  _generated(tmp_path / "made")
  copy = tmp_path / "copy"
  shutil.copytree(tmp_path / "made", copy)  # new inodes and status-change times
  hashed = []
  sha256 = record._sha256
  monkeypatch.setattr(record, "_sha256", lambda path: hashed.append(path) or sha256(path))
  tasks.load(_listops(copy))
  assert sorted(os.path.basename(p) for p in hashed) == sorted(listops.FILES.values())
  hashed.clear()
  tasks.load(_listops(copy))
  assert hashed == []  # the stamps in CHECKED vouch for every file
  _generated(tmp_path / "fresh")  # a folder just made is vouched for from the start
  hashed.clear()
  tasks.load(_listops(tmp_path / "fresh"))
  assert hashed == []


def test_a_read_only_folder_is_hashed_on_each_load_and_an_edit_still_refused(tmp_path,
                                                                           monkeypatch):
  _generated(tmp_path)
  (tmp_path / record.CHECKED).unlink()
  atomic_write = record.paths.atomic_write

  def read_only(path, *args, **kwargs):  # as on a read-only file system (tests run as root)
    if os.path.basename(path) == record.CHECKED:
      raise OSError(errno.EROFS, "Read-only file system", str(path))
    return atomic_write(path, *args, **kwargs)

  monkeypatch.setattr(record.paths, "atomic_write", read_only)
  assert len(tasks.load(_listops(tmp_path)).splits["train"]["labels"]) == 40
  train = tmp_path / "basic_train.tsv"
  _edit_a_label_keeping_size_and_times(train)
  message = _refused(tasks.load, _listops(tmp_path))
  assert message.startswith(f"{train} was changed after this code made it (its SHA-256"), message
  assert not (tmp_path / record.CHECKED).exists()


def test_an_edited_prepared_array_is_refused(tmp_path):
  release = tmp_path / "tsv_data"
  release.mkdir()
  for name in retrieval.SPLIT_FILES.values():
    (release / name).write_text("".join(f"{i % 2}.0\ta\tb\tpaper {i}\tcited\n" for i in range(4)))
  command.main(["retrieval", f"--release_dir={release}", f"--data_dir={tmp_path / 'out'}",
                "--max_len=16"])
  config = retrieval_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.max_len = str(tmp_path / "out"), 16
  assert len(tasks.load(config).splits["test"]["labels"]) == 4
  inputs = store.path(str(tmp_path / "out"), "val", "inputs")
  array = np.load(inputs)
  array[0, 0] += 1
  np.save(inputs, array)  # same shape, same size, other content
  message = _refused(tasks.load, config)
  assert message.startswith(f"{inputs} was changed after this code made it"), message
  assert "python -m lra.data retrieval" in message

