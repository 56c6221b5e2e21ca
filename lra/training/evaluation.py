"""Validation and test passes: every example once (or config.eval_max_examples of them), a
progress line during a long pass, and the time evaluation takes (results.json's "evaluation").
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from lra.data import batches
from lra.training import per_length, progress

# Which rows a capped evaluation reads: one fixed draw, the same for every run, seed and model
# (so their accuracies are on the same examples), uniform over the split whatever its order (a
# split may be stored sorted by class or by source, as IMDb's folders are, so its first N rows
# need not be a fair sample).
SAMPLE_SEED = 20_250_101
PROGRESS_EVERY_S = 15.0  # a pass longer than this says how far it is, every this many seconds
_clock = time.monotonic  # tests replace it


def rows(num: int, max_examples: int) -> np.ndarray | None:
  """The rows (ascending: memory-mapped files read fastest in order) that an evaluation capped
  at `max_examples` reads of a split of `num` examples; None: all of them (0 = no cap)."""
  if not max_examples or max_examples >= num:
    return None
  return np.sort(np.random.default_rng(SAMPLE_SEED).choice(num, max_examples, replace=False))


def capped(split: dict[str, Any], max_examples: int) -> dict[str, Any]:
  """The part of `split` an evaluation capped at `max_examples` reads."""
  chosen = rows(len(split["labels"]), max_examples)
  return split if chosen is None else batches.take(split, chosen)


def evaluate(eval_step, state, split: dict[str, Any], batch_size: int,
             prepare: Callable[[dict], dict], max_examples: int = 0, name: str = "evaluation",
             say: Callable[[str], None] | None = None) -> dict[str, Any]:
  """One pass over `split` (capped at `max_examples`; batches.eval_batches pads the last batch
  and masks it, so each example counts once). `prepare`: a host batch -> the step's input.
  `say`: where the progress lines of a long pass go (None: nowhere). Returns the mean loss and
  accuracy, "count" (what the step counted: examples, or positions / masked tokens), the
  "examples" read of the split's "available", the pass's "seconds" and of them "compile_s",
  those of its first call: it returns once the step is compiled (the run's first pass) and
  runs on while the next batch is made (JAX dispatches asynchronously). A split with "lengths"
  adds "per_length" (lra.training.per_length.rows)."""
  start = last = _clock()
  available = len(split["labels"])
  split = capped(split, max_examples)
  examples = len(split["labels"])
  total = None
  for i, batch in enumerate(batches.eval_batches(split, batch_size)):
    called = _clock()
    sums = eval_step(state, prepare(batch))
    if i == 0:
      compile_s = _clock() - called
    previous, total = total, (sums if total is None else
                              jax.tree_util.tree_map(jnp.add, total, sums))
    # One batch in flight: the host does not queue the whole split ahead of the device (its
    # memory, and the progress lines would come after the work they count).
    jax.block_until_ready(previous)
    seen = min((i + 1) * batch_size, examples)
    if say is not None and seen < examples and _clock() - last >= PROGRESS_EVERY_S:
      jax.block_until_ready(total)  # the count said is computed, not only dispatched
      last = _clock()
      say(progress.evaluation_line(name, seen, examples, last - start))
  total = jax.device_get(total)
  count = float(total["count"])
  # A split with its examples' task lengths: the accuracy of each (lra.training.per_length).
  lengths = {"per_length": per_length.rows(total)} if "length_examples" in total else {}
  return {"loss": float(total["loss_sum"]) / count,
          "accuracy": float(total["correct"]) / count, "count": int(count),
          "examples": examples, "available": available, "seconds": _clock() - start,
          "compile_s": compile_s, **lengths}


def labels(split: dict[str, Any], max_examples: int) -> np.ndarray:
  """The labels of the rows an evaluation capped at `max_examples` reads."""
  return np.asarray(capped({"labels": split["labels"]}, max_examples)["labels"])


def final(evaluate_split, states: list, split: dict[str, Any], split_name: str, meta: dict,
          config) -> list[dict[str, Any]]:
  """The passes after training over `split`, one result per state of `states`, counted in
  meta's "final". A state of a step already evaluated here is not evaluated again: the final
  state is the best checkpoint's when the best step is the last (the same parameters)."""
  say = functools.partial(progress.say, bar=None, config=config)
  done: dict[int, dict] = {}
  for state in states:
    step = int(state.step)
    if step not in done:
      done[step] = evaluate_split(state, split, name=f"{split_name} of step {step}", say=say)
      note(meta, "final", done[step], split_name)
  return [done[int(state.step)] for state in states]


def finish(meta: dict, config) -> dict[str, Any]:
  """results.json's "evaluation" (`record`), said in one line at the end of the run."""
  out = record(meta)
  progress.say(summary_line(out), None, config)
  return out


def note(meta: dict, role: str, result: dict[str, Any], split: str) -> None:
  """Counts pass `result` in meta["evaluation"][role]: "validation" (during training: saved
  with the checkpoints, so counted over resumes) or "final" (the passes after training)."""
  entry = meta.setdefault("evaluation", {}).setdefault(
      role, {"passes": 0, "time_s": 0.0, "compile_s": 0.0})
  entry.update(split=split, examples=result["examples"], available=result["available"],
               passes=entry["passes"] + 1, time_s=entry["time_s"] + result["seconds"],
               compile_s=entry["compile_s"] + result["compile_s"])


def record(meta: dict) -> dict[str, Any]:
  """results.json's "evaluation": for "validation" (the passes during training) and "final"
  (those after it) the split, the examples read of those available, the passes, their
  seconds (time_s) and of them compile_s (the calls that compiled the evaluation step); then
  in all: time_s, compile_s, train_s (train_time_s less its validations: the train steps and
  the saves) and share, evaluation's part of training and evaluating, compiling counted apart
  (the train step's compile is in train_s: the trainer counts it as training time)."""
  found = {k: dict(v) for k, v in meta.get("evaluation", {}).items()}
  seconds = sum(v["time_s"] for v in found.values())
  compiling = sum(v["compile_s"] for v in found.values())
  train = meta["train_time_s"] - found.get("validation", {}).get("time_s", 0.0)
  evaluating = seconds - compiling
  share = evaluating / (train + evaluating) if train + evaluating > 0 else None
  return {**found, "time_s": seconds, "compile_s": compiling, "train_s": train,
          "share": share}


def summary_line(evaluation: dict[str, Any]) -> str:
  """The end-of-run line: how long evaluation took, and its share of the time."""
  parts = []
  for role, what in (("validation", "validation"), ("final", "after training")):
    entry = evaluation.get(role)
    if entry:
      parts.append(f"{what} {entry['time_s'] - entry['compile_s']:.1f} s ({entry['passes']} x "
                   f"{entry['examples']:,} of {entry['available']:,} {entry['split']} examples)")
  share = evaluation["share"]
  return (f"evaluation took {evaluation['time_s'] - evaluation['compile_s']:.1f} s"
          + (f", {100 * share:.0f}% of training and evaluating" if share is not None else "")
          + ": " + ", ".join(parts) + f"; training steps and saves {evaluation['train_s']:.1f} "
          f"s; compiling the evaluation step {evaluation['compile_s']:.1f} s more")
