"""A kill between Orbax's commit of a step and lra_manifest.json leaves a step
folder that Orbax committed and that has no manifest. Its meta (the config, the run an encoder
came from) is read from Orbax's own `meta` item, so the run resumes as if uninterrupted."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from lra import paths
from lra.training import checkpoint, initialise, trainer
from tests.tiny import tiny_config

SHORT = {"num_train_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}


def _kill_before_manifest(patch, step_folder, snapshot):
  """Copies the workdir as a SIGKILL leaves it once Orbax has committed `step_folder`
  (Checkpoints._save has waited for it) and before its manifest is written; the run goes on."""
  real = paths.write_text

  def write_text(path, text):
    if str(path) == str(step_folder / checkpoint.MANIFEST) and not snapshot.exists():
      shutil.copytree(step_folder.parents[1], snapshot)
    real(path, text)

  patch.setattr(paths, "write_text", write_text)


@pytest.mark.slow  # three training runs, over 40 s on 2 cores: `pytest -m slow`
def test_a_fine_tune_killed_before_its_manifest_resumes_to_the_uninterrupted_result(
    listops_dir, tmp_path):
  """A grid's fine-tune of a denoise run's encoder (its token table has the mask
  token's row) killed right after Orbax committed its checkpoint 2. Was: "the checkpoints do
  not fit this config: ... holds step 2 of a different model or optimiser"."""
  source = str(tmp_path / "pre")
  trainer.train_and_evaluate(tiny_config(listops_dir, objective="denoise", **SHORT), source)
  config = tiny_config(listops_dir, init_from=source, **{**SHORT, "num_train_steps": 4})
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  with pytest.MonkeyPatch.context() as patch:
    _kill_before_manifest(patch, straight / "checkpoints" / "2", killed)
    first = trainer.train_and_evaluate(config, str(straight))
  step = killed / "checkpoints" / "2"
  assert step.is_dir() and not (step / checkpoint.MANIFEST).exists()  # the moment of the kill
  assert ocp.utils.is_checkpoint_finalized(step) and not (killed / "results.json").exists()
  resumed = trainer.train_and_evaluate(config, str(killed))
  for key in ("test_accuracy", "test_loss", "best_step", "best_val_accuracy",
              "last_step_test_accuracy", "init", "num_train_steps", "tested_step"):
    assert resumed[key] == first[key], key
  assert first["init"]["mask_token"] is None  # kept: both tables have the mask token's row
  mesh = trainer.make_mesh()
  a, b = (_leaves(checkpoint.restore_raw(w, "checkpoints", 4, mesh)) for w in (straight, killed))
  assert [k for k, _ in a] == [k for k, _ in b]
  for (key, x), (_, y) in zip(a, b):
    np.testing.assert_array_equal(x, y, key)


def _leaves(tree):
  return [(jax.tree_util.keystr(k), np.asarray(v))
          for k, v in jax.tree_util.tree_flatten_with_path(jax.device_get(tree))[0]]


def _saved_without_manifests(workdir) -> dict:
  """WORKDIR/best/2 and checkpoints/2 of a made-up denoise run, saved as the trainer saves
  them and then left as a kill before each manifest leaves them: the meta the manifests held."""
  ckpts = checkpoint.Checkpoints(workdir, keep=2)
  config = {"task": "listops", "model": {"name": "transformer"}, "objective": "denoise"}
  state = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.asarray(2)}
  ckpts.save_best(2, state, {"best_step": 2, "config": config})
  ckpts.save_latest(2, state, {"best_step": 2, "config": config, "init": None})
  ckpts.close()
  metas = {}
  for kind in ("best", "checkpoints"):
    manifest = paths.resolve(workdir) / kind / "2" / checkpoint.MANIFEST
    metas[kind] = json.loads(manifest.read_text())["meta"]
    manifest.unlink()
  return metas


def test_every_reader_of_the_meta_reads_orbaxs_meta_item_without_a_manifest(tmp_path):
  workdir = str(tmp_path / "pre")
  metas = _saved_without_manifests(workdir)
  folder = paths.resolve(workdir)
  assert checkpoint.check(folder / "checkpoints" / "2") == (metas["checkpoints"], None)
  notes = []
  assert checkpoint.newest_intact(workdir, "checkpoints", notes) == (2, metas["checkpoints"])
  assert checkpoint.find_intact(workdir) == ("best", 2, metas["best"]) and not notes
  # init_from reads the settings that checkpoint was made with, not config.json (which every
  # later run of that workdir writes again).
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({**metas["best"]["config"], "seed": 7}, f)
  source = initialise.find(tiny_config(str(tmp_path), init_from=workdir), str(tmp_path / "ft"))
  assert source.config == metas["best"]["config"] and source.objective == "denoise"
  assert not (folder / "best" / "2" / checkpoint.MANIFEST).exists()  # read only


def test_a_step_without_manifest_or_meta_is_damaged_and_moved_aside(tmp_path):
  workdir = str(tmp_path / "run")
  _saved_without_manifests(workdir)
  step = paths.resolve(workdir) / "checkpoints" / "2"
  (step / "meta" / "metadata").unlink()
  why = "it has no lra_manifest.json and Orbax's meta item is missing or unreadable"
  assert checkpoint.check(step) == (None, why)
  notes = []
  assert checkpoint.newest_intact(workdir, "checkpoints", notes) is None
  assert notes == [f"{step} is damaged ({why}); moved to {paths.resolve(workdir)}/damaged/"
                   f"checkpoints-2"]


def test_a_step_orbax_never_committed_is_damaged(tmp_path, monkeypatch):
  """On GCS Orbax writes a step in its final folder and commits it with commit_success.txt
  (on a local disk, by renaming its temporary folder): without it, nor a manifest, the step is
  half written."""
  workdir = str(tmp_path / "run")
  _saved_without_manifests(workdir)
  step = paths.resolve(workdir) / "best" / "2"
  real = ocp.utils.is_checkpoint_finalized
  gcs = ocp.path.atomicity.CommitFileTemporaryPath  # what Orbax uses for gs:// paths
  monkeypatch.setattr(ocp.utils, "is_checkpoint_finalized",
                      lambda path: real(path, temporary_path_cls=gcs))
  assert checkpoint.check(step)[1] is None  # committed: commit_success.txt is there
  (step / "commit_success.txt").unlink()
  assert checkpoint.check(step) == (None, "Orbax never committed it (and it has no "
                                          "lra_manifest.json)")
