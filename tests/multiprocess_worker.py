"""One process of a two-process CPU run (run by test_multiprocess.py).

argv: process_id num_processes port data_dir workdir
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

from lra.training import trainer  # noqa: E402
from tests.tiny import tiny_config  # noqa: E402


def main():
  process_id, num_processes, port = map(int, sys.argv[1:4])
  data_dir, workdir = sys.argv[4:6]
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"127.0.0.1:{port}", num_processes, process_id)
  assert jax.device_count() == 2 * num_processes and jax.local_device_count() == 2
  trainer.train_and_evaluate(tiny_config(data_dir), workdir)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
