"""Metrics to a JSON-lines file, and to TensorBoard and Weights & Biases where config.writers
names them.

config.writers is a comma list of "jsonl", "tensorboard" and "wandb" (default
"jsonl,tensorboard"). metrics.jsonl is always written, named or not: eval.py curves, the grid
command and the tests read it. Only process 0 writes; the other processes' writers do nothing.

Each metrics.jsonl row: {"step", "kind" (train, val or test), "time" (UTC, ISO 8601), metrics}.
A run resumed from the checkpoint of step S first drops the rows that the interrupted run wrote
after it (step > S, and any test rows): the file then reads as one uninterrupted run would have
written it. TensorBoard drops its own events from S on the same way (purge_step) and is given
the kept rows of step S again, so a rerun of a finished run has its test events once. Weights & Biases
cannot drop what it has: a resumed run continues the same W&B run (its id is kept in
WORKDIR/wandb_run_id), whose rows past S stay, and it ignores rows at steps it already has.

A run that starts from step 0 in a workdir holding metrics.jsonl (its checkpoints deleted, or
all of them damaged) moves that file aside to metrics.old-N.jsonl, says so in one line, and has
TensorBoard hide the earlier events (purge_step 1): the earlier run's numbers are kept, never
mixed into the new run's.

TensorBoard (tensorboardX: no TensorFlow needed) gets the config as text and as hparams (the
HParams tab sets this run's settings beside its metrics), and jax.profiler traces go below the
same folder (lra.training.profiling), where TensorBoard's profile plugin finds them.

A remote workdir (gs://...) gets the same files: object stores cannot append, so metrics.jsonl
is rewritten whole at each write, and tensorboardX (local files only without TensorFlow) writes
its events to a local folder that is uploaded at each write.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import secrets

import jax

from lra import config_record, paths
from lra.errors import UserError
from lra.training.options import WRITERS

TENSORBOARD_DIR = "tensorboard"  # WORKDIR/tensorboard: events, and profiles under plugins/
WANDB_ID_FILE = "wandb_run_id"
DEFAULT = "jsonl,tensorboard"  # MetricWriter without a config (tests)


def names(text: str) -> tuple[str, ...]:
  """config.writers "jsonl,tensorboard,wandb" -> the writers to run, "jsonl" always first
  (written whether named or not). A name not in WRITERS, or one named twice, is a UserError."""
  parts = [part.strip() for part in str(text).split(",") if part.strip()]
  if any(part not in WRITERS for part in parts) or len(set(parts)) < len(parts):
    raise UserError(f"config.writers={text!r} is not valid: a comma list of distinct names "
                    f"from {', '.join(WRITERS)} (metrics.jsonl is always written), e.g. "
                    f"'jsonl,tensorboard,wandb'")
  return ("jsonl",) + tuple(name for name in WRITERS[1:] if name in parts)


def check(config) -> None:
  """config.writers is valid and what it names is installed (before any data loads)."""
  if "wandb" in names(config.get("writers", DEFAULT)) and importlib.util.find_spec("wandb") is None:
    raise UserError("config.writers names wandb, which is not installed: pip install -e "
                    "\".[wandb]\" (or leave wandb out of config.writers)")


def kind_of(metrics: dict) -> str:
  """'val' or 'test' for the trainer's val_* / test_* metrics, else 'train'."""
  for kind in ("val", "test"):
    if metrics and all(key.startswith(f"{kind}_") for key in metrics):
      return kind
  return "train"


def _kept_rows(text: str, resume_step: int) -> str:
  """The rows of an earlier metrics.jsonl that a run resumed at `resume_step` keeps."""
  kept = []
  for line in text.splitlines(keepends=True):
    if not line.endswith("\n"):  # the last row, torn by a kill in mid-write
      break
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      row = None
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
      kept.append(line)  # not a row of ours: kept as it was
      continue
    metrics = {k: v for k, v in row.items() if k not in ("step", "kind", "time")}
    kind = row.get("kind") or kind_of(metrics)  # rows of older runs have no kind
    if row["step"] <= resume_step and kind != "test":
      kept.append(line)
  return "".join(kept)


def _set_aside(path) -> bool:
  """Moves the metrics.jsonl of an earlier run (a run starting at step 0 found it) to the
  first free metrics.old-N.jsonl beside it and says so; False if there is none."""
  if not path.exists() or not path.read_text().strip():
    return False
  n = 1
  while (path.parent / f"metrics.old-{n}.jsonl").exists():
    n += 1
  aside = path.parent / f"metrics.old-{n}.jsonl"
  path.rename(aside)
  print(f"warning: found {path} but no checkpoint: training starts from step 0; the earlier "
        f"metrics are moved to {aside} (and TensorBoard hides their events)", flush=True)
  return True


class _JsonLines:
  """WORKDIR/metrics.jsonl, continued on a resume less what came after its checkpoint."""

  def __init__(self, workdir, resume_step: int):
    self._path = workdir / "metrics.jsonl"
    self._remote = paths.is_remote(workdir)
    self._text = (_kept_rows(self._path.read_text(), resume_step)
                  if self._path.exists() else "")
    if self._path.exists():
      paths.write_text(self._path, self._text)  # whole, never half a file
    if not self._remote:
      self._file = open(os.fspath(self._path), "a")

  def rows_at(self, step: int) -> list[dict[str, float]]:
    """The metrics of the kept rows of `step`, in order (what a resume at it replays)."""
    rows = []
    for line in self._text.splitlines():
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        continue
      if isinstance(row, dict) and row.get("step") == step:
        rows.append({k: v for k, v in row.items() if k not in ("step", "kind", "time")})
    return rows

  def write(self, step: int, metrics: dict[str, float]) -> None:
    time = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    line = json.dumps({"step": step, "kind": kind_of(metrics), "time": time, **metrics}) + "\n"
    if self._remote:
      self._text += line
      self._path.write_text(self._text)
    else:
      self._file.write(line)
      self._file.flush()

  def close(self) -> None:
    if not self._remote:
      self._file.close()


