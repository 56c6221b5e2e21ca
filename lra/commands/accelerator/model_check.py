"""The accelerator run's model check: the ListOps Transformer through the trainer's own
gradients and train step, the fused attention (cuDNN; on a CPU the exact chunked one) against
dense from the same parameters on the same batch, and both against a float32 reference."""
from __future__ import annotations

import traceback

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
  """The loss and gradients at the initial parameters as the trainer's train step takes them
  (lra.training.steps.gradients), then `num_steps` steps of that sharded, jitted, donating
  train step; the losses it reports."""
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
    grads, _, _, loss = steps.gradients(model, False, params, state.batch_stats, batch, key)
    return loss, grads

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
