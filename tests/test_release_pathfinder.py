"""The original release as users unpack it (lra_release/lra_release/...): a release folder given
as a Pathfinder data_dir, --release_dir at any of its folders for Pathfinder and Retrieval,
empty images, np.save metadata, and file lists in errors kept short."""
import os

import numpy as np
import pytest
from PIL import Image

from lra.data import command, pathfinder, record, release_dirs, store, tasks
from lra.errors import UserError
from tests.test_concurrent_prepare import _write_aan

HARD = "curv_contour_length_14"


def _write_level(level_dir, num=20, metadata="text", empty=()):
  """A release level folder: imgs/0/sample_<i>.png (pixels = i, label i % 2) and metadata/0.npy
  as the release has it (text), or as the original generator saved it (np.save of its rows:
  Python 3's unicode strings, or Python 2's byte strings). Images in `empty` are 0 bytes."""
  (level_dir / "imgs" / "0").mkdir(parents=True)
  (level_dir / "metadata").mkdir()
  rows = []
  for i in range(num):
    png = level_dir / "imgs" / "0" / f"sample_{i}.png"
    if i in empty:
      png.write_bytes(b"")
    else:
      Image.fromarray(np.full((32, 32), i, np.uint8), mode="L").save(png)
    rows.append(["imgs/0", f"sample_{i}.png", i, i % 2, 1.0, 14, 4, 2, 0.5, 1, 1])
  meta = level_dir / "metadata" / "0.npy"
  if metadata == "text":
    meta.write_text("".join(" ".join(map(str, row)) + "\n" for row in rows))
  else:
    with open(meta, "wb") as f:  # np.array of mixed rows: all strings, as the generator's
      np.save(f, np.array(rows, dtype="S" if metadata == "npy_bytes" else None))
  return level_dir


def _release(tmp_path, **level):
  """The tarball's nesting: lra_release/lra_release/{pathfinder32/<hard>, tsv_data}."""
  inner = tmp_path / "lra_release" / "lra_release"
  _write_level(inner / "pathfinder32" / HARD, **level)
  _write_aan(str(inner / "tsv_data"))
  return inner


def _config(data_dir, **changes):
  from lra.configs import pathfinder as pathfinder_config
  config = pathfinder_config.get_config("transformer")
  config.data.data_dir, config.data.num_images, config.data.workers = str(data_dir), 10, 1
  for key, value in changes.items():
    config.data[key] = value
  return config


def _one_line_error(fn, *args) -> str:
  with pytest.raises(UserError) as error:
    fn(*args)
  message = str(error.value)
  assert "\n" not in message and len(message) < 700, message
  return message


# -------------------------------------------------- a release folder given as data_dir


@pytest.mark.parametrize("where", ["pathfinder32", HARD, "inner", "outer"])
def test_a_release_folder_as_data_dir_gives_the_release_command(tmp_path, monkeypatch, capsys,
                                                                 where):
  inner = _release(tmp_path)
  data_dir = {"pathfinder32": inner / "pathfinder32", HARD: inner / "pathfinder32" / HARD,
              "inner": inner, "outer": inner.parent}[where]
  before = sorted(p for p in tmp_path.rglob("*"))
  for generate in (True, False):
    message = _one_line_error(tasks.load, _config(data_dir, generate_if_missing=generate))
    assert "generating" not in capsys.readouterr().out  # nothing is generated there
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nor written
    assert f"--release_dir={data_dir} --size=32 --level=hard" in message, message
  # The command it gives reads the release, and the data_dir it names then trains.
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path / "home"))
  given = message.split("python -m lra.data ")[1].split("  then")[0].split()
  command.main(given)
  out = message.rsplit("--config.data.data_dir=", 1)[1]
  task = tasks.load(_config(out))
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [16, 2, 2]


def test_a_folder_of_our_own_generated_images_is_not_taken_for_the_release(tmp_path):
  """imgs/ and metadata/ that our generator wrote (its record says so) are made again."""
  from lra.data import pathfinder_gen
  pathfinder_gen.generate_release(tmp_path, size=32, level="hard", num_images=10, workers=1,
                                  progress=False)
  task = tasks.load(_config(tmp_path))
  assert len(task.splits["train"]["labels"]) == 8


# ------------------------------------------------- --release_dir at any folder of the release


