"""train.py and python -m lra.data from the command line: results and one-line errors."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--config.data.max_len=40", "--config.model.num_layers=1", "--config.model.emb_dim=16",
        "--config.model.qkv_dim=16", "--config.model.mlp_dim=32", "--config.batch_size=16",
        "--config.eval_batch_size=16", "--config.num_train_steps=4", "--config.eval_every=2",
        "--config.checkpoint_every=2", "--config.log_every=2",
        "--config.compilation_cache_dir=",  # tests write nothing under the user's home
        "--config.progress=False"]  # last: a test replaces it


def _run(*args, cwd=ROOT, path=()):
  pythonpath = os.pathsep.join([ROOT, *map(str, path)])
  env = {**os.environ, "PYTHONPATH": pythonpath, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=300)


def _error_line(proc):
  lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  return lines[0]


def test_train_runs_prints_accuracy_and_resumes(listops_dir, tmp_path):
  # Run from another directory with a relative --workdir, as a user would.
  args = [os.path.join(ROOT, "train.py"),
          f"--config={os.path.join(ROOT, 'configs', 'listops.py')}:transformer,cpu",
          "--workdir=run", f"--config.data.data_dir={listops_dir}", *TINY]
  first = _run(*args, cwd=tmp_path)
  assert first.returncode == 0, first.stderr[-3000:]
  assert "test accuracy" in first.stdout
  with open(tmp_path / "run" / "results.json") as f:
    results = json.load(f)
  assert results["test_count"] == 70 and results["num_train_steps"] == 4
  assert results["mixer_module"] is None  # a mixer of models/: the git commit names its code
  second = _run(*args[:-len(TINY)], *TINY[:-1], "--config.num_train_steps=6",
                "--config.progress=False", cwd=tmp_path)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resuming from the checkpoint at step 4" in second.stdout


def test_log_file_has_one_line_per_log_interval_and_profile_trace(listops_dir, tmp_path):
  # Output to a file, as under nohup or SLURM: no bar, no \r, one record per log_every.
  # The same run traces steps 2 and 3 with jax.profiler (one run: the suite is long).
  log = tmp_path / "log.txt"
  env = {**os.environ, "PYTHONPATH": ROOT, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
  with open(log, "w") as f:
    proc = subprocess.run(
        [sys.executable, "train.py", "--config=configs/listops.py:transformer,cpu",
         f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}", *TINY[:-1],
         "--config.progress=True", "--config.num_train_steps=6", "--config.log_every=1",
         "--config.eval_every=3", "--config.checkpoint_every=3", "--config.profile_steps=1,3"],
        cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=300)
  text = log.read_text()
  assert proc.returncode == 0, text[-3000:]
  assert "\r" not in text and "Traceback" not in text
  records = [l for l in text.splitlines() if l.startswith("step ")]
  assert [int(re.match(r"step (\d+)/6: train loss \d", l).group(1)) for l in records] == [
      1, 2, 3, 4, 5, 6], text
  assert all("steps/s, ETA " in l for l in records), records
  evals = [l for l in records if "validation" in l]
  assert [l.split("/")[0] for l in evals] == ["step 3", "step 6"], records
  assert "Saving checkpoint" not in text  # Orbax's INFO lines are off without -v
  # Below the TensorBoard folder, as its profile plugin looks for them:
  # LOGDIR/plugins/profile/RUN/HOST.xplane.pb.
  board = tmp_path / "run" / "tensorboard"
  assert f"profiler trace written to {board}/plugins/profile" in text
  traces = [os.path.join(d, f) for d, _, files in os.walk(board / "plugins" / "profile")
            for f in files]
  assert any(t.endswith(".xplane.pb") and os.path.getsize(t) and
             os.path.dirname(os.path.dirname(t)) == str(board / "plugins" / "profile")
             for t in traces), traces


@pytest.mark.slow  # heavy; `pytest -m slow`
def test_second_run_loads_its_programs_from_the_compilation_cache(listops_dir, tmp_path):
  # (Its second run also checks that an explicit --verbosity is respected.)
  cache = tmp_path / "cache"
  args = ["train.py", "--config=configs/listops.py:transformer,cpu",
          f"--config.data.data_dir={listops_dir}", *TINY, f"--config.compilation_cache_dir={cache}",
          "--config.num_train_steps=2"]
  first = _run(*args, f"--workdir={tmp_path / 'first'}")
  assert first.returncode == 0, first.stderr[-3000:]
  entries = sorted(os.listdir(cache))
  assert any(e.startswith("jit_train_step") for e in entries), entries
  second = _run(*args, f"--workdir={tmp_path / 'second'}", "--verbosity=0")
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Saving checkpoint" in second.stderr  # -v is the user's: Orbax's INFO lines, asked for
  # Every program of the repeated run was found: nothing new compiled, nothing new written.
  assert sorted(os.listdir(cache)) == entries


def test_bad_override_key(tmp_path):
  line = _error_line(_run("train.py", "--config=configs/listops.py:transformer",
                          f"--workdir={tmp_path}", "--config.model.no_such_key=3"))
  assert "no_such_key" in line and "must already exist" in line


def test_unknown_model_lists_valid_ones(listops_dir, tmp_path):
  line = _error_line(_run("train.py", "--config=configs/listops.py:no_such_model",
                          f"--workdir={tmp_path}", f"--config.data.data_dir={listops_dir}",
                          *TINY))
  assert "no_such_model" in line and "transformer" in line


def test_unknown_config_option(tmp_path):
  line = _error_line(_run("train.py", "--config=configs/listops.py:transformer,gpu",
                          f"--workdir={tmp_path}"))
  assert "MODEL[,cpu][,paper]" in line


def test_missing_data_names_the_command(tmp_path):
  line = _error_line(_run("train.py", "--config=configs/listops.py:transformer",
                          f"--workdir={tmp_path / 'run'}",
                          f"--config.data.data_dir={tmp_path / 'nothing'}",
                          "--config.data.generate_if_missing=False"))
  assert "python -m lra.data listops --data_dir=" in line


def test_malformed_file_is_reported_and_kept(listops_dir, tmp_path):
  data = tmp_path / "data"
  shutil.copytree(listops_dir, data)
  with open(data / "basic_val.tsv", "a") as f:
    f.write("( [MAX 1 2 ] )\t3\textra\n")
  line = _error_line(_run("train.py", "--config=configs/listops.py:transformer,cpu",
                          f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={data}",
                          *TINY))
  assert "basic_val.tsv" in line and "line 62" in line
  assert (data / "basic_val.tsv").read_text().endswith("extra\n")  # nothing deleted


def test_data_command_generates_listops(tmp_path):
  proc = _run("-m", "lra.data", "listops", f"--data_dir={tmp_path}", "--num_train=50",
              "--num_val=5", "--num_test=5", "--min_length=5", "--max_length=30",
              "--max_depth=3", "--workers=1")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "wrote train" in proc.stdout
  assert len((tmp_path / "basic_train.tsv").read_text().splitlines()) == 51


def test_resuming_with_another_model_size_is_refused(listops_dir, tmp_path):
  args = ["train.py", "--config=configs/listops.py:transformer,cpu", f"--workdir={tmp_path}",
          f"--config.data.data_dir={listops_dir}", *TINY]
  assert _run(*args).returncode == 0
  before = sorted(os.listdir(tmp_path / "checkpoints"))
  line = _error_line(_run(*args, "--config.model.emb_dim=32", "--config.num_train_steps=8"))
  assert "does not fit this config" in line and "config.json" in line
  assert "model.emb_dim 16 -> 32" in line and "--allow_config_change" in line
  assert sorted(os.listdir(tmp_path / "checkpoints")) == before  # nothing saved is lost


# A mixer with a shape bug: [B, L, D] @ [B, L, D] contracts D with L.
BROKEN_MIXER = """\
import flax.linen as nn
from lra.models import registry


