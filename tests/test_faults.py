"""Faults of the machine and settings that cannot be right: one line naming the thing at fault
and what to do, a non-zero exit, and nothing already saved damaged."""
import errno
import io
import os
import pathlib
import pwd
import re
import resource
import shutil
import signal
import tempfile

import jax
import jax.numpy as jnp
import pytest

from lra import errors, paths
from lra.errors import UserError
from lra.training import trainer
from lra.rules import SettingError
from tests import commands
from tests.commands import NONZERO, error_line
from tests.test_cli import TINY
from tests.tiny import tiny_config


def _no_data_config(tmp_path, **overrides):
  """A tiny config whose data does not exist: a check that runs before the data is loaded
  is the only one that can name the setting."""
  return tiny_config(str(tmp_path / "no_data"), **overrides)


@pytest.mark.parametrize("key, value, allowed", [
    ("keep_checkpoints", 0, "an integer >= 1"),
    ("keep_checkpoints", -1, "an integer >= 1"),  # reached Orbax as a ValueError
    ("learning_rate", -0.05, "a number > 0.0"),
    ("learning_rate", 0.0, "a number > 0.0"),
    ("data.max_len", 0, "an integer >= 1"),  # blamed the data file
    ("weight_decay", -0.1, "a number >= 0.0"),
    ("warmup_steps", -1, "an integer >= 0"),
    ("adam_b1", 1.0, "a number >= 0.0 and < 1.0"),
    ("adam_eps", 0.0, "a number > 0.0"),
    ("grad_clip_norm", -1.0, "a number >= 0.0"),
    ("ssm_learning_rate", -1.0, "a number >= 0.0"),
    ("eval_batch_size", 0, "an integer >= 1"),
    ("log_every", 0, "an integer >= 1"),
    ("schedule", "linearly", "one of 'rsqrt', 'cosine', 'constant', 'linear'"),
])
def test_a_setting_that_cannot_be_right_is_refused_before_the_data(tmp_path, key, value,
                                                                    allowed):
  config = _no_data_config(tmp_path, **{key: value})
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(config, str(tmp_path / "run"))
  assert str(e.value) == f"config.{key}={value!r} is not valid: {allowed}"
  assert not (tmp_path / "run").exists()  # refused before anything was made


def test_a_mixer_setting_the_model_does_not_take_lists_the_valid_ones(tmp_path):
  config = _no_data_config(tmp_path, model="local")
  config.model.attention["window"] = 3
  with pytest.raises(SettingError) as e:
    trainer.train_and_evaluate(config, str(tmp_path / "run"))
  assert str(e.value) == ("model 'local' does not take setting(s) window in "
                          "config.model.attention; it takes: block_size, overlap")


@pytest.mark.commands
def test_command_line_config_twice_and_unknown_mixer_setting_are_one_line(tmp_path):
  # (No data to find: on code that took the last --config, no run starts.)
  twice = error_line(commands.run("train.py", "--config=configs/listops.py:transformer",
                                  "--config=configs/listops.py:local", f"--workdir={tmp_path}",
                                  f"--config.data.data_dir={tmp_path / 'none'}",
                                  "--config.data.generate_if_missing=False", expect=NONZERO))
  assert twice == ("error: --config is given 2 times; give it once (change single settings "
                   "with --config.KEY=VALUE)")
  setting = error_line(commands.run("train.py", "--config=configs/listops.py:local,cpu",
                                    f"--workdir={tmp_path}", "--config.model.attention.window=3",
                                    expect=NONZERO))
  assert setting == ("error: model 'local' does not take setting(s) window in "
                     "config.model.attention; it takes: block_size, overlap")


def test_a_workdir_that_is_a_file_is_refused_and_kept(listops_dir, tmp_path):
  path = tmp_path / "notes.txt"
  path.write_text("mine")
  with pytest.raises(UserError, match=f"the workdir {path} is a file, not a folder; choose "
                                      f"another --workdir"):
    trainer.train_and_evaluate(tiny_config(listops_dir), str(path))
  assert path.read_text() == "mine"


