"""Test setup: 8 fake CPU devices for the in-process sharding tests, strict rank promotion,
and one persistent compilation cache for the whole session (its workers and their
subprocesses). Only a test marked `sharding` meshes over the 8 devices by default: for the
others the trainer's default mesh is one device, as on a CPU machine; the commands a test
starts (tests/commands.py) get one device unless the test asks for more."""
import os
import shutil
import tempfile

# Must be set before JAX initialises its backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Many tests compile the same tiny programs (a train step, an evaluation step), in this process
# and in the train.py / eval.py processes they start: the first compile of each is cached in a
# temporary folder that the pytest process makes (its xdist workers and every subprocess
# inherit the variable) and removes at the end. Every program, however fast it compiled.
_CACHE_OWNER = "LRA_TEST_JAX_CACHE" not in os.environ
if _CACHE_OWNER:
  os.environ["LRA_TEST_JAX_CACHE"] = tempfile.mkdtemp(prefix="lra_test_jax_cache_")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["LRA_TEST_JAX_CACHE"]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"

import jax  # noqa: E402
import pytest  # noqa: E402

from tests import commands  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True)
def _running_test(request):
  """tests/commands.py checks that a test starting a command is marked `commands`."""
  commands._current_test = request.node
  yield
  commands._current_test = None


@pytest.fixture(autouse=True)
def _cheap_compiles_unless_slow(request):
  """A default test compiles many tiny programs (op by op too) and runs each once or twice:
  XLA's expensive passes cost more than they save, as for the commands a test starts
  (tests/commands.py FAST_COMPILE). A slow test trains for longer and keeps them."""
  if request.node.get_closest_marker("slow") is not None:
    yield
    return
  from lra import testing
  with testing.cheap_compiles():
    yield


@pytest.fixture(autouse=True)
def _one_device_unless_sharding(request, monkeypatch):
  """trainer.make_mesh() (the trainer's default: all devices) takes the first device only,
  unless the test is marked `sharding`: an 8-way program of a test that does not test
  sharding costs more CPU time (a sixth more, for the in-process training tests) for nothing.
  An explicit device list is kept as it is."""
  if request.node.get_closest_marker("sharding") is None:
    from lra.training import trainer
    every = trainer.make_mesh
    monkeypatch.setattr(trainer, "make_mesh", lambda devices=None: every(
        jax.devices()[:1] if devices is None else devices))


@pytest.fixture(scope="session")
def listops_dir(tmp_path_factory):
  """Tiny generated ListOps release files, shared by the tests of one worker."""
  from lra.data import listops
  path = tmp_path_factory.mktemp("listops")
  listops.generate_split_files(path, num_train=512, num_val=60, num_test=70, min_length=5,
                               max_length=40, max_depth=3, max_args=4, seed=0, workers=1,
                               progress=False)
  return str(path)


def pytest_unconfigure(config):
  """The process that made the session's compilation cache removes it."""
  if _CACHE_OWNER and not hasattr(config, "workerinput"):
    shutil.rmtree(os.environ["LRA_TEST_JAX_CACHE"], ignore_errors=True)
