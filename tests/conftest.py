"""Test setup: 8 fake CPU devices for sharding tests, strict rank promotion."""
import os

# Must be set before JAX initialises its backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def listops_dir(tmp_path_factory):
  """Tiny generated ListOps release files, shared by the tests of one worker."""
  from lra.data import listops
  path = tmp_path_factory.mktemp("listops")
  listops.generate_split_files(path, num_train=512, num_val=60, num_test=70, min_length=5,
                               max_length=40, max_depth=3, max_args=4, seed=0, workers=1,
                               progress=False)
  return str(path)