def _refusal(workdir) -> str:
  from lra.training import faults  # new: imported here, so the other tests run on older code
  try:
    faults.prepare_workdir(paths.resolve(workdir))
  except UserError as e:
    return str(e)
  return "accepted"


def _as_nobody(fn, *args) -> str:
  """fn(*args) in a forked child that runs as the user nobody (root writes anywhere, and
  nobody may not run this Python, which can live under /root); returns its result."""
  nobody = pwd.getpwnam("nobody")
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:  # no JAX in the child: only the workdir check runs there
    try:
      os.close(read)
      os.setgid(nobody.pw_gid)
      os.setuid(nobody.pw_uid)
      os.write(write, fn(*args).encode())
    except BaseException as e:  # report anything to the parent: the child must not return
      os.write(write, repr(e).encode())
    finally:
      os._exit(0)
  os.close(write)
  with os.fdopen(read) as f:
    out = f.read()
  os.waitpid(pid, 0)
  return out


def test_a_read_only_workdir_is_refused_before_anything_is_written():
  base = tempfile.mkdtemp()  # not under pytest's folder, which only its owner may enter
  try:
    os.chmod(base, 0o755)
    run = os.path.join(base, "run")
    os.mkdir(run, 0o555)  # read-only for everyone but root
    if os.geteuid() != 0:
      refusal = _refusal(run)
    elif all(os.stat(p).st_mode & 0o001 for p in pathlib.Path(base).parents):
      refusal = _as_nobody(_refusal, run)
    else:
      pytest.skip(f"as root, and nobody cannot reach {base}: permissions not enforceable")
    assert refusal == (f"cannot write into the workdir {run}: Permission denied; make it "
                       f"writable (and readable) for this user, or choose another folder")
    assert os.listdir(run) == []
  finally:
    shutil.rmtree(base)


def test_too_little_disk_for_the_checkpoints_is_refused_before_orbax_writes(
    listops_dir, tmp_path, monkeypatch):
  free = 100 * 2**10
  real = shutil.disk_usage
  monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=free))
  run = tmp_path / "run"
  with pytest.raises(UserError, match=r"the disk of the workdir .* has 100.0 KB free, but this "
                                      r"run's checkpoints need about .* more \(2 \+ 2 of"):
    trainer.train_and_evaluate(tiny_config(listops_dir, keep_checkpoints=2), str(run))
  assert not (run / "checkpoints").exists()


def test_a_file_size_limit_below_an_array_is_refused(listops_dir, tmp_path, monkeypatch):
  real = resource.getrlimit
  monkeypatch.setattr(resource, "getrlimit", lambda which: (
      (512, 512) if which == resource.RLIMIT_FSIZE else real(which)))
  with pytest.raises(UserError, match=r"the file size limit \(ulimit -f\) is 0.5 KB, but a "
                                      r"checkpoint of this model writes an array of"):
    trainer.train_and_evaluate(tiny_config(listops_dir), str(tmp_path / "run"))


def _train_limited(listops_dir, workdir, file_size_limit=None, expect=0):
  def limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit,) * 2)
  # No compilation cache under a file size limit: its entries would fail to be written (with a
  # warning each) or not, as other tests filled the session's cache first.
  return commands.run(
      "train.py", "--config=configs/listops.py:transformer,cpu", f"--workdir={workdir}",
      f"--config.data.data_dir={listops_dir}", *TINY, expect=expect,
      env={"JAX_COMPILATION_CACHE_DIR": None}, preexec_fn=limit if file_size_limit else None)


@pytest.mark.commands
def test_a_write_failing_inside_orbax_is_one_line(listops_dir, tmp_path):
  # ulimit -f: Python ignores SIGXFSZ, so a write past the limit is EFBIG, raised in Orbax's
  # threads (today over 800 lines on stderr). 20 KB passes every check before the first save.
  proc = _train_limited(listops_dir, tmp_path / "run", 20_000, expect=1)
  assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
  # The file is named where the error names it (Orbax's threads race to report first).
  assert re.fullmatch(f"error: ({re.escape(str(tmp_path / 'run'))}/.*: )?File too large; raise "
                      r"the file size limit \(ulimit -f unlimited\), then run the same command "
                      r"again\n", proc.stderr), proc.stderr


