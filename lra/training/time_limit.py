"""config.max_train_time_s: training time counted over resumes, the same stop in every process."""
from __future__ import annotations

import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from lra.training import progress


def out_of_time(config, run_start: float, done: int) -> bool:
  """Whether config.max_train_time_s of training time (counted over resumes, as
  train_time_s) is used up (0 = no limit). Every process must stop at the same step: with
  several, process 0's clock decides, at log steps only (one broadcast each)."""
  if not config.max_train_time_s:
    return False
  if jax.process_count() == 1:
    return time.time() - run_start >= config.max_train_time_s
  if done % config.log_every:
    return False
  used_up = np.bool_(time.time() - run_start >= config.max_train_time_s)
  return bool(multihost_utils.broadcast_one_to_all(used_up))


def stop(config, run_start: float, done: int, total: int) -> dict | None:
  """The record of a run that config.max_train_time_s ends after step `done`, or None."""
  if done >= total or not out_of_time(config, run_start, done):
    return None
  return _record(config, done, total)


def _record(config, step: int, total: int) -> dict:
  """results.json's stopped_early: the limit ended the run at `step` of `total`."""
  return {"by": "max_train_time_s", "max_train_time_s": config.max_train_time_s,
          "step": step, "planned_num_train_steps": total}


def spent(config, start: int, total: int, meta: dict, bar):
  """The stop record when config.max_train_time_s is already spent by the runs this one
  resumes (their checkpoint's record, the same in every process), after saying so; else
  None. Not one more step is trained, where each rerun would otherwise add one."""
  if not (start < total and config.max_train_time_s
          and meta["train_time_s"] >= config.max_train_time_s):
    return None
  progress.say(progress.time_spent_line(start, total, config, meta["train_time_s"]), bar,
               config)
  bar.close()
  return _record(config, start, total)
