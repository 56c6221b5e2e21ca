"""Orbax checkpoints: the latest few for resuming, and the best on validation for testing.

Each saved step gets a record of its own (MANIFEST): the sizes of its files and a copy of its
meta (step, best so far, the config it was made with). A restore checks the sizes before Orbax
reads anything: a truncated or deleted file is found without Orbax's background threads
failing (hundreds of lines), and the step is moved aside to WORKDIR/damaged/ (never deleted)
so that the newest intact step is restored instead. The meta copy lets the trainer compare
configs before it compiles anything. A step killed between Orbax's commit and its manifest
has no sizes to check; Orbax's commit vouches for its files and its own `meta` item holds
the same meta (_read_unrecorded).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from lra import paths

MANIFEST = "lra_manifest.json"  # in each step folder: {"files": {path: bytes}, "meta": {...}}


def fingerprint(state) -> str:
  """A hash of the state's tree, shapes and dtypes: equal iff a checkpoint fits the state."""
  leaves = jax.tree_util.tree_flatten_with_path(state)[0]
  text = ";".join(f"{jax.tree_util.keystr(k)}:{v.shape}:{v.dtype}" for k, v in leaves)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


class MismatchError(ValueError):
  """The checkpoint was made by another model or optimiser."""


def _file_sizes(folder) -> dict[str, int]:
  sizes = {}
  for root, _, files in paths.walk(folder):
    for name in files:
      if name != MANIFEST:
        rel = str(root / name)[len(str(folder)) + 1:]
        sizes[rel] = (root / name).stat().length  # epath: local or remote
  return sizes


def _read_unrecorded(folder) -> tuple[dict | None, str | None]:
  """check() of a step folder without a manifest: killed between Orbax's commit and the
  manifest, or saved by older code. Intact if Orbax committed it (on a local disk by renaming
  its temporary folder, on GCS by commit_success.txt: ocp.utils.is_checkpoint_finalized), its
  meta then read from Orbax's `meta` item (the manifest's copy is of the same dict). Without
  that meta a resume forgets the config and the run its encoder came from (a fine-tune of a
  denoise run's encoder has the mask token's row) and no longer fits its own checkpoint. The
  manifest is not written here: in a multi-host run the other processes read the folder at
  the same time, and sizes measured now would vouch for whatever happened since the commit."""
  if not _file_sizes(folder):
    return None, "it is empty"
  if not ocp.utils.is_checkpoint_finalized(folder):
    return None, f"Orbax never committed it (and it has no {MANIFEST})"
  try:  # Orbax's own reader of the item that Checkpoints._save names "meta"
    return ocp.JsonCheckpointHandler().restore(folder / "meta"), None
  except (FileNotFoundError, ValueError):  # ValueError: not JSON
    return None, f"it has no {MANIFEST} and Orbax's meta item is missing or unreadable"


def check(folder) -> tuple[dict | None, str | None]:
  """(meta, None) for an intact step folder, (None, why) for a damaged one."""
  manifest = folder / MANIFEST
  if not manifest.exists():
    return _read_unrecorded(folder)
  try:
    record = json.loads(manifest.read_text())
  except ValueError:
    return None, f"its {MANIFEST} is unreadable"
  found = _file_sizes(folder)
  for rel, size in sorted(record["files"].items()):
    if rel not in found:
      return None, f"{rel} is missing"
    if found[rel] != size:
      return None, f"{rel} has {found[rel]} bytes, {size} when saved (truncated or overwritten)"
  return record["meta"], None


def _steps(folder) -> list[int]:
  """The step folders' numbers, newest first (Orbax names a step folder by its number)."""
  if not folder.exists():
    return []
  return sorted((int(p.name) for p in folder.iterdir() if p.name.isdigit()), reverse=True)


def move_aside(workdir, folder, why: str) -> str:
  """Moves a damaged step folder to WORKDIR/damaged/KIND-STEP[-N], out of Orbax's sight, and
  returns the line that says so."""
  aside = paths.resolve(workdir) / "damaged"
  base = f"{folder.parent.name}-{folder.name}"
  target, n = aside / base, 1
  if jax.process_index() == 0:
    aside.mkdir(parents=True, exist_ok=True)
    while target.exists():
      n += 1
      target = aside / f"{base}-{n}"
    folder.rename(target)
  if jax.process_count() > 1:  # every process sees the move before reading the steps
    multihost_utils.sync_global_devices("lra_checkpoint_moved_aside")
  return f"{folder} is damaged ({why}); moved to {target}"


