"""Issue 26's paper cuts: one-line messages with the fix, no noise in logs, data in one place.

(The refusal to resume another model's checkpoints is in tests/test_workdir.py.)"""
import errno
import hashlib
import json
import logging
import os
import shutil

import numpy as np
import pytest
from PIL import Image

import lra.locations
from lra.commands import train as train_command
from lra.configs import listops as listops_config, retrieval as retrieval_config
from lra.data import command, console, home, listops, pathfinder, record, retrieval, store, tasks
from lra.errors import UserError
from lra.training import config_checks
from tests import commands
from tests.commands import error_line
from tests.test_cli import TINY
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


# ------------------------------------------------------------- a. near-miss override keys


@pytest.mark.parametrize("flag, suggestion", [
    ("--config.learning_rat=0.1", "did you mean 'learning_rate'?"),
    ("--config.model.num_layer=3", "did you mean 'num_layers'?"),
    ("--config.model.attention.query_chunks=128", "did you mean 'query_chunk'?"),
])
@pytest.mark.commands
def test_a_near_miss_key_is_one_line_with_the_suggestion(tmp_path, flag, suggestion):
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}", flag, expect=2)
  line = error_line(proc)
  assert len(proc.stderr.splitlines()) == 1, proc.stderr
  assert flag.split("=")[0].split(".")[-1] in line and suggestion in line, line
  assert not (tmp_path / "run").exists()


# ------------------------------------------------- b, f, j. the data command's console


@pytest.mark.commands
def test_the_data_commands_write_no_bars_into_a_log_and_say_where_they_write(tmp_path):
  """Run from another folder, with a relative --data_dir and output to a file: the data goes
  under $LRA_DATA_DIR, the first line says what and where, and the log has no \\r."""
  log = tmp_path / "log.txt"
  for argv in (["listops", "--data_dir=rel/listops", *SMALL_FLAGS],
               ["pathfinder", "--data_dir=rel/pf", "--num_images=20", "--level=easy",
                "--workers=1"]):
    commands.run("-m", "lra.data", *argv, cwd=tmp_path, output=log,
                 env={"LRA_DATA_DIR": str(tmp_path / "home")})
    text = log.read_text()
    assert "\r" not in text and "Traceback" not in text, text
    folder = tmp_path / "home" / "rel" / argv[1].split("/")[-1]
    assert text.splitlines()[0].startswith(("generating ListOps: 40/8/8 examples",
                                            "generating 20 Pathfinder images")), text
    assert f"into {folder}" in text.splitlines()[0], text
    assert "wrote test" in text and any(folder.rglob(record.NAME))
  assert not (tmp_path / "rel").exists()  # nothing under the folder the command ran in


class _Stderr:
  def __init__(self, terminal: bool):
    self.terminal = terminal

  def isatty(self) -> bool:
    return self.terminal


def test_a_bar_is_drawn_only_on_a_terminal(monkeypatch):
  monkeypatch.setattr(console.sys, "stderr", _Stderr(False))
  assert console.bar(range(3)).disable
  monkeypatch.setattr(console.sys, "stderr", _Stderr(True))
  with open(os.devnull, "w") as devnull:
    assert not console.bar(range(3), file=devnull).disable
  assert console.bar(range(3), progress=False).disable


def test_listops_without_flags_says_it_writes_the_full_release_first(tmp_path, monkeypatch,
                                                                     capsys):
  monkeypatch.setenv(home.ENV, str(tmp_path))
  said = []
  monkeypatch.setattr(listops, "make_folder",
                      lambda *a, **k: said.append(capsys.readouterr().out) or {})
  command.main(["listops"])
  assert said == [f"generating ListOps: the full LRA release, 96,000/2,000/2,000 examples "
                  f"(basic_train.tsv/basic_val.tsv/basic_test.tsv, about 665 MB) into "
                  f"{tmp_path / 'data' / 'listops'}\n"]  # before anything is generated


# ------------------------------------------------------ c. JAX's backend line is quiet


@pytest.mark.commands
def test_no_backend_info_line_before_a_message(tmp_path):
  """Without JAX_PLATFORMS JAX tries every platform; the one it cannot start (libtpu) used to
  print an INFO line before every message."""
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}",
                      f"--config.data.data_dir={tmp_path / 'none'}",
                      "--config.data.generate_if_missing=False", expect=1,
                      env={"JAX_PLATFORMS": None, "XLA_FLAGS": None})
  assert proc.stderr.splitlines() == [error_line(proc)], proc.stderr
  assert "ListOps data not found" in proc.stderr


def test_the_backend_filter_drops_only_that_info_line():
  def passes(level, message):
    return train_command._NoBackendProbe().filter(
        logging.LogRecord("jax._src.xla_bridge", level, "x.py", 1, message, (), None))

  assert not passes(logging.INFO, "Unable to initialize backend '%s': %s")
  assert passes(logging.WARNING, "Unable to initialize backend 'cuda': plugin found, failed")
  assert passes(logging.WARNING, "An NVIDIA GPU may be present on this machine, but ...")
  assert passes(logging.INFO, "other news")


# ------------------------------------------------- e, i. a run cut short; metrics, no checkpoint


