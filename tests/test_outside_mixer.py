"""A mixer from outside the repository, through the public commands only (README, "Adding a
model"): a researcher's own folder holds `my_attention.py`, which registers "relu_linear";
`--import` (or LRA_IMPORT) brings it to train.py, the leaderboard and eval.py speed, their own
pytest runs lra.testing.check_mixer on it, its table row is marked not comparable with the
paper and its results.json names the module's file and SHA-256. A module that cannot be found
is one line; an error inside the module keeps its traceback. Each command runs in a
subprocess, so the pytest process never registers it."""
import hashlib
import json
import os
import shlex

import pytest

from tests import commands
from tests.commands import ROOT

# The outside mixer: normalised linear attention with a ReLU feature map, O(L).
MY_ATTENTION = '''\
"""ReLU linear attention: relu(q) (sum_j relu(k_j) v_j^T) / (relu(q) sum_j relu(k_j))."""
import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import rules
from lra.models import registry
from lra.models.common import HeadsMixer, OutputProjection, QKVProjection


@registry.register("relu_linear")
class ReluLinearAttention(HeadsMixer):
  eps: float = rules.setting(1e-6, rules.Float(0.0, open="low"),
                             "keeps a row with no real key finite")

  SUBQUADRATIC = True
  ATTENTION_DROPOUT = False

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    q, k, v = QKVProjection(self.num_heads, self.qkv_dim, self.dtype)(x_BxLxD)
    keep_BxLx1x1 = mask_BxL[:, :, None, None].astype(jnp.float32)
    q = jax.nn.relu(q.astype(jnp.float32))
    k = jax.nn.relu(k.astype(jnp.float32)) * keep_BxLx1x1
    state_BxHxKxV = jnp.einsum("blhk,blhv->bhkv", k, v.astype(jnp.float32))
    norm_BxLxH = jnp.einsum("blhk,bhk->blh", q, k.sum(1)) + self.eps
    y = jnp.einsum("blhk,bhkv->blhv", q, state_BxHxKxV) / norm_BxLxH[..., None]
    return OutputProjection(x_BxLxD.shape[-1], self.dtype)(y.astype(v.dtype))
'''
# The researcher's own test of it.
TEST_MY_ATTENTION = '''\
import lra.testing
import my_attention  # registers "relu_linear"


def test_relu_linear_meets_the_mixer_contract():
  lra.testing.check_mixer("relu_linear")
'''
# The grid's runs: a tiny model, 3 steps.
TINY = ["num_train_steps=3", "eval_every=3", "checkpoint_every=3", "log_every=1",
        "batch_size=8", "eval_batch_size=8", "model.num_layers=1", "model.emb_dim=16",
        "model.qkv_dim=16", "model.mlp_dim=16", "model.num_heads=2", "progress=False",
        "compilation_cache_dir=", "data.max_len=40", "data.generate_if_missing=False"]
# XLA's cheapest compile: these runs are all compiling and hardly any training.
XLA_FLAGS = commands.FAST_COMPILE


@pytest.fixture
def folder(tmp_path):
  """The researcher's own folder, outside the repository, with their module and test."""
  (tmp_path / "my_attention.py").write_text(MY_ATTENTION)
  (tmp_path / "test_my_attention.py").write_text(TEST_MY_ATTENTION)
  return tmp_path


def _run(*args, cwd, env=None, xla_flags=XLA_FLAGS):
  """python ARGS in `cwd`, with the repository on PYTHONPATH (as an installed lra would be),
  by tests/commands.py; the test checks the exit code."""
  env = {"LRA_IMPORT": None, **(env or {})}  # only what a test sets
  return commands.run(*args, cwd=cwd, env=env, xla_flags=xla_flags, expect=None)


