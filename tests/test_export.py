"""Every registered mixer's train step lowers for the accelerators, checked on a CPU.

The project's own train step (lra/training/steps.py make_steps: the loss, its gradient, the
optimizer's update with clipping, weight decay and the mixer's parameter groups) around a tiny
Classifier of each mixer is exported with jax.export for "cuda" and for "tpu". Exporting
lowers to StableHLO for the named platform and needs no such device, so an op with no GPU or
TPU lowering rule (or a custom call with no compatibility guarantee, e.g. jnp.linalg.eig's
on a GPU) fails here, on a CPU machine, not at the first step of a paid accelerator run.
Nothing is compiled: lowering only. The mixers come from registry.names(): a new mixer is
checked with no edit. What lowering cannot see: a mixer that picks its code by
jax.default_backend() at trace time is traced with its CPU choice (e.g. the Transformer's
"cudnn" implementation is refused off a GPU and so is not exported here).
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_collections
import pytest
from jax import export
from jax.extend.source_info_util import summarize

from lra import models
from lra.models import registry
from lra.testing import LENGTH
from lra.training import optim, steps, trainer
from tests import helpers

PLATFORMS = ("cuda", "tpu")
BATCH, VOCAB, CLASSES = 2, 10, 3
# The optimizer's every stage in the graph: clipping, AdamW with weight decay, the schedule.
OPTIMIZER = dict(learning_rate=0.01, warmup_steps=1, num_train_steps=10, schedule="rsqrt",
                 weight_decay=0.01, adam_b1=0.9, adam_b2=0.98, adam_eps=1e-9,
                 grad_clip_norm=1.0)


def train_step_and_arguments(name: str):
  """The project's jitted train step of a tiny classifier of mixer `name` (one device), and
  its arguments (state, batch, dropout key) as ShapeDtypeStructs: nothing is initialised."""
  # One layer (or the mixer's MIN_LAYERS): every op of a layer is in the first; more cost
  # tracing time only.
  model = models.build(helpers.tiny_model(name, num_layers=1), vocab_size=VOCAB,
                       num_classes=CLASSES, max_len=LENGTH, pair=False)
  train, _, _ = steps.make_steps(model, False, trainer.make_mesh(jax.devices()[:1]))
  tx = optim.optimizer(ml_collections.ConfigDict(dict(OPTIMIZER, model=dict(name=name))))

  def init(rng):  # as trainer.create_state builds the state
    variables = model.init(rng, jnp.zeros((1, LENGTH), jnp.int32))
    return trainer.TrainState.create(apply_fn=model.apply, params={"params": variables["params"]},
                                     tx=tx, batch_stats=variables.get("batch_stats", {}))

  key = jax.ShapeDtypeStruct((2,), jnp.uint32)
  batch = {"inputs": jax.ShapeDtypeStruct((BATCH, LENGTH), jnp.int32),
           "labels": jax.ShapeDtypeStruct((BATCH,), jnp.int32)}
  return train, (jax.eval_shape(init, key), batch, key)


def traced_at(jaxpr, primitive: str) -> list[str]:
  """Where (file:line (function), the innermost frame outside JAX) each use of `primitive` in
  a jaxpr was traced, nested jaxprs (jit, scan, cond, custom_vjp bodies) included."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == primitive:
      found.append(summarize(eqn.source_info))
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          found.extend(traced_at(inner, primitive))
  return found


def export_problems(jitted, args, platforms=PLATFORMS) -> list[str]:
  """One line per platform that `jitted` does not export for: the error (it names the op:
  the primitive without a lowering rule, or the custom call) and, for a primitive, where the
  code traced it."""
  try:  # all platforms in one export (one trace); one by one only to say which fails
    export.export(jitted, platforms=platforms)(*args)
    return []
  except Exception:  # any failure to lower: the loop below names the platform and the op
    pass
  problems = []
  for platform in platforms:
    try:
      export.export(jitted, platforms=(platform,))(*args)
    except Exception as e:  # any failure to lower is the finding; its text says which op
      problem = f"{platform}: {type(e).__name__}: {e}"
      op = re.search(r"primitive '([^']+)' not found", str(e))
      if op:
        places = sorted(set(traced_at(jax.make_jaxpr(jitted)(*args).jaxpr, op.group(1))))
        problem += f" (traced at {'; '.join(places) or 'an unknown place'})"
      problems.append(problem)
  return problems


@pytest.mark.parametrize("name", helpers.slow_if_same_kind(registry.names()))
def test_train_step_exports_for_gpu_and_tpu(name):
  train, args = train_step_and_arguments(name)
  problems = export_problems(train, args)
  assert not problems, f"{name}'s train step does not lower for\n" + "\n".join(problems)


def _cpu_only_primitive():
  """A primitive with a CPU lowering rule only: what an op missing on an accelerator is."""
  from jax.extend.core import Primitive
  from jax.interpreters import mlir
  primitive = Primitive("cpu_only_op")
  primitive.def_impl(lambda x: x)
  primitive.def_abstract_eval(lambda x: x)
  mlir.register_lowering(primitive, lambda ctx, x: [x], platform="cpu")
  return primitive


def test_the_check_names_an_op_without_accelerator_lowering():
  primitive = _cpu_only_primitive()
  step = jax.jit(lambda x: jnp.sin(primitive.bind(x)).sum())
  args = (jax.ShapeDtypeStruct((3,), jnp.float32),)
  problems = export_problems(step, args)
  assert [p.split(":")[0] for p in problems] == list(PLATFORMS)
  for problem in problems:
    assert "'cpu_only_op' not found" in problem and "test_export.py" in problem, problem
  assert export_problems(step, args, platforms=("cpu",)) == []