def test_a_shortened_run_is_one_warning_line_naming_the_settings():
  config = listops_config.get_config("transformer")  # 5,000 steps, warmup 1,000, evals 500
  config.num_train_steps = 30
  line = config_checks.short_run_warning(config)
  assert line == (
      "config.num_train_steps=30 is at or below config.warmup_steps=1000 (the learning rate "
      "never reaches its peak), config.eval_every=500 (validated only at the last step), "
      "config.checkpoint_every=500 (no checkpoint to resume from before the end), "
      "config.log_every=100 (one log line, at the end); for a run this short give e.g. "
      "--config.warmup_steps=3 --config.eval_every=7 --config.checkpoint_every=7 "
      "--config.log_every=1")
  config.num_train_steps = 5000
  assert config_checks.short_run_warning(config) is None
  # Issue 36 item 5: a cadence equal to the length is a choice, and a value already at the
  # suggestion is not suggested again.
  config.num_train_steps = config.eval_every = config.checkpoint_every = config.log_every = 30
  config.warmup_steps = 3
  assert config_checks.short_run_warning(config) is None
  config.num_train_steps = config.warmup_steps = config.eval_every = 1
  config.checkpoint_every = config.log_every = 1
  assert config_checks.short_run_warning(config) is None
  config.warmup_steps = 2
  assert config_checks.short_run_warning(config).endswith("give e.g. --config.warmup_steps=1")
  assert config_checks.short_run_warning(listops_config.get_config("transformer,cpu")) is None


@pytest.mark.commands
def test_metrics_without_a_checkpoint_are_moved_aside_with_one_line(listops_dir, tmp_path):
  """A workdir whose checkpoints were deleted: training starts from step 0 and says so, the
  old rows go to metrics.old-1.jsonl; the same run (4 steps, warmup 200) warns that it is
  shorter than its warmup."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  old = '{"step": 900, "kind": "train", "train_loss": 1.5}\n'
  (workdir / "metrics.jsonl").write_text(old)
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={workdir}", f"--config.data.data_dir={listops_dir}", *TINY)
  lines = proc.stdout.splitlines()
  warnings = [l for l in lines if l.startswith("warning:")]
  assert warnings == [
      "warning: config.num_train_steps=4 is at or below config.warmup_steps=200 (the learning "
      "rate never reaches its peak); for a run this short give e.g. --config.warmup_steps=1",
      f"warning: found {workdir}/metrics.jsonl but no checkpoint: training starts from step 0; "
      f"the earlier metrics are moved to {workdir}/metrics.old-1.jsonl (and TensorBoard hides "
      f"their events)"], lines
  assert (workdir / "metrics.old-1.jsonl").read_text() == old
  steps = [json.loads(l)["step"] for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert 900 not in steps and max(steps) == 4


# ----------------------------------------------------- g. files edited after they were made


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
  """Issue 34 item 1: every label moved on by one, the size kept and the times set back."""
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


# ---------------------------------------------------------------------- h. empty splits


def test_an_empty_retrieval_split_is_refused_and_nothing_written(tmp_path, capsys):
  release = tmp_path / "tsv_data"
  release.mkdir()
  for split, name in retrieval.SPLIT_FILES.items():
    (release / name).write_text("" if split == "val" else "1.0\ta\tb\tx\ty\n")
  capsys.readouterr()
  with pytest.raises(SystemExit) as stop:
    command.main(["retrieval", f"--release_dir={release}", f"--data_dir={tmp_path / 'out'}"])
  err = capsys.readouterr().err.splitlines()
  assert stop.value.code == 1 and err == [
      f"error: {release / 'new_aan_pairs.eval.tsv'} is empty: the val split would have no "
      f"pairs; pass the release's tsv_data folder, whose three files all hold pairs"], err
  assert not (tmp_path / "out").exists()


def test_too_few_pathfinder_images_for_three_splits_are_refused(tmp_path):
  level = tmp_path / "curv_baseline"
  (level / "imgs" / "0").mkdir(parents=True)
  (level / "metadata").mkdir()
  for i in range(5):
    Image.fromarray(np.full((32, 32), i, np.uint8)).save(level / "imgs" / "0" / f"sample_{i}.png")
  (level / "metadata" / "0.npy").write_text(
      "".join(f"imgs/0 sample_{i}.png {i} {i % 2}\n" for i in range(5)))
  message = _refused(pathfinder.prepare, str(level), str(tmp_path / "out"), 32)
  assert message == (f"{level} lists 5 images, too few for the 80/10/10 splits (the val split "
                     f"would be empty); at least 10 are needed")
  assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ j. the data home


def test_a_relative_data_dir_is_under_the_data_home(tmp_path, monkeypatch):
  monkeypatch.delenv(home.ENV, raising=False)
  root = lra.locations.PACKAGE_ROOT
  assert home.data_home() == root  # a checkout: the README's data/... paths
  assert home.resolve("data/listops") == os.path.join(root, "data", "listops")
  assert home.resolve(str(tmp_path)) == str(tmp_path)  # absolute: as given
  monkeypatch.setattr(lra.locations, "INSTALLED", True)  # a wheel: never inside site-packages
  monkeypatch.setenv("HOME", str(tmp_path))
  assert home.resolve("data/text") == str(tmp_path / "lra_data" / "data" / "text")
  monkeypatch.setenv(home.ENV, str(tmp_path / "mine"))
  assert home.resolve("data/text") == str(tmp_path / "mine" / "data" / "text")


def test_training_generates_a_relative_data_dir_under_the_data_home(tmp_path, monkeypatch,
                                                                    capsys):
  monkeypatch.setenv(home.ENV, str(tmp_path / "home"))
  monkeypatch.chdir(tmp_path)
  config = _listops("rel/listops")
  config.data.generate_if_missing = True
  task = tasks.load(config)
  folder = tmp_path / "home" / "rel" / "listops"
  assert len(task.splits["train"]["labels"]) == 40 and (folder / record.NAME).exists()
  assert (f"ListOps data not found in {folder}; generating 40/8/8 examples (basic_train.tsv/"
          f"basic_val.tsv/basic_test.tsv) there") in capsys.readouterr().out
  assert config.data.data_dir == "rel/listops"  # the config (config.json) keeps it as given
  assert not (tmp_path / "rel").exists()
