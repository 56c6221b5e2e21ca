"""The accelerator run's device parts, each run in its own process by accelerator_run.py:

  python scripts/accel_device.py env OUT.json
  python scripts/accel_device.py attention OUT.json [--dry_run]

`env` describes the machine (device, JAX and its CUDA / cuDNN as JAX reports them, package
versions); `attention` checks the Transformer's attention implementations (dense, chunked,
cuDNN) against each other in bfloat16 with padding. Each writes one JSON file.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script: the repository's packages come from its root
  sys.path.insert(0, ROOT)

PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "flax", "optax", "chex", "orbax-checkpoint", "numpy",
            "ml_collections", "absl-py", "tensorboardX", "tqdm", "etils", "pillow",
            "matplotlib", "tensorflow-datasets")

# Tolerances of the attention check, on max|x - y| / max|y| over the compared entries
# (bfloat16 keeps 8 significant bits: one rounding is up to 0.4%; the implementations round
# the attention weights and accumulate in different orders). Gradients are looser: dq sums
# differences of products and cancels.
TOLERANCE = {"output": 2e-2, "grad": 5e-2}


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


# ----------------------------------------------------------------------- the attention check


# The lengths of the kernel check: a multiple of cuDNN's tiles, and ListOps' 2,000 tokens plus
# CLS, which is not (the kernel pads it inside); the dry run's stand-ins.
LENGTHS = {"real": (2048, 2001), "dry": (96, 77)}


def _inputs(dry_run: bool, length: int):
  """Queries, keys, values (bfloat16), a trailing-padding mask with different real lengths per
  example, and a fixed output cotangent."""
  import jax
  import jax.numpy as jnp
  batch, heads, head_dim = (3, 2, 16) if dry_run else (4, 8, 64)
  keys = jax.random.split(jax.random.PRNGKey(length), 4)
  q, k, v, g = (jax.random.normal(key, (batch, length, heads, head_dim), jnp.float32)
                for key in keys)
  real_B = jnp.array([length, length * 3 // 4, length // 2 + 7, 33][:batch])
  mask_BxL = jnp.arange(length)[None, :] < real_B[:, None]
  shape = dict(batch=batch, length=length, heads=heads, head_dim=head_dim,
               real_lengths=[int(x) for x in real_B])
  return (q, k, v), mask_BxL, g, shape


def _implementations(dry_run: bool) -> dict:
  """name -> f(q, k, v, mask) -> BxLxHxK, the Transformer's implementations of attention."""
  import jax.numpy as jnp
  from lra.models.ops.chunked_attention import chunked_attention
  from lra.models.common import softmax_attention
  from lra.models.mixers.transformer import cudnn_attention
  chunk = 32 if dry_run else 256  # several chunks, and a last chunk that is not full
  chunked = lambda q, k, v, m: chunked_attention(q, k, v, m, query_chunk=chunk,
                                                 key_chunk=chunk)
  # The model's own function; its fallback (taken for a mask with holes) gives NaN here, so a
  # pass proves the fused branch ran.
  fused = lambda q, k, v, m: cudnn_attention(q, k, v, m,
                                             fallback=lambda: jnp.full_like(q, jnp.nan))
  return {"dense": softmax_attention, "chunked": chunked, "cudnn": fused}


def _run(impl, inputs, mask, cotangent, dtype):
  """Output and the gradients of <output, cotangent> (real queries only) wrt q, k, v."""
  import jax
  import jax.numpy as jnp
  query_mask = mask[:, :, None, None]

  def loss(q, k, v):
    out = impl(q, k, v, mask)
    return jnp.sum(jnp.where(query_mask, out.astype(jnp.float32) * cotangent, 0.0)), out

  cast = [x.astype(dtype) for x in inputs]
  fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
  compiled = fn.lower(*cast).compile()
  (_, out), grads = compiled(*cast)
  hlo = compiled.as_text() or ""
  return {"output": out, "dq": grads[0], "dk": grads[1], "dv": grads[2]}, hlo


def _compare(a: dict, b: dict, mask) -> dict:
  """Max abs and normwise-relative errors of a against b: outputs and dq at real queries,
  dk and dv everywhere (padded keys must get zero gradient in both)."""
  import jax.numpy as jnp
  result = {}
  for name in ("output", "dq", "dk", "dv"):
    x, y = a[name].astype(jnp.float32), b[name].astype(jnp.float32)
    if name in ("output", "dq"):
      keep = mask[:, :, None, None]
      x, y = jnp.where(keep, x, 0.0), jnp.where(keep, y, 0.0)
    abs_err = float(jnp.max(jnp.abs(x - y)))
    scale = float(jnp.max(jnp.abs(y)))
    tol = TOLERANCE["output" if name == "output" else "grad"]
    rel = abs_err / scale if scale > 0 else abs_err
    result[name] = {"max_abs": abs_err, "max_rel": rel, "ref_max_abs": scale, "tolerance": tol,
                    "pass": bool(rel <= tol)}
  return result


