"""The accelerator run's attention check (attention.json): the Transformer's attention
implementations (dense, chunked, cuDNN) against each other in bfloat16 with padding, then the
ListOps model through the trainer (lra.commands.accelerator.model_check)."""
from __future__ import annotations

from lra.commands.accelerator.model_check import model_check

# Tolerances of the attention check, on max|x - y| / max|y| over the compared entries
# (bfloat16 keeps 8 significant bits: one rounding is up to 0.4%; the implementations round
# the attention weights and accumulate in different orders). Gradients are looser: dq sums
# differences of products and cancels.
TOLERANCE = {"output": 2e-2, "grad": 5e-2}


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
