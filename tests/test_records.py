"""Records for papers: results.json names the code (lra version, git commit, library versions),
the GPU model and the parameter count; TensorBoard gets the config as text and hparams; the
optional W&B writer logs the metrics (tested offline); config.writers is checked in one line;
metrics.jsonl rows carry a kind and a time, and a resumed or rerun run leaves no duplicate
rows."""
import glob
import importlib.util
import json
import os
import pathlib
import struct
import subprocess
import types

import jax
import pytest

from lra import provenance
from lra.data import tasks
from lra.errors import UserError
from lra.training import config_checks, trainer, writers
from tests.tiny import tiny_config

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_software_names_the_checkout_commit_version_and_libraries():
  record = provenance.software(ROOT)
  head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
  assert record["git_commit"] == head and len(head) == 40
  assert isinstance(record["git_dirty"], bool)
  setup = (ROOT / "setup.py").read_text()
  assert f'version="{record["lra_version"]}"' in setup
  assert record["libraries"]["jax"] == jax.__version__
  assert set(provenance.LIBRARIES) <= set(record["libraries"])
  assert record["libraries"]["flax"] and record["libraries"]["orbax-checkpoint"]
  assert record["python"].count(".") == 2


def test_no_commit_outside_a_checkout_nor_when_git_hangs(tmp_path, monkeypatch):
  assert provenance.git_commit(tmp_path) == (None, None)  # not a repository
  # A folder inside a repository that is not its top (a wheel installed in a checkout's venv).
  subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
  (tmp_path / "site").mkdir()
  assert provenance.git_commit(tmp_path / "site") == (None, None)
  # A git that hangs (a network filesystem) is given up after the timeout; the run goes on.
  fake = tmp_path / "bin"
  fake.mkdir()
  (fake / "git").write_text("#!/bin/sh\nsleep 30\n")
  (fake / "git").chmod(0o755)
  monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.setattr(provenance, "GIT_TIMEOUT_S", 0.5)
  assert provenance.git_commit(ROOT) == (None, None)
  monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no git at all
  assert provenance.software(ROOT)["git_commit"] is None


def _events(folder) -> list:
  """Every Event in the TensorBoard event files under `folder` (TFRecord framing: length,
  its CRC, the data, its CRC)."""
  from tensorboardX.proto import event_pb2
  events = []
  for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
    data, pos = pathlib.Path(path).read_bytes(), 0
    while pos + 12 <= len(data):
      (length,) = struct.unpack("<Q", data[pos:pos + 8])
      event = event_pb2.Event()
      event.ParseFromString(data[pos + 12:pos + 12 + length])
      events.append(event)
      pos += 12 + length + 4
  return events


def _scalars(folder) -> list[tuple[str, int, float]]:
  """The scalars TensorBoard shows from `folder`: (tag, step, value) in the order written, less
  those that a later SessionLog START at step S hides (every event before it at a step >= S,
  as TensorBoard's reader purges them)."""
  from tensorboardX.proto import event_pb2
  shown = []
  for event in _events(folder):
    if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
      shown = [s for s in shown if s[1] < event.step]
    elif event.HasField("summary"):
      shown += [(v.tag, event.step, v.simple_value) for v in event.summary.value
                if v.WhichOneof("value") == "simple_value"]
  return shown


def test_a_rerun_or_resume_shows_each_tensorboard_scalar_once(listops_dir, tmp_path):
  """A finished run run again tests again; TensorBoard shows its test events once, and every
  scalar as metrics.jsonl has it, after a resume with more steps too."""
  config = tiny_config(listops_dir, num_train_steps=4)
  workdir = tmp_path / "run"
  for steps in (4, 4, 6):
    config.num_train_steps = steps
    trainer.train_and_evaluate(config, str(workdir))
    shown = _scalars(workdir / "tensorboard")
    assert len({(tag, step) for tag, step, _ in shown}) == len(shown), shown
    rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    expected = {(k, r["step"]): v for r in rows for k, v in r.items()
                if k not in ("step", "kind", "time")}
    assert {(tag, step): v for tag, step, v in shown} == pytest.approx(expected, rel=1e-6)
  assert [step for tag, step, _ in shown if tag == "test_accuracy"] == [6]