def newest_intact(workdir, kind: str, notes: list[str],
                  only: int | None = None) -> tuple[int, dict] | None:
  """(step, meta) of the newest step in WORKDIR/KIND (or of step `only`) whose files are all
  there, or None. Damaged ones are moved aside, with a line in `notes`. Reads only the
  manifests (or Orbax's meta item, as JSON): no Orbax checkpoint manager is started."""
  folder = paths.resolve(workdir) / kind
  for step in _steps(folder):
    if only is not None and step != only:
      continue
    meta, why = check(folder / str(step))
    if why is None:
      return step, meta
    notes.append(move_aside(workdir, folder / str(step), why))
  return None


def find_intact(workdir, kinds=("best", "checkpoints"),
                damaged: list[str] | None = None) -> tuple[str, int, dict] | None:
  """(kind, step, meta) of the newest intact step in the first of WORKDIR/KIND that has one,
  or None. Reads only: damaged steps are passed over, never moved (another run's workdir),
  each added to `damaged` as "FOLDER: why"."""
  for kind in kinds:
    folder = paths.resolve(workdir) / kind
    for step in _steps(folder):
      meta, why = check(folder / str(step))
      if why is None:
        return kind, step, meta
      if damaged is not None:
        damaged.append(f"{folder / str(step)}: {why}")
  return None


def restore_raw(workdir, kind: str, step: int, mesh) -> dict:
  """The state saved at WORKDIR/KIND/STEP as a tree of arrays (dicts and lists, no classes),
  each replicated over `mesh`, whatever model or optimiser made it."""
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  options = ocp.CheckpointManagerOptions(create=False)  # and it never saves
  handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
  with ocp.CheckpointManager(paths.resolve(workdir) / kind, options=options,
                             item_handlers=handlers) as manager:
    saved = manager.item_metadata(step)["state"]
    abstract = jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding), saved,
        is_leaf=lambda m: hasattr(m, "shape") and hasattr(m, "dtype"))
    return manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract))).state


class Checkpoints:
  """`workdir/checkpoints` keeps the last `keep` states; `workdir/best` the best one.

  `notes` collects one line per damaged step moved aside, for the trainer to print."""

  def __init__(self, workdir, keep: int):
    self.workdir = paths.resolve(workdir)  # a local path or a URL such as gs://bucket/run
    options = lambda n: ocp.CheckpointManagerOptions(max_to_keep=n, create=True)
    self.latest = ocp.CheckpointManager(self.workdir / "checkpoints", options=options(keep))
    self.best = ocp.CheckpointManager(self.workdir / "best", options=options(1))
    self.notes: list[str] = []

  @staticmethod
  def _save(manager, step: int, state, meta: dict[str, Any]) -> None:
    meta = {**meta, "fingerprint": fingerprint(state)}
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                               meta=ocp.args.JsonSave(meta)), force=True)
    manager.wait_until_finished()  # a kill right after returns still leaves it whole
    if jax.process_index() == 0:  # every process's files are committed by now
      folder = manager.directory / str(step)
      record = {"files": _file_sizes(folder), "meta": meta}
      paths.write_text(folder / MANIFEST, json.dumps(record))

  def save_latest(self, step: int, state, meta: dict[str, Any]) -> None:
    self._save(self.latest, step, state, meta)

  def save_best(self, step: int, state, meta: dict[str, Any]) -> None:
    self._save(self.best, step, state, meta)

  def _intact(self, manager, only: int | None = None) -> int | None:
    """The newest intact step of `manager` (or `only`); damaged ones are moved aside."""
    before = len(self.notes)
    found = newest_intact(self.workdir, manager.directory.name, self.notes, only)
    if len(self.notes) > before:
      manager.reload()  # it listed the steps moved aside
    return None if found is None else found[0]

  def restore(self, manager, step: int, like_state):
    """(state, meta) of an intact `step`; refused if it fits another model."""
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
    """(state, meta) of the newest intact checkpoint, or None for a fresh run."""
    step = self._intact(self.latest)
    return None if step is None else self.restore(self.latest, step, like_state)

  def restore_best(self, final_state, meta: dict):
    """(state, meta, what) of the best-on-validation step (meta["best_step"]): from best/,
    else from its copy in checkpoints/ if one is kept; else the final state, with a note.
    `what` names a checkpoint relative to the workdir ("best/3000"), as results.json keeps it."""
    step = self._intact(self.best)
    if step is not None:
      state, best_meta = self.restore(self.best, step, final_state)
      return state, best_meta, paths.relative(self.best.directory / str(step), self.workdir)
    step = meta["best_step"]
    if step is not None and self._intact(self.latest, step) is not None:
      state, best_meta = self.restore(self.latest, step, final_state)
      return state, best_meta, paths.relative(self.latest.directory / str(step), self.workdir)
    what = (f"the final state (step {int(final_state.step)}): no copy of the "
            f"best-on-validation checkpoint (step {step}) restores")
    self.notes.append(f"testing {what}")
    return final_state, meta, what

  def close(self) -> None:
    self.latest.close()
    self.best.close()
