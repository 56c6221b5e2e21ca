"""train.py and python -m lra.data from the command line: results and one-line errors."""
import json
import os
import re
import shutil

import pytest

from tests import commands
from tests.commands import NONZERO, ROOT, error_line

TINY = ["--config.data.max_len=40", "--config.model.num_layers=1", "--config.model.emb_dim=16",
        "--config.model.qkv_dim=16", "--config.model.mlp_dim=32", "--config.batch_size=16",
        "--config.eval_batch_size=16", "--config.num_train_steps=4", "--config.eval_every=2",
        "--config.checkpoint_every=2", "--config.log_every=2",
        "--config.compilation_cache_dir=",  # tests write nothing under the user's home
        "--config.progress=False"]  # last: a test replaces it


def test_a_command_gets_one_cpu_device_unless_the_test_asks_for_more():
  """tests/commands.py's environment: the pytest processes' 8 fake devices are not passed on."""
  assert "--xla_force_host_platform_device_count=8" in os.environ["XLA_FLAGS"]
  assert "device_count" not in commands.environment()["XLA_FLAGS"]
  flags = commands.environment(devices=8, xla_flags=commands.FAST_COMPILE)["XLA_FLAGS"].split()
  assert flags.count("--xla_force_host_platform_device_count=8") == 1
  assert set(commands.FAST_COMPILE.split()) <= set(flags)


def _refused(*args, **kwargs) -> str:
  """The one error line of a command that must fail (tests/commands.py's run())."""
  return error_line(commands.run(*args, expect=NONZERO, **kwargs))


@pytest.mark.commands
def test_train_runs_prints_accuracy_resumes_and_refuses_another_model_size(listops_dir,
                                                                           tmp_path):
  # Run from another directory with a relative --workdir, as a user would. (One finished run
  # for both the resume and the refusal: the suite is long.)
  args = [os.path.join(ROOT, "train.py"),
          f"--config={os.path.join(ROOT, 'configs', 'listops.py')}:transformer,cpu",
          "--workdir=run", f"--config.data.data_dir={listops_dir}", *TINY]
  first = commands.run(*args, cwd=tmp_path)
  assert "test accuracy" in first.stdout
  with open(tmp_path / "run" / "results.json") as f:
    results = json.load(f)
  assert results["test_count"] == 70 and results["num_train_steps"] == 4
  assert results["hardware"]["device_count"] == 1  # a command gets 1 device unless it asks
  assert results["mixer_module"] is None  # a mixer of models/: the git commit names its code
  second = commands.run(*args[:-len(TINY)], *TINY[:-1], "--config.num_train_steps=6",
                        "--config.progress=False", cwd=tmp_path)
  assert "Resuming from the checkpoint at step 4" in second.stdout

  # Resuming with another model size is refused, and nothing saved is lost.
  before = sorted(os.listdir(tmp_path / "run" / "checkpoints"))
  line = _refused(*args, "--config.model.emb_dim=32", "--config.num_train_steps=8",
                  cwd=tmp_path)
  assert "does not fit this config" in line and "config.json" in line
  assert "model.emb_dim 16 -> 32" in line and "--allow_config_change" in line
  assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == before


@pytest.mark.commands
def test_log_file_has_one_line_per_log_interval_and_profile_trace(listops_dir, tmp_path):
  # Output to a file, as under nohup or SLURM: no bar, no \r, one record per log_every.
  # The same run traces steps 2 and 3 with jax.profiler (one run: the suite is long).
  log = tmp_path / "log.txt"
  commands.run("train.py", "--config=configs/listops.py:transformer,cpu",
               f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
               *TINY[:-1], "--config.progress=True", "--config.num_train_steps=6",
               "--config.log_every=1", "--config.eval_every=3", "--config.checkpoint_every=3",
               "--config.profile_steps=1,3", output=log)
  text = log.read_text()
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
@pytest.mark.commands
def test_second_run_loads_its_programs_from_the_compilation_cache(listops_dir, tmp_path):
  # (Its second run also checks that an explicit --verbosity is respected.)
  cache = tmp_path / "cache"
  args = ["train.py", "--config=configs/listops.py:transformer,cpu",
          f"--config.data.data_dir={listops_dir}", *TINY, f"--config.compilation_cache_dir={cache}",
          "--config.num_train_steps=2"]
  commands.run(*args, f"--workdir={tmp_path / 'first'}")
  entries = sorted(os.listdir(cache))
  assert any(e.startswith("jit_train_step") for e in entries), entries
  second = commands.run(*args, f"--workdir={tmp_path / 'second'}", "--verbosity=0")
  assert "Saving checkpoint" in second.stderr  # -v is the user's: Orbax's INFO lines, asked for
  # Every program of the repeated run was found: nothing new compiled, nothing new written.
  assert sorted(os.listdir(cache)) == entries


