"""A run, its resume and eval.py on a gs:// workdir, against a fake bucket with no network.

The fake maps gs://BUCKET/KEY to ROOT/BUCKET/KEY on local disk for both ways in: fsspec (which
etils.epath uses for gs:// when TensorFlow is absent: metrics, JSON, Orbax's metadata) and
TensorStore (Orbax's array data, whose gcs driver is swapped for its file driver; Orbax's
bucket-type query to the GCS API answers "flat bucket"). Listings
come back as gcsfs gives them ("bucket/key", no scheme), so code that loses the scheme breaks.
"""
import glob as glob_lib
import importlib
import json
import os

import pytest
from etils.epath import backend as epath_backend
from fsspec.implementations.local import LocalFileSystem
from orbax.checkpoint._src.path import gcs_utils

from lra.errors import UserError
from lra.training import trainer
from tests.tiny import tiny_config


class FakeGCS(LocalFileSystem):
  """gs://bucket/key <-> ROOT/bucket/key; ROOT is set by the fixture."""
  protocol = ("gs", "gcs")
  root = ""
  cachable = False  # a new ROOT per test

  def __init__(self, *args, finalize_on_close=False, **kwargs):
    del finalize_on_close  # gcsfs's option, passed by epath
    super().__init__(*args, **kwargs)

  @classmethod
  def _strip_protocol(cls, path):
    path = os.fspath(path)
    for prefix in ("gs://", "gcs://"):
      path = path.removeprefix(prefix)
    if path.startswith(cls.root):  # already mapped
      return path.rstrip("/") or "/"
    assert not path.startswith("/"), f"a local path reached the fake bucket: {path}"
    return os.path.join(cls.root, path).rstrip("/")

  def _unmap(self, path: str) -> str:
    return os.path.relpath(path, self.root)

  def ls(self, path, detail=False, **kwargs):
    out = super().ls(path, detail=detail, **kwargs)
    if detail:
      return [{**e, "name": self._unmap(e["name"])} for e in out]
    return [self._unmap(p) for p in out]

  def glob(self, path, **kwargs):
    del kwargs
    return [self._unmap(p) for p in sorted(glob_lib.glob(self._strip_protocol(path)))]

  def info(self, path, **kwargs):
    out = super().info(path, **kwargs)
    return {**out, "name": self._unmap(out["name"])}


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """The fake gs:// storage; the test's working folder is an empty one beside it."""
  root = tmp_path / "gcs"
  root.mkdir()
  monkeypatch.setattr(FakeGCS, "root", str(root))
  fsspec_registry = importlib.import_module("fsspec.registry")
  for scheme in ("gs", "gcs"):
    monkeypatch.setitem(fsspec_registry._registry, scheme, FakeGCS)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  monkeypatch.setattr(gcs_utils, "get_kvstore_for_gcs", lambda path: {
      "driver": "file", "path": str(root / path.removeprefix("gs://"))})
  # A flat bucket (GCS's default); the real check asks the GCS API.
  monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  yield root
  epath_backend.fsspec_backend._get_filesystem.cache_clear()


def test_train_resume_and_eval_on_a_gs_workdir(bucket, listops_dir, capsys):
  config = tiny_config(listops_dir, num_train_steps=4)
  first = trainer.train_and_evaluate(config, "gs://lra-bucket/runs/tiny")
  run = bucket / "lra-bucket" / "runs" / "tiny"
  assert json.loads((run / "results.json").read_text())["num_train_steps"] == 4
  assert sorted(os.listdir(run / "checkpoints")) == ["2", "4"]

  config = tiny_config(listops_dir, num_train_steps=8)
  second = trainer.train_and_evaluate(config, "gs://lra-bucket/runs/tiny")
  assert "Resuming from the checkpoint at step 4 in gs://lra-bucket/runs/tiny" in (
      capsys.readouterr().out)
  assert second["train_time_s"] >= first["train_time_s"]
  assert json.loads((run / "config.json").read_text())["num_train_steps"] == 8
  steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
  assert steps[0] == 2 and steps[-1] == 8 and 4 in steps and 6 in steps  # both runs' lines
  assert len(os.listdir(run / "tensorboard")) == 2  # one event file per run
  assert "8" in os.listdir(run / "checkpoints") and os.listdir(run / "best")

  evaluate = importlib.import_module("eval")
  evaluate.main(["accuracy", "gs://lra-bucket/runs", "--out=gs://lra-bucket/eval"])
  table = json.loads((bucket / "lra-bucket" / "eval" / "accuracy.json").read_text())
  ours = {row["model"]: row["cells"]["listops"]["ours"] for row in table["rows"]}
  assert ours["transformer"] == pytest.approx(100 * second["test_accuracy"], abs=0.06)
  # The run named within the folder named (gs://lra-bucket/runs), its checkpoint within the run.
  assert "; `tiny`" in (bucket / "lra-bucket" / "eval" / "accuracy.md").read_text()
  assert second["tested_checkpoint"] == f"best/{second['best_step']}"
  assert sorted(os.listdir(bucket / "lra-bucket" / "eval")) == [
      "accuracy.csv", "accuracy.json", "accuracy.md"]
  assert os.listdir(".") == []  # nothing under ./gs: or anywhere local


def test_remote_data_dir_is_refused_in_one_line(listops_dir, tmp_path):
  config = tiny_config(listops_dir)
  config.data.data_dir = "gs://lra-bucket/data/listops"
  with pytest.raises(UserError, match="copy the data to local disk"):
    trainer.train_and_evaluate(config, str(tmp_path / "run"))


def test_metrics_without_a_checkpoint_are_moved_aside_on_a_gs_workdir(bucket, capsys):
  """A run starting from step 0 moves an earlier metrics.jsonl aside there too."""
  from lra.training.writers import MetricWriter
  run = bucket / "lra-bucket" / "runs" / "restarted"
  run.mkdir(parents=True)
  (run / "metrics.jsonl").write_text('{"step": 7, "kind": "train", "train_loss": 1.0}\n')
  writer = MetricWriter("gs://lra-bucket/runs/restarted", 0)
  writer.write(1, {"train_loss": 2.0})
  writer.close()
  assert (run / "metrics.old-1.jsonl").read_text().startswith('{"step": 7,')
  assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [1]
  assert "metrics.old-1.jsonl" in capsys.readouterr().out