def attention_check(dry_run: bool) -> dict:
  """The kernels at each of LENGTHS (attention_case), then the model through the trainer
  (model_check)."""
  import jax
  report = {"dtype": "bfloat16", "backend": jax.default_backend(),
            "device_kind": jax.devices()[0].device_kind, "tolerance": TOLERANCE,
            "error_measure": "max|x - y| / max|y| over real queries (outputs, dq) and all "
                             "keys (dk, dv)",
            "cases": [attention_case(dry_run, n) for n in LENGTHS["dry" if dry_run else "real"]],
            "model_check": model_check(dry_run)}
  report["pass"] = (all(c["pass"] for c in report["cases"])
                    and report["model_check"]["pass"] is not False)
  return report


def attention_case(dry_run: bool, length: int) -> dict:
  """Every implementation in bfloat16 against dense bfloat16, and dense bfloat16 against a
  float32 reference (dense attention in float32 at the highest matmul precision)."""
  import jax
  import jax.numpy as jnp
  inputs, mask, cotangent, shape = _inputs(dry_run, length)
  impls = _implementations(dry_run)
  report = {"shape": shape, "implementations": {}, "pairs": []}
  with jax.default_matmul_precision("highest"):
    results = {"reference_f32": _run(impls["dense"], inputs, mask, cotangent, jnp.float32)[0]}
  for name, impl in impls.items():
    if name == "cudnn" and jax.default_backend() != "gpu":
      report["implementations"][name] = {"status": "skipped: cuDNN needs a GPU (backend "
                                                   f"{jax.default_backend()!r})"}
      continue
    try:
      results[name], hlo = _run(impl, inputs, mask, cotangent, jnp.bfloat16)
    except Exception as e:  # reported as a failed implementation, never a crash of the check
      report["implementations"][name] = {"status": f"error: {type(e).__name__}: {str(e)[:300]}"}
      continue
    info = {"status": "ok"}
    if name == "cudnn":  # evidence that the fused kernel is in the program (informative: the
      info["fused_kernel_in_hlo"] = "cudnn" in hlo.lower()  # fallback is compiled beside it)
    report["implementations"][name] = info
  pairs = [("dense", "reference_f32"), ("chunked", "dense"), ("cudnn", "dense"),
           ("chunked", "reference_f32"), ("cudnn", "reference_f32")]
  for a, b in pairs:
    if a in results and b in results:
      errors = _compare(results[a], results[b], mask)
      report["pairs"].append({"pair": f"{a} vs {b}", "errors": errors,
                              "pass": all(e["pass"] for e in errors.values())})
    else:
      missing = a if a not in results else b
      report["pairs"].append({"pair": f"{a} vs {b}", "pass": None,
                              "skipped": report["implementations"].get(missing, {}).get(
                                  "status", "not run")})
  ran = [p["pass"] for p in report["pairs"] if p["pass"] is not None]
  failed = [n for n, i in report["implementations"].items() if i["status"].startswith("error")]
  report["pass"] = bool(ran) and all(ran) and not failed  # an implementation that fails fails
  return report


# The model check's tolerances. Losses: relative to dense bfloat16. Gradients: bfloat16 alone
# puts the whole gradient ~10% (normwise, ||g - g_ref|| / ||g_ref||) from float32's at
# initialisation (seen on a CPU: dense 10.8%, chunked 6.7%), so the fused gradient is held
# against a float32 reference: at most `grad_factor` times dense bfloat16's error, or `grad`.
MODEL_TOLERANCE = {"loss": 1e-2, "grad": 5e-2, "grad_factor": 1.5}


def _relative(x, y) -> float:
  import numpy as np
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  scale = float(np.linalg.norm(y))
  return float(np.linalg.norm(x - y)) / scale if scale > 0 else float(np.linalg.norm(x))


def _model_run(config, task, implementation: str, num_steps: int) -> dict:
  """The trainer's loss and gradients at the initial parameters, then `num_steps` steps of the
  trainer's own sharded, jitted, donating train step; the losses it reports."""
  import jax
  from lra.training import steps, trainer
  config.model.attention.implementation = implementation
  model = trainer.build_model(config, task)
  mesh = trainer.make_mesh()
  train_step, _, sharding = steps.make_steps(model, False, mesh)
  state = trainer.create_state(model, task, config, mesh)  # the same seed: the same parameters
  batch = trainer.to_global(dict(task.splits["train"]), sharding)
  key = jax.random.PRNGKey(1)

  def loss_and_grads(params, batch):
    return jax.value_and_grad(lambda p: steps.train_loss(
        model, False, p, batch_stats=state.batch_stats, batch=batch, rng=key)[0])(params)

  loss, grads = jax.jit(loss_and_grads)(state.params, batch)
  flat_grads = jax.device_get(jax.flatten_util.ravel_pytree(grads)[0])
  compiled = train_step.lower(state, batch, key).compile()
  losses = []
  for _ in range(num_steps):
    state, metrics = compiled(state, batch, key)
    losses.append(float(metrics["loss_sum"]) / float(metrics["count"]))
  return {"loss": float(loss), "grads": flat_grads, "step_losses": losses,
          "hlo": compiled.as_text() or ""}