def hparams(config) -> dict[str, str | float | bool]:
  """The flat config as TensorBoard's HParams tab takes it: numbers, strings and booleans (a
  list or None as its JSON text)."""
  flat = config_record.flat(config_record.as_json(config))
  return {key: value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
          for key, value in flat.items()}


def _hparams_metrics(config) -> tuple[str, ...]:
  """The scalar tags the HParams tab shows beside the settings."""
  if config.get("objective") == "denoise":
    return ("val_masked_accuracy", "val_masked_loss", "train_loss", "val_loss")
  return ("val_accuracy", "test_accuracy", "val_loss", "train_loss")


class _TensorBoard:
  """Scalars to WORKDIR/tensorboard; with a config, its text and hparams at the start and the
  hparams session's end at close."""

  def __init__(self, workdir, resume_step: int, config=None, restarted: bool = False,
               replay=()):
    from tensorboardX import SummaryWriter  # imported here: only process 0 writes
    self._dir = paths.LocalStaging(workdir / TENSORBOARD_DIR)
    # A resume at step S hides the events from S on (TensorBoard drops them on reading) and
    # writes S's again from metrics.jsonl (`replay`): a run's test events at S, or those after
    # its checkpoint, are never there twice. A restart from step 0 hides all earlier events.
    self._tb = SummaryWriter(self._dir.path, purge_step=resume_step
                             if resume_step else (1 if restarted else None))
    for metrics in replay:
      self.write(resume_step, metrics)
    self._config = config
    if config is not None:
      from tensorboardX import summary
      text = json.dumps(config_record.as_json(config), indent=2, sort_keys=True)
      self._tb.add_text("config", f"```\n{text}\n```", resume_step)
      experiment, start, self._end = summary.hparams(
          hparams(config), {tag: 0.0 for tag in _hparams_metrics(config)})
      # Into this run's own event file (add_hparams would open a sub-run): the file writer
      # that tensorboardX's own add_* methods use.
      for event in (experiment, start):
        self._tb._get_file_writer().add_summary(event, resume_step)
      self.flush()

  def write(self, step: int, metrics: dict[str, float]) -> None:
    for key, value in metrics.items():
      self._tb.add_scalar(key, value, step)
    self.flush()

  def flush(self) -> None:
    self._tb.flush()
    self._dir.sync()

  def close(self) -> None:
    if self._config is not None:
      self._tb._get_file_writer().add_summary(self._end)
    self._tb.close()
    self._dir.close()


def _wandb_run_id(workdir) -> str:
  """The W&B run id of this workdir: drawn by the first start, read back by every resume."""
  path = workdir / WANDB_ID_FILE
  if path.exists():
    return path.read_text().strip()
  run_id = secrets.token_hex(6)  # W&B ids: letters and digits
  paths.write_text(path, run_id + "\n")
  return run_id


class _Wandb:
  """Weights & Biases: the config, then every metrics row at its step. The project is
  $WANDB_PROJECT (default "lra"), the run's name the workdir's, its files under $WANDB_DIR or
  else the (local) workdir; WANDB_MODE=offline writes them without a network (`wandb sync`
  uploads them later)."""

  def __init__(self, workdir, config=None):
    import wandb
    folder = os.environ.get("WANDB_DIR") or (None if paths.is_remote(workdir)
                                             else os.fspath(workdir))
    settings = {} if config is None else {"config": config_record.as_json(config),
                                          "group": config.task,
                                          "tags": [config.task, config.model.name]}
    try:
      self._run = wandb.init(
          project=os.environ.get("WANDB_PROJECT", "lra"), name=workdir.name,
          id=_wandb_run_id(workdir), resume="allow", dir=folder,
          settings=wandb.Settings(console="off", silent=True), **settings)
    except wandb.errors.Error as e:  # not logged in, no network, ...
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise UserError(f"wandb could not start a run ({first}); log in with `wandb login`, or "
                      f"set WANDB_MODE=offline, or leave wandb out of config.writers") from None

  def write(self, step: int, metrics: dict[str, float]) -> None:
    self._run.log(dict(metrics), step=step)

  def close(self) -> None:
    self._run.finish()


class MetricWriter:
  """Writes on process 0 only; other processes get a writer that does nothing. `config`: the
  run's config (config.writers chooses the writers; TensorBoard and W&B record it); None:
  metrics.jsonl and TensorBoard scalars only."""

  def __init__(self, workdir, resume_step: int = 0, config=None):
    self._sinks = []
    if jax.process_index() != 0:
      return
    workdir = paths.resolve(workdir)
    chosen = names(DEFAULT if config is None else config.get("writers", DEFAULT))
    restarted = not resume_step and _set_aside(workdir / "metrics.jsonl")
    self._sinks.append(_JsonLines(workdir, resume_step))
    try:
      if "tensorboard" in chosen:
        replay = self._sinks[0].rows_at(resume_step) if resume_step else []
        self._sinks.append(_TensorBoard(workdir, resume_step, config, restarted, replay))
      if "wandb" in chosen:
        self._sinks.append(_Wandb(workdir, config))
    except BaseException:
      self.close()  # those already open
      raise

  def write(self, step: int, metrics: dict[str, float]) -> None:
    for sink in self._sinks:
      sink.write(step, metrics)

  def close(self) -> None:
    for sink in self._sinks:
      sink.close()
    self._sinks = []