def _wandb_records(folder) -> list:
  """The records of the one offline W&B run under `folder`: its run-ID.wandb file is W&B's
  LevelDB-style log (a 7-byte header, then 32 KiB blocks of chunks: CRC, length, type)."""
  from wandb.proto import wandb_internal_pb2
  (path,) = glob.glob(os.path.join(folder, "wandb", "offline-run-*", "run-*.wandb"))
  data = pathlib.Path(path).read_bytes()
  assert data[:4] == b":W&B"
  records, pos, pending, block = [], 7, b"", 32768
  while pos + 7 <= len(data):
    if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
      pos += block - pos % block
      continue
    _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
    pending += data[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):  # a whole record, or its last chunk
      record = wandb_internal_pb2.Record()
      record.ParseFromString(pending)
      records.append(record)
      pending = b""
  return records


def _history(records) -> dict[int, dict[str, float]]:
  rows = {}
  for record in records:
    if record.WhichOneof("record_type") == "history":
      row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
             for item in record.history.item}
      rows.setdefault(row["_step"], {}).update(row)
  return rows


def test_results_name_the_code_the_run_started_with(listops_dir, tmp_path, monkeypatch):
  """A checkout that moves on while a run trains (a commit, a pull) does not relabel the run:
  results.json names the code as it was before the first step, not when the results were
  written."""
  workdir, real = tmp_path / "run", provenance.software

  def software(*args, **kwargs):  # the commit "moves" once the run has saved a checkpoint
    moved = (workdir / "checkpoints").exists()
    return {**real(*args, **kwargs), "git_commit": "later" if moved else "started"}

  monkeypatch.setattr(provenance, "software", software)
  trainer.train_and_evaluate(tiny_config(listops_dir, num_train_steps=2), str(workdir))
  assert (workdir / "checkpoints").exists()
  stored = json.loads((workdir / "results.json").read_text())
  assert stored["software"]["git_commit"] == "started"


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="the wandb extra")
def test_tiny_run_records_code_parameters_config_and_wandb(listops_dir, tmp_path, monkeypatch):
  monkeypatch.setenv("WANDB_MODE", "offline")  # nothing leaves the machine
  monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_files"))
  monkeypatch.setenv("WANDB_SILENT", "true")
  for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):  # not under ~
    monkeypatch.setenv(name, str(tmp_path / name.lower()))
  (tmp_path / "wandb_files").mkdir()
  config = tiny_config(listops_dir, writers="jsonl,tensorboard,wandb", num_train_steps=4)
  workdir = tmp_path / "run"
  results = trainer.train_and_evaluate(config, str(workdir))

  stored = json.loads((workdir / "results.json").read_text())
  assert stored["software"]["git_commit"] == provenance.software()["git_commit"]
  assert stored["software"]["libraries"]["jax"] == jax.__version__
  assert stored["hardware"]["gpu_model"] is None and stored["hardware"]["cpu_model"]
  # The parameter count, counted apart: the shapes of the model's initial parameters.
  facts = tasks.FACTS["listops"]
  model = trainer.build_model(config, types.SimpleNamespace(
      vocab_size=facts.vocab_size, num_classes=facts.num_classes, max_len=40, pair=False,
      per_position=False))
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jax.numpy.zeros((1, 40), int))
  expected = sum(x.size for x in jax.tree_util.tree_leaves(shapes["params"]))
  assert stored["parameter_count"] == expected > 1000

  # TensorBoard: the config as text and as hparams (the session starts, then ends).
  events = _events(workdir / "tensorboard")
  tags = [v.tag for e in events if e.HasField("summary") for v in e.summary.value]
  assert "config/text_summary" in tags
  assert {"_hparams_/experiment", "_hparams_/session_start_info",
          "_hparams_/session_end_info"} <= set(tags)
  text = next(v.tensor.string_val[0].decode() for e in events if e.HasField("summary")
              for v in e.summary.value if v.tag == "config/text_summary")
  assert '"num_train_steps": 4' in text and '"writers": "jsonl,tensorboard,wandb"' in text

  # W&B (offline): the config, and every metrics.jsonl row at its step.
  records = _wandb_records(tmp_path / "wandb_files")
  (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
  assert run.display_name == "run" and run.run_id == (workdir / "wandb_run_id").read_text().strip()
  assert any(item.key == "model" for item in run.config.update)
  history = _history(records)
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  for row in rows:
    for key, value in row.items():
      if key not in ("step", "kind", "time"):
        assert history[row["step"]][key] == pytest.approx(value), (row["step"], key)
  assert history[4]["test_accuracy"] == pytest.approx(results["test_accuracy"])


def test_writers_setting_is_one_line(listops_dir, monkeypatch):
  for bad in ("jsonl,tensorbord", "wandb,wandb"):
    with pytest.raises(UserError, match="config.writers=.* is not valid: a comma list"):
      config_checks.check_config(tiny_config(listops_dir, writers=bad), 1)
  assert writers.names("") == writers.names("jsonl") == ("jsonl",)  # metrics.jsonl always
  assert writers.names(" wandb, jsonl ") == ("jsonl", "wandb")
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "wandb" else real(name, *a))
  with pytest.raises(UserError, match=r'not installed: pip install -e "\.\[wandb\]"'):
    config_checks.check_config(tiny_config(listops_dir, writers="jsonl,wandb"), 1)


