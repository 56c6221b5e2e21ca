"""The data record (lra.data.record): a user's data files are never overwritten, and data made
with other settings is never used silently."""
import io
import json
import os
import shutil
import tarfile

import jax
import numpy as np
import pytest
from PIL import Image

from lra.data import command, listops, pathfinder, pathfinder_gen, retrieval, store, tasks, text
from lra.errors import UserError
from lra.training import trainer
from tests.tiny import tiny_config

LISTOPS = dict(num_train=40, num_val=8, num_test=8, min_length=5, max_length=30, max_depth=3,
               max_args=4, seed=0)


def _listops_config(data_dir, **changes):
  """The tiny ListOps run on data_dir, generated there on first use with LISTOPS (+ changes)."""
  config = tiny_config(str(data_dir))
  config.data.update({**LISTOPS, "workers": 1, "max_len": 32, **changes})
  config.data.generate_if_missing = True
  return config


def _one_line_error(fn, *args, **kwargs):
  with pytest.raises(UserError) as error:
    fn(*args, **kwargs)
  message = str(error.value)
  assert "\n" not in message, message
  return message


def _contents(folder):
  return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def _command_fails(argv, capsys):
  """python -m lra.data ARGV ends with one `error:` line and exit 1; returns that line."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as stop:
    command.main(argv)
  lines = capsys.readouterr().err.splitlines()
  assert stop.value.code == 1 and len(lines) == 1 and lines[0].startswith("error: "), lines
  return lines[0]


# -------------------------------------------------------------- the user's files are kept


def test_listops_split_missing_beside_hand_given_files_is_refused(listops_dir, tmp_path,
                                                                   capsys):
  """The release's basic_train.tsv and basic_test.tsv, no basic_val.tsv: nothing generated."""
  data = tmp_path / "release"
  data.mkdir()
  for name in ("basic_train.tsv", "basic_test.tsv"):
    shutil.copy(os.path.join(listops_dir, name), data / name)
  before = _contents(data)
  message = _one_line_error(tasks.load, _listops_config(data))
  assert str(data) in message and "basic_val.tsv" in message and "empty folder" in message
  line = _command_fails(["listops", f"--data_dir={data}", "--num_train=40", "--num_val=8",
                         "--num_test=8", "--min_length=5", "--max_length=30", "--max_depth=3",
                         "--workers=1"], capsys)
  assert "basic_train.tsv" in line and "basic_val.tsv" in line
  after = _contents(data)
  assert after.pop(".lra-data.lock", b"") == b"" and after == before  # nothing written


def test_pathfinder_release_images_in_the_generator_folder_are_kept(tmp_path):
  """The release's images where the generator would write (prepared splits missing)."""
  level_dir = tmp_path / "pf" / "curv_contour_length_14"
  (level_dir / "imgs" / "0").mkdir(parents=True)
  (level_dir / "metadata").mkdir()
  Image.fromarray(np.full((32, 32), 7, np.uint8)).save(level_dir / "imgs" / "0" / "sample_0.png")
  (level_dir / "metadata" / "0.npy").write_text("imgs/0 sample_0.png 0 1\n")
  before = {p: p.read_bytes() for p in level_dir.rglob("*") if p.is_file()}
  from lra.configs import pathfinder as pathfinder_config
  config = pathfinder_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.num_images, config.data.workers = str(tmp_path / "pf"), 20, 1
  message = _one_line_error(tasks.load, config)  # read with --release_dir, not generated over
  assert f"--release_dir={tmp_path / 'pf'} --size=32" in message, message
  assert {p: p.read_bytes() for p in level_dir.rglob("*") if p.is_file()} == before


def test_regenerating_a_generated_folder_keeps_files_it_did_not_make(tmp_path, capsys):
  flags = [f"--{k}={v}" for k, v in LISTOPS.items()] + [f"--data_dir={tmp_path}", "--workers=1"]
  command.main(["listops", *flags])
  (tmp_path / "notes.txt").write_text("mine")
  assert "notes.txt" in _command_fails(["listops", *flags, "--num_train=30"], capsys)
  assert (tmp_path / "notes.txt").read_text() == "mine"
  assert len((tmp_path / "basic_train.tsv").read_text().splitlines()) == 41  # kept as it was


