"""A damaged checkpoint is survivable: the newest one that restores is used, one line says
which was skipped and why, and the damaged one is moved aside, never deleted."""
import glob
import json
import os
import shutil

import pytest

from lra.training import trainer
from tests.tiny import tiny_config

STEPS = dict(num_train_steps=8, keep_checkpoints=3)  # checkpoints 4, 6, 8; validation at 4, 8


_FINISHED = {}  # listops_dir -> (workdir, results): one run per session, for both files


def finished_run(listops_dir, tmp_path_factory):
  """A finished tiny run (its workdir and results), made once; each test copies it."""
  if listops_dir not in _FINISHED:
    workdir = tmp_path_factory.mktemp("finished") / "run"
    results = trainer.train_and_evaluate(tiny_config(listops_dir, **STEPS), str(workdir))
    assert sorted(os.listdir(workdir / "checkpoints")) == ["4", "6", "8"]
    _FINISHED[listops_dir] = workdir, results
  return _FINISHED[listops_dir]


@pytest.fixture
def finished(listops_dir, tmp_path_factory):
  return finished_run(listops_dir, tmp_path_factory)


def _copy(finished, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(finished[0], workdir)
  return workdir


def _truncate(folder):
  """Every file of the folder cut to half its length, as a copy cut short leaves it."""
  for path in glob.glob(os.path.join(folder, "**"), recursive=True):
    if os.path.isfile(path):
      with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _rerun(listops_dir, workdir, capfd):
  """The same command again; its stdout lines, after checking that stderr has no noise."""
  results = trainer.train_and_evaluate(tiny_config(listops_dir, **STEPS), str(workdir))
  out, err = capfd.readouterr()
  assert "Traceback" not in err and "Event loop is closed" not in err, err[-3000:]
  return results, out.splitlines()


def _files(folder):
  return sorted(os.path.relpath(p, folder) for p in glob.glob(f"{folder}/**", recursive=True))


def test_damaged_checkpoints_are_moved_aside_and_the_newest_intact_one_resumed(
    listops_dir, finished, tmp_path, capfd):
  workdir = _copy(finished, tmp_path)
  best_step = finished[1]["best_step"]
  assert best_step in (4, 8)  # so checkpoints/ keeps a copy of it
  damaged = {workdir / "checkpoints" / "8": "truncated", workdir / "checkpoints" / "6":
             "partly deleted", workdir / "best" / str(best_step): "truncated"}
  for folder, damage in damaged.items():
    if damage == "truncated":
      _truncate(folder / "state")
    else:
      shutil.rmtree(folder / "state" / "ocdbt.process_0")
  files = {folder: _files(folder) for folder in damaged}
  capfd.readouterr()
  results, lines = _rerun(listops_dir, workdir, capfd)
  warnings = [l for l in lines if l.startswith("warning:")]
  assert len(warnings) == 3, lines  # one line per damaged step
  for folder, line in zip(damaged, warnings):
    aside = workdir / "damaged" / f"{folder.parent.name}-{folder.name}"
    assert line.startswith(f"warning: {folder} is damaged (state/"), line
    assert line.endswith(f"; moved to {aside}"), line
    assert _files(aside) == files[folder]  # kept as it was, for inspection
  assert "Resuming from the checkpoint at step 4" in "\n".join(lines)
  for key in ("test_accuracy", "test_loss", "best_step", "last_step_test_accuracy"):
    assert results[key] == finished[1][key], key  # steps 5 to 8 again, exactly
  assert results["tested_checkpoint"] == f"checkpoints/{best_step}"  # relative to the workdir
  assert sorted(os.listdir(workdir / "checkpoints")) == ["4", "6", "8"]  # saved anew


def test_deleted_best_checkpoint_is_tested_from_its_copy(listops_dir, finished, tmp_path,
                                                         capfd):
  workdir = _copy(finished, tmp_path)
  best_step = finished[1]["best_step"]
  shutil.rmtree(workdir / "best")
  capfd.readouterr()
  results, lines = _rerun(listops_dir, workdir, capfd)
  assert results["test_accuracy"] == finished[1]["test_accuracy"]
  assert results["tested_step"] == best_step
  assert results["tested_checkpoint"] == f"checkpoints/{best_step}"  # relative to the workdir
  assert not [l for l in lines if l.startswith("warning:")]


def test_lost_best_checkpoint_without_copy_tests_the_final_state_and_says_so(
    listops_dir, finished, tmp_path, capfd):
  workdir = _copy(finished, tmp_path)
  best_step = finished[1]["best_step"]
  shutil.rmtree(workdir / "best")
  if best_step != 8:
    shutil.rmtree(workdir / "checkpoints" / str(best_step))
  capfd.readouterr()
  results, lines = _rerun(listops_dir, workdir, capfd)
  assert results["tested_step"] == 8
  assert results["tested_checkpoint"].startswith("the final state (step 8): no copy of the "
                                                 f"best-on-validation checkpoint (step "
                                                 f"{best_step}) restores")
  assert results["test_accuracy"] == finished[1]["last_step_test_accuracy"]
  assert results["best_step"] == best_step  # what validation chose, not what was tested
  assert [l for l in lines if l.startswith("warning:")] == [
      f"warning: testing {results['tested_checkpoint']}"]
  saved = json.loads((workdir / "results.json").read_text())
  assert saved["tested_checkpoint"] == results["tested_checkpoint"]
