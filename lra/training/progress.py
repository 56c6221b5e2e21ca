"""What a run in progress says: its train metrics, its log lines (above the progress bar)."""
from __future__ import annotations

import datetime
import sys

import jax

from lra.training.writers import MetricWriter


def log_train(writer: MetricWriter, bar, sums, done: int, seconds: float, steps: int,
              schedule) -> dict[str, float]:
  """Writes the train metrics summed since the last log (one device fetch)."""
  host = jax.device_get(sums)
  train = {"train_loss": host["loss_sum"] / host["count"],
           "train_accuracy": host["correct"] / host["count"],
           "steps_per_s": steps / max(seconds, 1e-9),
           "learning_rate": float(schedule(done - 1))}
  train = {k: float(v) for k, v in train.items()}
  writer.write(done, train)
  bar.set_postfix(loss=f"{train['train_loss']:.3f}", acc=f"{train['train_accuracy']:.3f}")
  return train


def record(done: int, total: int, train: dict[str, float], val: dict | None) -> str:
  """The log line of one log interval: a log file gets the progress the bar would show."""
  rate = train["steps_per_s"]
  eta = datetime.timedelta(seconds=round((total - done) / max(rate, 1e-9)))
  line = (f"step {done}/{total}: train loss {train['train_loss']:.4f}, accuracy "
          f"{train['train_accuracy']:.4f}, {rate:.2f} steps/s, ETA {eta}")
  if val is not None:
    line += f"; validation loss {val['loss']:.4f}, accuracy {val['accuracy']:.4f}"
  return line


def say(line: str, bar, config) -> None:
  """One whole line to stdout, flushed at once (a log file under nohup or SLURM reads as it
  grows), above the bar if one is drawn. Process 0 only, unless config.log_all_processes."""
  if jax.process_index() != 0:
    if not config.log_all_processes:
      return
    line = f"[process {jax.process_index()}] {line}"
  if bar.disable:
    print(line, flush=True)
  else:
    bar.write(line, file=sys.stdout)  # clears the bar, writes, redraws it
    sys.stdout.flush()


def time_spent_line(done: int, total: int, config, used: float) -> str:
  """A run started with its time limit already used up (by the runs it resumes)."""
  return (f"config.max_train_time_s={config.max_train_time_s:g} s is used up ({used:.1f} s "
          f"trained, to step {done}/{total}): no step is trained; testing the best checkpoint "
          f"again (the same command with a larger limit, or 0, goes on)")


def time_stop_line(done: int, total: int, config) -> str:
  return (f"stopped after step {done}/{total}: config.max_train_time_s="
          f"{config.max_train_time_s:g} s of training used; testing the best checkpoint (the "
          f"same command with a larger limit, or 0, goes on)")