@pytest.mark.commands
def test_bad_override_key(tmp_path):
  line = _refused("train.py", "--config=configs/listops.py:transformer",
                  f"--workdir={tmp_path}", "--config.model.no_such_key=3")
  assert "no_such_key" in line and "must already exist" in line


@pytest.mark.commands
def test_unknown_model_lists_valid_ones(listops_dir, tmp_path):
  line = _refused("train.py", "--config=configs/listops.py:no_such_model",
                  f"--workdir={tmp_path}", f"--config.data.data_dir={listops_dir}", *TINY)
  assert "no_such_model" in line and "transformer" in line
  line = _refused("train.py", "--config=configs/listops.py:performr", f"--workdir={tmp_path}",
                  f"--config.data.data_dir={listops_dir}", *TINY)
  assert "config.model.name='performr' is not a model (did you mean 'performer'?)" in line


@pytest.mark.commands
def test_unknown_config_option(tmp_path):
  line = _refused("train.py", "--config=configs/listops.py:transformer,gpu",
                  f"--workdir={tmp_path}")
  assert "MODEL[,cpu][,paper]" in line


@pytest.mark.commands
def test_missing_data_names_the_command(tmp_path):
  # A model the host holds: the memory check (before the data) would refuse the full size.
  line = _refused("train.py", "--config=configs/listops.py:transformer,cpu",
                  f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={tmp_path / 'nothing'}",
                  "--config.data.generate_if_missing=False", *TINY)
  assert "python -m lra.data listops --data_dir=" in line


@pytest.mark.commands
def test_malformed_file_is_reported_and_kept(listops_dir, tmp_path):
  data = tmp_path / "data"
  shutil.copytree(listops_dir, data)
  with open(data / "basic_val.tsv", "a") as f:
    f.write("( [MAX 1 2 ] )\t3\textra\n")
  line = _refused("train.py", "--config=configs/listops.py:transformer,cpu",
                  f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={data}", *TINY)
  assert "basic_val.tsv" in line and "line 62" in line
  assert (data / "basic_val.tsv").read_text().endswith("extra\n")  # nothing deleted


@pytest.mark.commands
def test_data_command_generates_listops(tmp_path):
  proc = commands.run("-m", "lra.data", "listops", f"--data_dir={tmp_path}", "--num_train=50",
                      "--num_val=5", "--num_test=5", "--min_length=5", "--max_length=30",
                      "--max_depth=3", "--workers=1")
  assert "wrote train" in proc.stdout
  assert len((tmp_path / "basic_train.tsv").read_text().splitlines()) == 51


# A mixer with a shape bug: [B, L, D] @ [B, L, D] contracts D with L.
BROKEN_MIXER = """\
import flax.linen as nn
from lra.models import registry
from lra.models.common import HeadsMixer


@registry.register("test_broken")
class Broken(HeadsMixer):

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    return x_BxLxD @ x_BxLxD
"""
# train.py itself, run after importing the module that registers the broken mixer.
TRAIN_WITH_BROKEN_MIXER = ("import runpy, sys, broken_mixer; sys.argv[0] = 'train.py'; "
                           "runpy.run_path('train.py', run_name='__main__')")


@pytest.mark.commands
def test_a_bug_in_a_mixer_keeps_its_traceback(listops_dir, tmp_path):
  (tmp_path / "broken_mixer.py").write_text(BROKEN_MIXER)
  proc = commands.run("-c", TRAIN_WITH_BROKEN_MIXER,
                      "--config=configs/listops.py:test_broken,cpu",
                      f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
                      *TINY, path=[tmp_path], expect=NONZERO)
  assert not any(l.startswith("error:") for l in proc.stderr.splitlines()), proc.stderr[-2000:]
  line = BROKEN_MIXER.splitlines().index("    return x_BxLxD @ x_BxLxD") + 1
  assert "Traceback" in proc.stderr and "TypeError" in proc.stderr, proc.stderr[-2000:]
  assert f'broken_mixer.py", line {line}' in proc.stderr, proc.stderr[-2000:]


@pytest.mark.commands
def test_a_config_error_with_a_registered_mixer_is_one_line(listops_dir, tmp_path):
  # The same code path as above, with a setting the mixer does not have.
  (tmp_path / "broken_mixer.py").write_text(BROKEN_MIXER)
  line = _refused("-c", TRAIN_WITH_BROKEN_MIXER, "--config=configs/listops.py:test_broken,cpu",
                  f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
                  "--config.model.attention.no_such_setting=1", *TINY, path=[tmp_path])
  assert "no_such_setting" in line