def test_only_process_0_writes(tmp_path, monkeypatch):
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  writer = writers.MetricWriter(tmp_path / "run", config=tiny_config(
      str(tmp_path), writers="jsonl,tensorboard,wandb"))
  writer.write(1, {"train_loss": 1.0})
  writer.close()
  assert not (tmp_path / "run").exists()


class _Recorder:
  """Stands in for tensorboardX's SummaryWriter and records how it was made."""
  made: list = []

  def __init__(self, logdir, purge_step=None):
    _Recorder.made.append(purge_step)

  def add_scalar(self, *args):
    pass

  def flush(self):
    pass

  def close(self):
    pass


def test_metrics_rows_have_kind_and_time_and_a_resume_drops_later_rows(tmp_path,
                                                                         monkeypatch):
  import tensorboardX
  monkeypatch.setattr(tensorboardX, "SummaryWriter", _Recorder)
  w = writers.MetricWriter(tmp_path)
  w.write(2, {"train_loss": 1.0, "learning_rate": 0.1})
  w.write(4, {"train_loss": 0.9, "learning_rate": 0.1})
  w.write(4, {"val_loss": 0.8, "val_accuracy": 0.5})
  w.write(6, {"train_loss": 0.7, "learning_rate": 0.1})  # after the checkpoint at 4
  w.close()
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 8, "train_lo')  # a kill in mid-write
  rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()[:4]]
  assert [r["kind"] for r in rows] == ["train", "train", "val", "train"]
  assert all(r["time"].endswith("+00:00") for r in rows)

  w = writers.MetricWriter(tmp_path, resume_step=4)
  w.write(6, {"train_loss": 0.7, "learning_rate": 0.1})
  w.write(8, {"test_accuracy": 0.5, "test_loss": 1.0})
  w.close()
  assert _Recorder.made[-1] == 4  # TensorBoard drops its events from step 4 on (and gets 4's again)
  steps = [(r["step"], r["kind"]) for r in map(json.loads, open(tmp_path / "metrics.jsonl"))]
  assert steps == [(2, "train"), (4, "train"), (4, "val"), (6, "train"), (8, "test")]
  # Run again at its end (a finished run): its test row is written once, not twice.
  writers.MetricWriter(tmp_path, resume_step=8).close()
  steps = [(r["step"], r["kind"]) for r in map(json.loads, open(tmp_path / "metrics.jsonl"))]
  assert steps == [(2, "train"), (4, "train"), (4, "val"), (6, "train")]


@pytest.mark.slow  # two tiny training runs: about 30 s on 2 idle cores
def test_trainer_resume_leaves_one_row_per_step_and_kind(listops_dir, tmp_path):
  config = tiny_config(listops_dir, num_train_steps=4)
  trainer.train_and_evaluate(config, str(tmp_path))
  # A finished run started again resumes at its end and tests again: one test row, not two.
  trainer.train_and_evaluate(config, str(tmp_path))
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  keys = [(r["step"], r["kind"]) for r in rows]
  assert keys == [(2, "train"), (4, "train"), (4, "val"), (4, "test")]
