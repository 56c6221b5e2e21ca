"""The data command and the data home: `python -m lra.data` writes no progress bars into a
log and says first what it generates and where; a relative data_dir is under the data home
($LRA_DATA_DIR, the checkout, or ~/lra_data for a wheel), for the command and for training
alike; a split that would be empty is refused before anything is written."""
import os

import numpy as np
import pytest
from PIL import Image

import lra.locations
from lra.data import command, console, home, listops, pathfinder, record, retrieval, tasks
from tests import commands
from tests.test_data_edits import SMALL_FLAGS, _listops, _refused


# ------------------------------------------------------------------ the data command's console


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


# --------------------------------------------------------------------------- empty splits


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


# ------------------------------------------------------------------------------ the data home


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