_error_line = commands.error_line


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_train_and_leaderboard_import_it_and_its_row_is_marked(folder, listops_dir):
  """The grid's printed command (train.py --import) trains it; the grid with --import then
  finds that run finished and tables it, marked not comparable with the paper."""
  grid = ["-m", "lra.commands.leaderboard", "--import=my_attention", "--models=relu_linear",
          "--tasks=listops", "--preset=cpu", "--root=grid",
          *[f"--config.{item}" for item in TINY + [f"data.data_dir={listops_dir}"]]]
  printed = _run(*grid, "--print_commands", cwd=folder)
  assert printed.returncode == 0, printed.stderr[-3000:]
  (command,) = printed.stdout.splitlines()
  argv = shlex.split(command)
  assert argv[2] == "--import=my_attention" and argv[3].endswith("listops.py:relu_linear,cpu")

  trained = _run(*argv[1:], cwd=folder)  # as the grid runs it: python train.py --import=...
  assert trained.returncode == 0, trained.stderr[-3000:]
  assert "test accuracy" in trained.stdout
  run = folder / "grid" / "listops" / "relu_linear-cpu"
  results = json.loads((run / "results.json").read_text())
  assert results["num_train_steps"] == 3
  # results.json names the exact code of the mixer: the module, its file, the file's hash.
  module = folder / "my_attention.py"
  assert results["mixer_module"] == {
      "name": "my_attention", "file": str(module.resolve()),
      "sha256": hashlib.sha256(module.read_bytes()).hexdigest()}

  tabled = _run(*grid, cwd=folder)
  assert tabled.returncode == 0, tabled.stdout[-2000:] + tabled.stderr[-2000:]
  assert "[1/1] listops/relu_linear-cpu: skipped, finished before" in tabled.stdout
  table = json.loads((folder / "grid" / "table" / "accuracy.json").read_text())
  (row,) = [r for r in table["rows"] if r["model"] == "relu_linear"]
  why = row["cells"]["listops"]["not_comparable"]
  assert any("no paper-comparable config of model 'relu_linear'" in w for w in why), why
  markdown = (folder / "grid" / "table" / "accuracy.md").read_text()
  cell = row["cells"]["listops"]  # 3 steps may leave it at chance, and the cell says so
  shown = f"{cell['ours']:.1f}" + (" (at chance)" if cell["at_chance"] else "")
  assert f"| relu_linear | {shown}* |" in markdown

  # The file edited, the finished run tested again (no steps left): the new hash is recorded.
  module.write_text(MY_ATTENTION + "# tuned\n")
  retested = _run(*argv[1:], cwd=folder)
  assert retested.returncode == 0, retested.stderr[-3000:]
  again = json.loads((run / "results.json").read_text())["mixer_module"]
  assert again["sha256"] == hashlib.sha256(module.read_bytes()).hexdigest()
  assert again["sha256"] != results["mixer_module"]["sha256"]


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_speed_cell_by_the_environment_variable(folder, tmp_path):
  """LRA_IMPORT=FILE.py (as a scheduler would set it) brings it to eval.py speed and to the
  measuring process, which runs in another folder."""
  out = tmp_path / "speed"
  proc = _run(os.path.join(ROOT, "eval.py"), "speed", "--models=relu_linear",
              "--lengths=16", "--batch=2", "--emb_dim=16", "--qkv_dim=16", "--mlp_dim=32",
              "--num_heads=2", "--num_layers=1", "--repeats=1", f"--out={out}", cwd=folder,
              env={"LRA_IMPORT": "./my_attention.py"})
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = {r["model"]: r for r in json.loads((out / "speed.json").read_text())["rows"]}
  assert rows["relu_linear"]["status"] == "ok", rows["relu_linear"]
  assert rows["relu_linear"]["steps_per_s"] > 0
  assert "| relu_linear |" in (out / "speed.md").read_text()


@pytest.mark.commands
def test_its_own_pytest_runs_the_mixer_contract(folder):
  proc = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_attention.py",
              cwd=folder, env={"PYTHONPATH": os.pathsep.join([ROOT, str(folder)])})
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  assert "1 passed" in proc.stdout