@registry.register("test_broken")
class Broken(nn.Module):
  num_heads: int
  qkv_dim: int
  dropout_rate: float = 0.0
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    return x_BxLxD @ x_BxLxD
"""
# train.py itself, run after importing the module that registers the broken mixer.
TRAIN_WITH_BROKEN_MIXER = ("import runpy, sys, broken_mixer; sys.argv[0] = 'train.py'; "
                           "runpy.run_path('train.py', run_name='__main__')")


def test_a_bug_in_a_mixer_keeps_its_traceback(listops_dir, tmp_path):
  (tmp_path / "broken_mixer.py").write_text(BROKEN_MIXER)
  proc = _run("-c", TRAIN_WITH_BROKEN_MIXER, "--config=configs/listops.py:test_broken,cpu",
              f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}", *TINY,
              path=[tmp_path])
  assert proc.returncode != 0
  assert not any(l.startswith("error:") for l in proc.stderr.splitlines()), proc.stderr[-2000:]
  line = BROKEN_MIXER.splitlines().index("    return x_BxLxD @ x_BxLxD") + 1
  assert "Traceback" in proc.stderr and "TypeError" in proc.stderr, proc.stderr[-2000:]
  assert f'broken_mixer.py", line {line}' in proc.stderr, proc.stderr[-2000:]


def test_a_config_error_with_a_registered_mixer_is_one_line(listops_dir, tmp_path):
  # The same code path as above, with a setting the mixer does not have.
  (tmp_path / "broken_mixer.py").write_text(BROKEN_MIXER)
  line = _error_line(_run("-c", TRAIN_WITH_BROKEN_MIXER,
                          "--config=configs/listops.py:test_broken,cpu",
                          f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
                          "--config.model.attention.no_such_setting=1", *TINY, path=[tmp_path]))
  assert "no_such_setting" in line
