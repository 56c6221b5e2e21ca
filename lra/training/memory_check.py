"""Whether a run's train step fits this machine's memory, known before any data is made or
loaded: XLA's memory analysis of the real train step, compiled on the shapes of the batch it
will get, against the memory the host has available (CPU) or the device holds (GPU, TPU).

The step is compiled through its own jit, on the batch's dtypes as the loaders give them, so
the first training step finds it compiled: the check costs no second compile.
"""
from __future__ import annotations

import time

import jax
import numpy as np
import psutil  # a dependency of orbax-checkpoint, so always installed with lra

from lra.data import tasks
from lra.errors import UserError
from lra.training import faults


def task_shapes(config) -> tasks.Task:
  """The task as its loader will give it, without its data (a Task with no splits): its
  sizes from the config and tasks.FACTS, for building the model and its steps before the
  data is made or loaded. The trainer checks the loaded task against it (`same_shapes`)."""
  data = config.data
  if config.task == "image":
    from lra.data import image
    length = image.SEQ_LEN  # CIFAR-10's 32 x 32 pixels, whatever the config
  elif "size" in data:  # Pathfinder, Path-X, Path-256: size x size pixels
    length = data.size * data.size
  elif tasks.FACTS[config.task].module == "formal.loader":  # the widest split's, from lengths
    from lra.data.formal import loader
    length = loader.max_len(config.task, data)
  else:
    length = data.max_len
  # Pixels are real tokens unless config.data.black_is_padding; MQAR has no padding.
  padding = data.get("black_is_padding", config.task != "mqar")
  shapes = tasks.Task.of(config.task, length, {}, padding=padding)
  if "vocab_size" in data:  # MQAR: the generator's vocabulary (FACTS: the paper's)
    shapes.vocab_size = shapes.num_classes = data.vocab_size
  return shapes


def same_shapes(task: tasks.Task, shapes: tasks.Task) -> tasks.Task:
  """The loaded `task`, once it is known to be what the model was built for (`shapes`)."""
  fields = ("num_classes", "vocab_size", "max_len", "pair", "padding", "per_position")
  differ = {f: (getattr(shapes, f), getattr(task, f)) for f in fields
            if getattr(shapes, f) != getattr(task, f)}
  assert not differ, f"task_shapes disagrees with the loaded {task.name} task: {differ}"
  return task


def batch_shapes(config, shapes: tasks.Task, sharding) -> dict[str, jax.ShapeDtypeStruct]:
  """A global train batch as the trainer passes it to the train step: token ids, labels, the
  second input of a pair task, explicit masks where token 0 is a real value, no labels for a
  denoise run. The dtypes are the loaders' (the narrowest unsigned integer of the vocabulary
  for the ids, int16 for a per-position task's labels, else int32), so that the first
  training step finds this compile; where a loader gives others, it compiles its own."""
  b, n = config.batch_size, shapes.max_len
  of = lambda dtype, *shape: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
  ids = np.min_scalar_type(shapes.vocab_size - 1)
  batch = {"inputs": of(ids, b, n)}
  if config.get("objective") != "denoise":
    batch["labels"] = of(np.int16, b, n) if shapes.per_position else of(np.int32, b)
  if shapes.pair:
    batch["inputs2"] = of(ids, b, n)
  if not shapes.padding:  # trainer.add_masks
    batch["mask"] = of(np.bool_, b, n)
    if shapes.pair:
      batch["mask2"] = of(np.bool_, b, n)
  return batch


def step_bytes(compiled) -> int:
  """Bytes one device holds while the compiled step runs: its arguments, outputs and
  temporaries (XLA's memory analysis), a donated argument that an output reuses counted once."""
  m = compiled.memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)


def room(state, sharding) -> tuple[str, int, int] | None:
  """(where, bytes the step may use, how many of this process's devices run it at once): the
  device's allocator limit (GPU, TPU), or the host's available memory plus what the state
  already holds there (CPU: the mesh's local devices share it); None where unknown."""
  devices = sharding.addressable_devices  # this process's devices of the run's mesh
  device = min(devices, key=lambda d: d.id)
  stats = device.memory_stats() if device.platform != "cpu" else None
  if stats and stats.get("bytes_limit"):
    return "device", int(stats["bytes_limit"]), 1
  if device.platform != "cpu":
    return None
  held = sum(shard.data.nbytes for leaf in jax.tree_util.tree_leaves(state)
             for shard in leaf.addressable_shards)
  return "host", psutil.virtual_memory().available + held, len(devices)


def check(config, train_step, state, shapes: tasks.Task, sharding, resumed: bool) -> float:
  """Compiles `train_step` (the trainer's jitted step, with the fresh state) on the shapes of
  a train batch and refuses, in one line with both sizes and the fix, a run whose step needs
  more memory than this machine has. `resumed`: the step will get a restored checkpoint's
  state, whose step counter is a plain int32 (the fresh state's is weakly typed). Returns the
  compile's seconds: training time, as when the first step compiled (max_train_time_s)."""
  if not hasattr(train_step, "lower"):  # not jax.jit's (a test's wrapper): nothing to compile
    return 0.0
  began = time.monotonic()
  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)  # as the trainer's
  given = state.replace(step=jax.ShapeDtypeStruct((), np.int32, sharding=state.step.sharding)
                        ) if resumed else state
  compiled = train_step.lower(given, batch_shapes(config, shapes, sharding), rng).compile()
  seconds = time.monotonic() - began
  found = room(state, sharding)
  if found is None:
    return seconds
  where, limit, devices = found
  need = step_bytes(compiled) * devices
  if need <= limit:
    return seconds
  has = "'s allocator has" if where == "device" else " has"
  what = (f"the train step needs {faults.size_text(need)} by XLA's memory analysis of the "
          f"compiled step; the {where}{has} {faults.size_text(limit)} available")
  raise UserError(faults.memory_message(where, what, config) +
                  f", or a smaller preset (--config=configs/{config.task}.py:"
                  f"{config.model.name},cpu)")
