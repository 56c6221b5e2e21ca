"""What results.json records of a run beside its figures: the machine (the devices, the GPU's
model where there is one, the host CPU), the code (lra.provenance) and the model's size."""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from lra import hardware, provenance


def describe_hardware() -> dict[str, Any]:
  """The devices, and the host CPU's model and family (XLA's CPU code may round differently on
  another family: tests/test_stored_results.py reads it). gpu_model: the GPU's name as JAX
  reports it (device_kind, e.g. "NVIDIA H100 80GB HBM3"); None off GPUs."""
  device = jax.devices()[0]
  return {"platform": device.platform, "device_kind": device.device_kind,
          "gpu_model": device.device_kind if device.platform == "gpu" else None,
          "device_count": jax.device_count(), "process_count": jax.process_count(),
          "jax_version": jax.__version__, **hardware.describe_cpu()}


def parameter_count(params) -> int:
  """The number of trained values in `params` (every leaf's global size; BatchNorm's running
  statistics are not parameters and are not counted)."""
  return int(sum(np.prod(leaf.shape, dtype=np.int64)
                 for leaf in jax.tree_util.tree_leaves(params)))


def describe(state) -> dict[str, Any]:
  """{"hardware", "software", "parameter_count"} of a run whose train state is `state`."""
  return {"hardware": describe_hardware(), "software": provenance.software(),
          "parameter_count": parameter_count(state.params)}