@pytest.mark.slow
@pytest.mark.commands
def test_after_a_write_failed_inside_orbax_the_same_command_finishes_the_run(listops_dir,
                                                                             tmp_path):
  _train_limited(listops_dir, tmp_path, 20_000, expect=1)
  _train_limited(listops_dir, tmp_path)
  assert (tmp_path / "results.json").exists()


def test_environment_faults_are_told_from_bugs():
  full = OSError(errno.ENOSPC, "No space left on device", "/w/metrics.jsonl")
  assert errors.environment_fault(full) == ("/w/metrics.jsonl: No space left on device; free "
                                            "space there (or use another disk), then run the "
                                            "same command again")
  # TensorStore (under Orbax) reports an OS error as a ValueError naming its code.
  store = ValueError('RESOURCE_EXHAUSTED: Error writing local file "/w/best/2/_sharding": '
                     "Failed to write 9067 bytes: No space left on device [os_error_code='28']")
  assert errors.environment_fault(store).startswith("/w/best/2/_sharding: No space left")
  wrapped = RuntimeError("save failed")
  wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system")
  assert errors.environment_fault(wrapped).startswith("Read-only file system; choose a folder")
  renamed = OSError(errno.EISDIR, "Is a directory", "/o/a.md.tmp", None, "/o/a.md")
  assert errors.environment_fault(renamed) == ("/o/a.md.tmp -> /o/a.md: Is a directory; a file "
                                               "was expected, not a folder: choose another path")
  for bug in (ValueError("shapes (3,) and (4,) differ"), OSError(errno.ENOENT, "gone", "/x"),
              KeyError("step")):
    assert errors.environment_fault(bug) is None


def test_out_of_memory_names_the_sizes_and_what_it_needs(listops_dir):
  # A real XLA allocation failure: 256 TB, beyond any machine's address space.
  with pytest.raises(jax.errors.JaxRuntimeError) as e:
    jax.jit(lambda x: jnp.broadcast_to(x, (2**46,)) + 1)(jnp.float32(1)).block_until_ready()
  from lra.training import faults
  config = tiny_config(listops_dir, **{"data.max_len": 10**7})
  assert faults.out_of_memory(e.value, config) == (
      "out of host memory (XLA could not allocate 256.0 TB) with config.data.max_len=10000000, "
      "config.batch_size=16 and the model config.model.name='transformer'; lower these, or "
      "the model's sizes (config.model.emb_dim, mlp_dim, num_layers), or pick a mixer that "
      "needs less memory")
  assert faults.out_of_memory(ValueError("Out of memory allocating 5 bytes"), config) is None


@pytest.mark.slow
@pytest.mark.commands
def test_an_absurd_max_len_runs_out_of_memory_in_one_line(listops_dir, tmp_path):
  # An address-space limit makes the failure the same on every machine (and spares the rest).
  def limit():
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))
  proc = commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
                      *TINY, "--config.data.max_len=20000", expect=NONZERO, preexec_fn=limit)
  line = error_line(proc)
  assert proc.stderr.count("\n") == 1, proc.stderr[-3000:]
  assert line.startswith("error: out of host memory (")  # XLA's or numpy's allocation
  assert "config.data.max_len=20000, config.batch_size=16" in line


