"""A workdir belongs to one run: a lock for the one trainer running in it, the check that a
resumed run is the run its checkpoints were made with, and the record of a divergence."""
from __future__ import annotations

import errno
import fcntl
import json
import os

import jax

from lra import config_record, paths, rules
from lra.errors import UserError
from lra.data import settings as data_settings
from lra.training import options

ALLOW_FLAG = "--allow_config_change"
# What a run is: a workdir holds the checkpoints of one model on one task, and no flag lets
# another resume them (a Linear Transformer's parameters would restore into a Transformer).
IDENTITY = ("model.name", "task")
DIVERGED = "diverged.json"  # a list of {"step": first bad step seen, "last_checkpoint": ...}


class Lock:
  """An exclusive lock on WORKDIR/.lock while a trainer runs, so that a second one stops at
  once instead of failing inside Orbax. Taken by process 0 only (the processes of one
  multi-host run share the workdir). flock exists only on a local disk: a remote workdir
  (gs://...) is not locked. `made`: this run made the workdir; a run refused before it saved
  anything there (bad data, a setting refused as the model is traced) removes it again on
  release, so it leaves no folder holding only `.lock`."""

  def __init__(self, workdir, made: bool = False):
    self._fd = None
    if paths.is_remote(workdir) or jax.process_index() != 0:
      return
    self._folder, self._made = os.fspath(workdir), made
    path = os.path.join(self._folder, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise UserError(f"another trainer is running in {workdir} (it holds {path}); wait for "
                      f"it to end, or use another --workdir") from None
    self._fd = fd

  def release(self) -> None:
    if self._fd is None:
      return
    empty = self._made and os.listdir(self._folder) == [".lock"]
    if empty:  # unlinked while still held: no other trainer can take a lock on it meanwhile
      os.unlink(os.path.join(self._folder, ".lock"))
    os.close(self._fd)  # closing the last descriptor releases the lock
    self._fd = None
    if empty:
      try:
        os.rmdir(self._folder)
      except OSError as e:  # another trainer has just made its .lock there: the folder is its
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
          raise


def differences(old: dict, new: dict) -> dict[str, list]:
  """{dotted key: [old, new]} of the settings that differ (None where a key is absent)."""
  a, b = config_record.flat(old), config_record.flat(new)
  return {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def changes_result(key: str, schedule: str) -> bool:
  """Whether a change of setting `key` (dotted) on a resume changes what the run computes;
  settings that only extend or observe a run may change (and are recorded)."""
  # The data settings that only say how the data is read or made are flagged `resume` in
  # their declarations (lra/data/settings.py), the trainer's in lra/training/options.py
  # (TrainerConfig).
  return key not in data_settings.OBSERVING and not options.may_change_on_resume(key, schedule)


def read_json(path):
  """The JSON in `path`, or None where there is no such file."""
  path = paths.resolve(path)
  if not path.exists():
    return None
  try:
    return json.loads(path.read_text())
  except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
    raise UserError(f"{path} is unreadable ({e}); it records this run: restore it, or use a "
                    f"new --workdir") from None


def diverged(workdir, step: int, last_checkpoint: int | None) -> str:
  """Records in workdir that training diverged by `step`, and returns the message."""
  if jax.process_index() == 0:
    events = read_json(paths.resolve(workdir) / DIVERGED) or []
    events.append({"step": step, "last_checkpoint": last_checkpoint})
    paths.write_text(paths.resolve(workdir) / DIVERGED, json.dumps(events, indent=1))
  # Finite is not sound: the state saved before may already be ruined (Adam's moments).
  kept = ("no checkpoint was saved before it" if last_checkpoint is None else
          f"the checkpoint saved before it (step {last_checkpoint}) is kept but may already be "
          f"ruined")
  return (f"the training loss or parameters became NaN or infinite by step {step}; {kept} "
          f"(recorded in {workdir}/{DIVERGED}). Train again in a new --workdir with a lower "
          f"config.learning_rate or a config.grad_clip_norm")


def _check_identity(changes: dict[str, list], workdir) -> None:
  """Refuses another model (or task) in a workdir that holds a run: never opted into."""
  other = {k: v for k, v in changes.items() if k in IDENTITY and v[0] is not None}
  if other:
    held = ", ".join(f"{k} {old!r}" for k, (old, _) in other.items())
    asked = ", ".join(f"{k} {new!r}" for k, (_, new) in other.items())
    raise UserError(f"{workdir} holds the run of {held} (see {workdir}/config.json), this "
                    f"config asks for {asked}: its checkpoints cannot start a run of another "
                    f"model or task; pick a new --workdir")


def _review(config, workdir, reference: dict | None, step: int
            ) -> tuple[dict[str, list], list[str], list[dict]]:
  """(every change, the changes that change the result as "KEY OLD -> NEW", the divergences a
  resume at `step` would meet again) of the run in `workdir` (see check_resume); refuses at
  once what no flag allows: another model or task, a run trained beyond num_train_steps."""
  changes = ({} if reference is None else
             differences(reference, config_record.as_json(config)))
  _check_identity(changes, workdir)  # another task or model first: its steps mean nothing here
  if step > config.num_train_steps:
    raise UserError(f"{workdir} holds a run trained to step {step}, beyond "
                    f"config.num_train_steps={config.num_train_steps}; it is kept as it is: "
                    f"use a new --workdir for a shorter run")
  # A trainer setting added since the run started is not a change (the run predates it).
  trainer = rules.declared(options.TrainerConfig)
  changes = {k: v for k, v in changes.items() if not (v[0] is None and k in trainer)}
  binding = [f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items()
             if changes_result(k, config.schedule)]
  # A checkpoint saved before a divergence leads to it again under the same settings.
  diverged = [e for e in read_json(paths.resolve(workdir) / DIVERGED) or []
              if step <= (e["last_checkpoint"] or 0)]
  return changes, binding, diverged


def resume_problems(config, workdir, reference: dict | None, step: int) -> list[str]:
  """What only ALLOW_FLAG lets a resume of the run in `workdir` go on with, one short text
  each ([]: nothing), as check_resume judges it: the grid asks for every run before the
  first one starts. Raises UserError for what no flag allows."""
  _, binding, diverged = _review(config, workdir, reference, step)
  return binding + ([f"diverged by step {diverged[-1]['step']}"] if diverged else [])


def check_resume(config, workdir, reference: dict | None, step: int,
                 allow: bool) -> dict | None:
  """Whether the run in `workdir`, made with the config `reference` (None: nothing made yet)
  and now at `step`, may go on under `config`: raises UserError if not; else returns the
  record of what changed ({"step", "changes", "after_divergence", ALLOW_FLAG}) or None."""
  changes, binding, diverged = _review(config, workdir, reference, step)
  problems = []
  if binding:
    problems.append(f"does not fit this config ({workdir}/config.json holds its settings): "
                    f"{', '.join(binding)}")
  if diverged:
    start = f"its checkpoint at step {step}" if step else "its start"
    problems.append(f"diverged: {start} led to NaN or inf by step {diverged[-1]['step']} "
                    f"(see {workdir}/{DIVERGED})")
  if problems and not allow:
    raise UserError(f"{workdir} holds a run that {'; and '.join(problems)}. Use a new "
                    f"--workdir, or add {ALLOW_FLAG} to go on with this run anyway (recorded "
                    f"in its results.json)")
  if not changes and not diverged:
    return None
  return {"step": step, "changes": changes, "after_divergence": diverged,
          ALLOW_FLAG: bool(problems)}