COMMANDS = {
    "train": [os.path.join(ROOT, "train.py"), "--config=configs/listops.py:relu_linear,cpu",
              "--workdir=run"],
    "leaderboard": ["-m", "lra.commands.leaderboard", "--models=relu_linear", "--tasks=listops",
                    "--preset=cpu", "--print_commands"],
    "speed": [os.path.join(ROOT, "eval.py"), "speed", "--models=relu_linear"],
}


@pytest.mark.commands
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_module_that_cannot_be_imported_is_one_line(command, folder):
  """Each command with a missing module; train.py also with a missing file and LRA_IMPORT
  (the commands read both through one function)."""
  args = COMMANDS[command]
  line = _error_line(_run(*args, "--import=no_such_module", cwd=folder))
  assert "--import=no_such_module: no module named 'no_such_module'" in line
  assert "PYTHONPATH" in line and str(folder) in line  # where it was looked for
  if command != "train":
    return
  line = _error_line(_run(*args, "--import=/missing/file.py", cwd=folder))
  assert "--import=/missing/file.py: no such file" in line
  line = _error_line(_run(*args, cwd=folder, env={"LRA_IMPORT": "my_attention,no_such_module"}))
  assert "LRA_IMPORT=no_such_module: no module named 'no_such_module'" in line


@pytest.mark.commands
def test_an_error_inside_the_module_keeps_its_traceback(folder):
  """The user's module found, but broken (it imports a package that is missing): a bug, with
  its traceback, never the one-line 'no module' message."""
  (folder / "broken_attention.py").write_text("import no_such_dependency\n")
  proc = _run(*COMMANDS["train"], "--import=broken_attention", cwd=folder)
  assert proc.returncode != 0
  assert not any(l.startswith("error:") for l in proc.stderr.splitlines()), proc.stderr[-2000:]
  assert "Traceback" in proc.stderr and "broken_attention.py" in proc.stderr
  assert "No module named 'no_such_dependency'" in proc.stderr


@pytest.mark.commands
def test_settings_that_do_nothing_or_have_no_rule_are_a_warning_line(folder, listops_dir):
  """The README's mixer with eps a plain field (no rule) trains eps=-1.0 unchecked,
  and config.mask_rate does nothing in a classify run: one warning line each, the run trains."""
  unruled = folder / "unruled.py"
  unruled.write_text(MY_ATTENTION.replace(
      'eps: float = rules.setting(1e-6, rules.Float(0.0, open="low"),\n'
      '                             "keeps a row with no real key finite")', "eps: float = 1e-6"))
  assert "rules.setting" not in unruled.read_text()
  proc = _run(os.path.join(ROOT, "train.py"), f"--import={unruled}",
              "--config=configs/listops.py:relu_linear,cpu", "--workdir=run",
              *[f"--config.{item}" for item in TINY + [f"data.data_dir={listops_dir}"]],
              "--config.model.attention.eps=-1.0", "--config.mask_rate=0.5", cwd=folder)
  assert proc.returncode == 0, proc.stderr[-3000:]
  warnings = [l for l in proc.stdout.splitlines() if l.startswith("warning: ")]
  assert ("warning: config.mask_rate=0.5 does nothing here: only a run with "
          "config.objective='denoise' uses it (this one has 'classify')") in warnings, warnings
  assert ("warning: model 'relu_linear' declares no rule for eps=-1.0: any value "
          "trains unchecked (declare each with lra.rules.setting(default, rule, doc); "
          "lra.testing.check_mixer asks for them)") in warnings, warnings
  ruled = _run(os.path.join(ROOT, "train.py"), "--import=my_attention",
               "--config=configs/listops.py:relu_linear,cpu", "--workdir=run2",
               "--config.model.attention.eps=-1.0", cwd=folder)
  assert ruled.returncode != 0 and "config.model.attention.eps=-1.0" in _error_line(ruled)