def test_interrupted_generation_is_redone_not_refused(tmp_path, monkeypatch):
  """A run killed while generating leaves an unfinished record: the next one generates again."""
  write_tsv = listops.write_tsv

  def fail_on_val(path, examples):
    if str(path).endswith("basic_val.tsv"):
      raise KeyboardInterrupt
    write_tsv(path, examples)

  from lra.data import record  # here, so that the other tests run on code without it
  monkeypatch.setattr(listops, "write_tsv", fail_on_val)
  with pytest.raises(KeyboardInterrupt):
    tasks.load(_listops_config(tmp_path))
  assert record.read(tmp_path)["complete"] is False
  monkeypatch.setattr(listops, "write_tsv", write_tsv)
  task = tasks.load(_listops_config(tmp_path))
  assert len(task.splits["val"]["labels"]) == 8 and record.read(tmp_path)["complete"]


def test_pathfinder_regenerated_with_fewer_images_leaves_no_old_metadata(tmp_path):
  def generate(n):
    return pathfinder_gen.generate_release(tmp_path, size=32, level="easy", num_images=n,
                                           workers=1, images_per_folder=10, progress=False)

  generate(30)
  level_dir = generate(10)
  assert sorted(os.listdir(os.path.join(level_dir, "metadata"))) == ["0.npy"]
  assert sorted(os.listdir(os.path.join(level_dir, "imgs"))) == ["0"]
  assert len(pathfinder.read_metadata(level_dir)) == 10  # not the 30 of the first run


# -------------------------------------------------- data of other settings is never used


@pytest.mark.parametrize("field, value", [("num_train", 30), ("max_depth", 4),
                                          ("max_length", 25)])
def test_listops_changed_generator_settings_are_refused(tmp_path, field, value):
  tasks.load(_listops_config(tmp_path))  # generated on first use
  config = _listops_config(tmp_path, **{field: value})
  message = _one_line_error(tasks.load, config)
  made = LISTOPS[field]
  assert f"config.data.{field}={value}" in message and f"{field}={made}" in message
  assert listops.generate_command(config.data) in message
  command.main(listops.generate_command(config.data).split()[3:] + ["--workers=1"])
  assert tasks.load(config).data["record"]["settings"][field] == value  # remade, then used


def test_listops_generator_json_of_older_runs_counts_as_a_record(listops_dir, tmp_path):
  """Folders generated on first use before records existed have generator.json."""
  for name in ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"):
    shutil.copy(os.path.join(listops_dir, name), tmp_path / name)
  settings = dict(num_train=512, num_val=60, num_test=70, min_length=5, max_length=40,
                  max_depth=3, max_args=4, seed=0)  # those of the listops_dir fixture
  (tmp_path / "generator.json").write_text(json.dumps(settings))
  message = _one_line_error(tasks.load, _listops_config(tmp_path))
  assert "config.data.num_train=40, the data has num_train=512" in message
  listops.make_folder(tmp_path, **LISTOPS, workers=1, progress=False)  # ours: regenerated
  assert not (tmp_path / "generator.json").exists()
  assert len(tasks.load(_listops_config(tmp_path)).splits["train"]["labels"]) == 40


def test_pathfinder_other_size_or_number_of_images_is_refused(tmp_path):
  data_dir = tmp_path / "pf"
  command.main(["pathfinder", f"--data_dir={data_dir}", "--num_images=20", "--workers=1"])
  from lra.configs import pathfinder as pathfinder_config
  config = pathfinder_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.num_images, config.data.workers = str(data_dir), 20, 1
  assert tasks.load(config).data["record"]["settings"]["num_images"] == 20
  config.data.size = 64  # the 32x32 rows must not be read as 64x64 images
  message = _one_line_error(tasks.load, config)
  assert "config.data.size=64, the data has size=32" in message and "--size=64" in message
  config.data.size, config.data.num_images = 32, 10
  message = _one_line_error(tasks.load, config)
  assert "config.data.num_images=10, the data has num_images=20" in message
  command.main(["pathfinder", f"--data_dir={data_dir}", "--num_images=10", "--workers=1"])
  task = tasks.load(config)  # remade in the folder it made: allowed, and nothing older is read
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [8, 1, 1]