def _float32(config):
  config = config.copy_and_resolve_references()
  config.model.dtype = "float32"
  return config


def model_check(dry_run: bool, steps: int = 3) -> dict:
  """The ListOps Transformer (the base config; the dry run: its CPU size) at 2,000 tokens plus
  CLS (2,001: no multiple of cuDNN's tiles), trailing padding of different lengths, bfloat16,
  dropout off: the fused implementation (cuDNN; on a CPU, which has none, the exact chunked
  one) against dense, through the trainer's own loss and train step, from the same parameters
  on the same batch."""
  import jax
  import numpy as np
  import jax.flatten_util  # noqa: F401  (jax.flatten_util.ravel_pytree)
  from lra.configs import listops as listops_config
  from lra.data import listops, tasks
  fused = "cudnn" if jax.default_backend() == "gpu" else "chunked"
  length, batch = (76, 4) if dry_run else (2000, 8)
  config = listops_config.get_config("transformer,cpu" if dry_run else "transformer")
  config.data.max_len = length
  config.batch_size = config.eval_batch_size = batch
  config.model.dtype = "bfloat16"
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
  rng = np.random.default_rng(0)
  real = [length, length * 3 // 4, length // 2 + 7, 33] * (batch // 4)
  inputs = rng.integers(1, listops.VOCAB_SIZE, size=(batch, length)).astype(np.int32)
  inputs[np.arange(length)[None, :] >= np.asarray(real)[:, None]] = 0  # trailing padding
  split = {"inputs": inputs, "labels": rng.integers(0, listops.NUM_CLASSES, batch)}
  task = tasks.Task("listops", listops.NUM_CLASSES, listops.VOCAB_SIZE, length, False,
                    {s: split for s in tasks.SPLITS})
  report = {"implementation": fused, "against": "dense", "tokens": length + 1, "batch": batch,
            "real_lengths": real, "dtype": "bfloat16", "steps": steps,
            "sizes": {k: config.model[k] for k in ("num_layers", "emb_dim", "qkv_dim",
                                                   "mlp_dim", "num_heads")},
            "tolerance": MODEL_TOLERANCE}
  try:
    dense = _model_run(config, task, "dense", steps)
    other = _model_run(config, task, fused, steps)
    with jax.default_matmul_precision("highest"):
      reference = _model_run(_float32(config), task, "dense", 0)
  except Exception as e:  # a failed check, not a lost run; its traceback goes to the tails
    traceback.print_exc()
    report.update({"status": f"error: {type(e).__name__}: {str(e)[:300]}", "pass": False})
    return report
  errors = {"loss": abs(other["loss"] - dense["loss"]) / abs(dense["loss"]),
            "step_losses": max(abs(a - b) / abs(b) for a, b in zip(other["step_losses"],
                                                                  dense["step_losses"])),
            "grad_vs_dense": _relative(other["grads"], dense["grads"]),
            "grad_dense_vs_float32": _relative(dense["grads"], reference["grads"]),
            "grad_vs_float32": _relative(other["grads"], reference["grads"])}
  report.update(status="ok", loss={"dense": dense["loss"], fused: other["loss"],
                                   "float32": reference["loss"]},
                step_losses={"dense": dense["step_losses"], fused: other["step_losses"]},
                errors=errors)
  grad_bound = max(MODEL_TOLERANCE["grad_factor"] * errors["grad_dense_vs_float32"],
                   MODEL_TOLERANCE["grad"])
  report["pass"] = bool(errors["loss"] <= MODEL_TOLERANCE["loss"]
                        and errors["step_losses"] <= MODEL_TOLERANCE["loss"]
                        and errors["grad_vs_float32"] <= grad_bound)
  if fused == "cudnn":  # the fused kernel is in the trainer's compiled step
    report["fused_kernel_in_hlo"] = "cudnn" in other["hlo"].lower()
  return report


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("part", choices=("env", "attention"))
  p.add_argument("out", help="the JSON file to write")
  p.add_argument("--dry_run", action="store_true", help="tiny sizes (CPU)")
  args = p.parse_args(argv)
  result = describe() if args.part == "env" else attention_check(args.dry_run)
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1, default=str)
  print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
  main()