@pytest.mark.commands
def test_ctrl_c_finishes_the_step_saves_and_says_so_in_one_line(listops_dir, tmp_path):
  proc = commands.start(
      "train.py", "--config=configs/listops.py:transformer,cpu", f"--workdir={tmp_path}",
      f"--config.data.data_dir={listops_dir}", *TINY, "--config.num_train_steps=300",
      "--config.log_every=3", "--config.eval_every=100", "--config.checkpoint_every=1000")
  first = proc.stdout.readline()
  # checkpoint_every above num_train_steps (so only Ctrl-C saves) is warned about first.
  assert first.startswith("warning: config.num_train_steps=300 is at or below "
                          "config.checkpoint_every=1000"), first + proc.stderr.read()[-3000:]
  first = proc.stdout.readline()
  assert first.startswith("step 3/"), first + proc.stderr.read()[-3000:]
  proc.send_signal(signal.SIGINT)
  _, err = commands.finish(proc, expect=130)
  assert err.count("\n") == 1, err[-3000:]
  assert err.startswith("error: stopped by SIGINT after step ")
  assert "to resume, run the same command again" in err
  assert os.listdir(tmp_path / "checkpoints")  # the step it stopped at


@pytest.mark.commands
def test_the_data_command_reports_an_unusable_folder_in_one_line(tmp_path):
  (tmp_path / "file").write_text("")
  line = error_line(commands.run("-m", "lra.data", "listops",
                                 f"--data_dir={tmp_path / 'file' / 'x'}", "--num_train=50",
                                 "--num_val=5", "--num_test=5", "--min_length=5",
                                 "--max_length=30", "--max_depth=3", "--workers=1",
                                 expect=NONZERO))
  assert "Not a directory; a folder was expected" in line


class _FullDisk(io.BytesIO):
  """A file on a full disk: its write() fails as the OS fails it, naming no file."""

  def write(self, data):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_writing_the_sweep_chart_names_the_chart(tmp_path, monkeypatch,
                                                                   capsys):
  from tests.test_sweep import EVAL, _point_run
  for lr, val in ((1e-3, 0.5), (3e-3, 0.6)):  # one sweep of two points
    _point_run(tmp_path / "runs", "s5", 0, lr, 16, val, val)
  real = open
  monkeypatch.setattr(paths, "open", lambda file, mode="r", **kwargs: _FullDisk() if str(
      file).endswith(".png") else real(file, mode, **kwargs), raising=False)
  with pytest.raises(SystemExit) as exit_info:
    EVAL.main(["accuracy", str(tmp_path / "runs"), f"--out={tmp_path / 'out'}"])
  chart = tmp_path / "out" / "sweep_learning_rate.png"
  assert exit_info.value.code == 1
  assert capsys.readouterr().err.splitlines()[-1] == (
      f"error: {chart}: No space left on device; free space there (or use another disk), then "
      f"run the same command again")
  assert (tmp_path / "out" / "accuracy.md").exists() and not chart.exists()
  assert not [n for n in os.listdir(tmp_path / "out") if n.startswith(paths.TEMP_PREFIX)]


def test_a_refused_run_leaves_no_workdir_it_made_and_keeps_one_it_found(tmp_path):
  """Refused once the workdir is made and locked, before anything is saved there: the release
  Pathfinder folder given as data_dir (refused as the data loads), a Mamba-2 head_dim that does
  not divide its width (refused as the parameters are made)."""
  from tests.test_release_pathfinder import _config, _release
  release = _config(_release(tmp_path / "data"), generate_if_missing=False)
  release.model.update(num_layers=1, emb_dim=16, qkv_dim=16, mlp_dim=16, num_heads=2)
  release.batch_size = release.eval_batch_size = 8
  release.compilation_cache_dir = ""
  new = tmp_path / "runs" / "new"
  with pytest.raises(UserError, match="--release_dir="):
    trainer.train_and_evaluate(release, str(new))
  assert not new.exists() and os.listdir(tmp_path / "runs") == []  # no folder holding .lock
  heads = _no_data_config(tmp_path, model="mamba2", **{"model.attention.head_dim": 48})
  with pytest.raises(SettingError, match="head_dim=48 is not valid"):
    trainer.train_and_evaluate(heads, str(new))
  assert not new.exists()
  kept = tmp_path / "runs" / "mine"  # a folder that was there: kept, with what it holds
  kept.mkdir()
  (kept / "notes.txt").write_text("mine")
  with pytest.raises(SettingError, match="head_dim=48 is not valid"):
    trainer.train_and_evaluate(heads, str(kept))
  assert (kept / "notes.txt").read_text() == "mine"