def _imdb_tar(path, per_split=20):
  with tarfile.open(path, "w:gz") as tar:
    for split in ("train", "test"):
      for i in range(per_split):
        data = f"review {i} of {split} " * 8
        info = tarfile.TarInfo(f"aclImdb/{split}/{('neg', 'pos')[i % 2]}/{i}_1.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data.encode()))


def test_text_prepared_shorter_is_refused_and_longer_is_cut(tmp_path, monkeypatch):
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": 20, "test": 20}, raising=False)
  _imdb_tar(tmp_path / "aclImdb_v1.tar.gz")
  data_dir = tmp_path / "text"
  command.main(["text", f"--imdb_tar={tmp_path / 'aclImdb_v1.tar.gz'}",
                f"--data_dir={data_dir}", "--max_len=64"])
  from lra.configs import text as text_config
  config = text_config.get_config("transformer,cpu")  # max_len 512
  config.data.data_dir = str(data_dir)
  message = _one_line_error(tasks.load, config)
  assert "config.data.max_len=512, the data has max_len=64" in message
  assert "python -m lra.data text" in message and "--max_len=512" in message
  config.data.max_len = 32  # shorter: the rows are cut, and the task says so
  task = tasks.load(config)
  cut = task.data["cut"]  # every review is longer than 32 bytes (prepared at 64)
  assert (cut["from"], cut["to"], cut["examples"], cut["examples_cut"]) == (64, 32, 40, 40)
  assert task.data["record"]["source"]["bytes"] == os.path.getsize(tmp_path / "aclImdb_v1.tar.gz")
  assert task.splits["train"]["inputs"][np.arange(2)].shape == (2, 32)
  config.data.max_len = 64
  assert tasks.load(config).data["cut"] is None


def test_retrieval_prepared_shorter_is_refused(tmp_path):
  release = tmp_path / "tsv_data"
  release.mkdir()
  for name in retrieval.SPLIT_FILES.values():
    (release / name).write_text("".join(f"{i % 2}.0\ta\tb\tpaper {i}\tcited\n" for i in range(4)))
  retrieval.prepare(str(release), str(tmp_path / "out"), max_len=48, progress=False)
  from lra.configs import retrieval as retrieval_config
  config = retrieval_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.max_len = str(tmp_path / "out"), 64
  message = _one_line_error(tasks.load, config)
  assert "config.data.max_len=64, the data has max_len=48" in message
  config.data.max_len = 48
  assert tasks.load(config).data["record"]["source"]["release_dir"] == str(release)
  with open(release / retrieval.SPLIT_FILES["train"], "a") as f:
    f.write("1.0\tonly three\tcolumns\n")
  with pytest.raises(UserError, match="line 5"):  # a failed remake that replaced nothing ...
    retrieval.prepare(str(release), str(tmp_path / "out"), max_len=64, progress=False)
  assert tasks.load(config).data["record"]["settings"] == {"max_len": 48}  # ... keeps the data


def test_prepared_folder_without_a_record_is_not_trusted(tmp_path):
  """Prepared by an older version (no record): its settings are unknown, so it is remade."""
  for split in ("train", "test"):
    store.write_split(str(tmp_path), split, {"inputs": np.ones((4, 64), np.uint16),
                                             "labels": np.array([0, 1, 0, 1], np.int32)})
  from lra.configs import text as text_config
  config = text_config.get_config("transformer,cpu")
  config.data.data_dir = str(tmp_path)
  message = _one_line_error(tasks.load, config)
  assert f"{tmp_path} has no lra-data.json" in message and "python -m lra.data text" in message


def test_results_say_which_data_and_cut(tmp_path):
  config = _listops_config(tmp_path / "data", max_len=12)  # generated trees: 6 to 19 tokens
  config.num_train_steps = config.log_every = config.eval_every = config.checkpoint_every = 2
  results = trainer.train_and_evaluate(config, str(tmp_path / "run"), devices=jax.devices()[:1])
  cut = results["data"]["cut"]  # measured on the examples: 12 of the 56 are longer than 12
  assert (cut["from"], cut["to"], cut["examples"], cut["examples_cut"]) == (19, 12, 56, 12)
  assert results["data"]["record"]["settings"] == LISTOPS
  saved = json.loads((tmp_path / "run" / "results.json").read_text())
  assert saved["data"] == results["data"]
