"""What results.json records of a run beside its figures: the machine (the devices, the GPU's
model where there is one, the host CPU), the code (lra.provenance) and the model's size."""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from lra import hardware
from lra.models.encoder import make_mixer


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


def carried_state(model) -> dict[str, Any] | None:
  """results.json's "carried_state": the numbers per sequence that each layer's mixer carries
  from one position to the next (Mixer.carried_state) at the model's width and longest input,
  and their sum over the layers (Zoology's state size, which counts numbers x 4 bytes); per
  document on a pair task. None for a mixer that does not declare it."""
  encoder = model.encoder
  config = encoder.config
  length = encoder.max_len + int(config.use_cls)
  # Each layer's mixer as its block builds it (a mixer may differ by layer_index).
  layers = [make_mixer(encoder.mixer, encoder.settings, config, layer_index=i,
                       length=length).carried_state(config.emb_dim, length)
            for i in range(config.num_layers)]
  if any(n is None for n in layers):
    return None
  return {"per_layer": [int(n) for n in layers], "total": int(sum(layers)),
          "width": config.emb_dim, "length": length}


def describe(state, software: dict) -> dict[str, Any]:
  """{"hardware", "software", "parameter_count"} of a run whose train state is `state` and
  whose code is `software` (provenance.software(), read when the run started)."""
  return {"hardware": describe_hardware(), "software": software,
          "parameter_count": parameter_count(state.params)}