def test_release_dir_may_be_any_folder_of_the_release_for_both_tasks(tmp_path, capsys):
  inner = _release(tmp_path)
  level, tsv = inner / "pathfinder32" / HARD, inner / "tsv_data"
  for given in (inner.parent, inner, tsv, inner / "pathfinder32", level):
    assert pathfinder.find_level_dir(str(given), 32, "hard") == str(level)
    assert release_dirs.aan_dir(str(given), ["new_aan_pairs.train.tsv"]) == str(tsv)
  for task, out in (("pathfinder", tmp_path / "pf"), ("retrieval", tmp_path / "aan")):
    command.main([task, f"--release_dir={inner.parent}", f"--data_dir={out}"])
  assert len(np.load(store.path(str(tmp_path / "aan"), "test", "labels"))) == 8
  prepared = pathfinder.prepared_dir(str(tmp_path / "pf"), "hard")
  assert len(np.load(store.path(prepared, "train", "labels"))) == 16
  # Nothing fits, the other size, the other level: one line each, saying what to pass.
  capsys.readouterr()
  for task, given, said in (
      ("pathfinder", tmp_path / "pf", "pass the release's lra_release folder"),
      ("retrieval", tmp_path / "pf", "pass the release's tsv_data folder"),
      ("pathx", inner / "pathfinder32", "pass --size=32"),
      ("pathfinder", _write_level(inner / "pathfinder32" / "curv_baseline"),
       "pass --level=easy")):
    with pytest.raises(SystemExit):
      command.main([task, f"--release_dir={given}", f"--data_dir={tmp_path / 'x'}"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and said in err[0], err
  assert not (tmp_path / "x").exists()


# ------------------------------------------------------------ empty images, np.save metadata


def test_empty_images_are_skipped_counted_printed_and_recorded(tmp_path, capsys):
  level = _write_level(tmp_path / HARD, num=22, empty=(3, 17))
  counts = pathfinder.prepare(str(level), str(tmp_path / "out"), 32, progress=False)
  assert counts == {"train": 16, "val": 2, "test": 2}
  assert "skipped 2 empty (0-byte) images" in capsys.readouterr().out
  assert record.read(tmp_path / "out")["source"]["empty_images_skipped"] == 2
  pixels = store.load_split(str(tmp_path / "out"), "train", ["inputs"], 1024)["inputs"]
  np.testing.assert_array_equal(pixels[np.arange(16)][:, 0],  # 3 and 17 left out, in order
                                [i for i in range(22) if i not in (3, 17)][:16])
  (level / "imgs" / "0" / "sample_5.png").unlink()  # missing is not empty: one line
  assert "sample_5.png is listed" in _one_line_error(pathfinder.read_metadata, str(level))


@pytest.mark.parametrize("metadata", ["npy_unicode", "npy_bytes"])
def test_metadata_saved_with_np_save_is_read(tmp_path, metadata):
  level = _write_level(tmp_path / HARD, metadata=metadata)
  assert (level / "metadata" / "0.npy").read_bytes().startswith(b"\x93NUMPY")
  items = pathfinder.read_metadata(str(level))
  assert [label for _, label in items] == [i % 2 for i in range(20)]
  assert items[7][0] == str(level / "imgs" / "0" / "sample_7.png")
  pathfinder.prepare(str(level), str(tmp_path / "out"), 32, progress=False)
  labels = np.load(store.path(str(tmp_path / "out"), "train", "labels"))
  np.testing.assert_array_equal(labels, np.arange(16) % 2)


# ---------------------------------------------------------- errors list a few files, not all


def test_an_error_about_files_lists_the_first_few_and_the_count(tmp_path):
  folder = tmp_path / "mine"
  folder.mkdir()
  files = [f"imgs/0/sample_{i}.png" for i in range(2000)]
  for name in ["notes.txt", *files[:5]]:
    os.makedirs(os.path.dirname(folder / name), exist_ok=True)
    (folder / name).write_text("x")
  with pytest.raises(UserError) as error:
    with record.writing(folder, {"task": "t", "settings": {}, "source": {}}, files):
      pass
  message = str(error.value)
  assert len(message) < 500 and "and 1,992 more (1,995 in all)" in message, message


# ------------------------------------------------------------------------- sizes up front


@pytest.mark.parametrize("task, size", [("path256", 32), ("pathx", 64), ("pathx", 256)])
def test_a_size_its_config_refuses_is_refused_up_front(tmp_path, capsys, task, size):
  with pytest.raises(SystemExit):
    command.main([task, f"--size={size}", f"--data_dir={tmp_path / 'out'}", "--num_images=10"])
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and f"not --size={size}" in err[0], err
  assert not (tmp_path / "out").exists()
