"""Orbax checkpoints: the latest few for resuming, and the best on validation for testing."""
from __future__ import annotations

import hashlib
from typing import Any

import jax
import orbax.checkpoint as ocp

from lra import paths


def fingerprint(state) -> str:
  """A hash of the state's tree, shapes and dtypes: equal iff a checkpoint fits the state."""
  leaves = jax.tree_util.tree_flatten_with_path(state)[0]
  text = ";".join(f"{jax.tree_util.keystr(k)}:{v.shape}:{v.dtype}" for k, v in leaves)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


class MismatchError(ValueError):
  """The checkpoint was made by another model or optimiser."""


class Checkpoints:
  """`workdir/checkpoints` keeps the last `keep` states; `workdir/best` the best one."""

  def __init__(self, workdir, keep: int):
    workdir = paths.resolve(workdir)  # a local path or a URL such as gs://bucket/run
    options = lambda n: ocp.CheckpointManagerOptions(max_to_keep=n, create=True)
    self.latest = ocp.CheckpointManager(workdir / "checkpoints", options=options(keep))
    self.best = ocp.CheckpointManager(workdir / "best", options=options(1))

  @staticmethod
  def _save(manager, step: int, state, meta: dict[str, Any]) -> None:
    meta = {**meta, "fingerprint": fingerprint(state)}
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                               meta=ocp.args.JsonSave(meta)), force=True)
    manager.wait_until_finished()  # a kill right after returns still leaves it whole

  def save_latest(self, step: int, state, meta: dict[str, Any]) -> None:
    self._save(self.latest, step, state, meta)

  def save_best(self, step: int, state, meta: dict[str, Any]) -> None:
    self._save(self.best, step, state, meta)

  @staticmethod
  def _restore(manager, like_state):
    step = manager.latest_step()
    if step is None:
      return None
    meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
    if meta.get("fingerprint") != fingerprint(like_state):
      # Checked before restoring: a failed Orbax restore leaves noisy asyncio errors behind.
      raise MismatchError(f"{manager.directory} holds step {step} of a different model or "
                          f"optimiser (parameter or optimiser-state shapes differ)")
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, like_state)
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return restored.state, restored.meta

  def restore_latest(self, like_state):
    """(state, meta) of the newest checkpoint, or None for a fresh run."""
    return self._restore(self.latest, like_state)

  def restore_best(self, like_state):
    return self._restore(self.best, like_state)

  def close(self) -> None:
    self.latest.close()
    self.best.close()
