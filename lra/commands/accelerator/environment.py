"""The accelerator run's env part (env.json): the device, the platform, JAX and its CUDA /
cuDNN as JAX reports them, the package versions, the host."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import traceback

PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "flax", "optax", "chex", "orbax-checkpoint", "numpy",
            "ml_collections", "absl-py", "tensorboardX", "tqdm", "etils", "pillow",
            "matplotlib", "tensorflow-datasets")


def _versions() -> dict:
  found = {}
  for name in PACKAGES:
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


def _cuda_versions() -> dict:
  """CUDA and cuDNN versions as jaxlib (or its CUDA plugin) reports them; whatever exists."""
  out = {}
  try:
    from jax._src.lib import cuda_versions  # None without a CUDA plugin
  except Exception as e:  # private module: its name changes between JAX versions
    return {"error": f"{type(e).__name__}: {e}"}
  if cuda_versions is None:
    return {"note": "jaxlib reports no CUDA (no CUDA plugin loaded)"}
  for name in ("cuda_runtime_get_version", "cuda_runtime_build_version",
               "cudnn_get_version", "cudnn_build_version", "cuda_driver_get_version",
               "cublas_get_version", "cusparse_get_version", "cufft_get_version",
               "cupti_get_version", "cusolver_get_version"):
    func = getattr(cuda_versions, name, None)
    if func is not None:
      try:
        out[name.replace("_get_version", "")] = func()
      except Exception as e:  # a library that is not there
        out[name.replace("_get_version", "")] = f"{type(e).__name__}: {e}"
  return out


def _nvidia_smi() -> str | None:
  try:
    proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                           "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return proc.stdout.strip() or None


def describe() -> dict:
  """The environment: device, platform, versions, host."""
  import jax
  try:
    devices = jax.devices()
  except Exception:  # noqa: BLE001  (the traceback is printed; the last line says what it means)
    traceback.print_exc()
    plugins = [f"{k} {v}" for k, v in _versions().items() if k.startswith("jax-") and v]
    print(f"JAX could not start the platform {os.environ.get('JAX_PLATFORMS')!r} "
          f"(JAX_PLATFORMS); JAX plugins installed: {', '.join(plugins) or 'none'}",
          file=sys.stderr)
    sys.exit(1)
  device = devices[0]
  env = {"device_kind": device.device_kind, "device_count": len(devices),
         "platform": device.platform, "default_backend": jax.default_backend()}
  for attr in ("compute_capability", "core_count", "num_cores"):
    value = getattr(device, attr, None)
    if value is not None:
      env[attr] = value if isinstance(value, (int, float, str)) else str(value)
  try:
    env["platform_version"] = device.client.platform_version
  except Exception as e:  # an attribute older or newer clients lack
    env["platform_version"] = f"{type(e).__name__}: {e}"
  try:
    stats = device.memory_stats() or {}
    env["memory_bytes_limit"] = stats.get("bytes_limit")
  except Exception:  # CPU devices have no memory stats
    env["memory_bytes_limit"] = None
  env["cuda"] = _cuda_versions()
  env["nvidia_smi"] = _nvidia_smi()
  env["versions"] = _versions()
  env["python"] = sys.version.split()[0]
  env["hostname"] = socket.gethostname()
  env["machine"] = platform.machine()
  env["cpu_count"] = os.cpu_count()
  env["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  try:
    env["environment_info"] = jax.print_environment_info(return_string=True)
  except Exception as e:  # an older JAX without return_string
    env["environment_info"] = f"{type(e).__name__}: {e}"
  return env
