"""What a run in progress says: its train metrics, its log lines (above the progress bar)."""
from __future__ import annotations

import datetime
import sys
import time

import jax

from lra.training.writers import MetricWriter


class TrainClock:
  """Training time alone, for steps/s and the ETA: a log line's rate is of the steps since the
  last lap over the time they trained (from the end of what came between: validation, saves;
  `resume`), and the ETA adds the validations still to come at the last one's duration. So a
  validation neither lowers the next rate nor makes the ETA jump, as it did when the rate was
  of wall time (a CPU run's ETA jumped after each validation, then fell back)."""

  def __init__(self, now: float, step: int, eval_every: int):
    self.since, self.step, self.eval_every = now, step, eval_every
    self.val_seconds = 0.0  # the last validation's (0 before the first)

  def lap(self, done: int, now: float) -> float:
    """Steps per second of training since the last lap (`now`: once the steps are done)."""
    rate = (done - self.step) / max(now - self.since, 1e-9)
    self.since, self.step = now, done
    return rate

  def resume(self, now: float, bar=None) -> None:
    """Training goes on at `now`: the time since the lap (validation, saves) is not counted
    (nor by the bar's own rate)."""
    self.since = now
    if bar is not None:
      bar.unpause()

  def validated(self, seconds: float) -> None:
    self.val_seconds = seconds

  def eta(self, done: int, total: int, steps_per_s: float) -> float:
    """Seconds left: the steps at `steps_per_s`, the validations (every eval_every steps and at
    the last) at the last validation's duration. The test after training is not in it (a
    long pass says how far it is)."""
    every = self.eval_every
    validations = total // every - done // every + int(total % every > 0 and done < total)
    return (total - done) / max(steps_per_s, 1e-9) + validations * self.val_seconds


def log_train(writer: MetricWriter, bar, sums, done: int, clock: TrainClock,
              schedule) -> dict[str, float]:
  """Writes the train metrics summed since the last log (one device fetch; the clock's lap is
  taken after it, when the device has finished the steps)."""
  host = jax.device_get(sums)
  train = {"train_loss": host["loss_sum"] / host["count"],
           "train_accuracy": host["correct"] / host["count"],
           "steps_per_s": clock.lap(done, time.time()),
           "learning_rate": float(schedule(done - 1))}
  train = {k: float(v) for k, v in train.items()}
  writer.write(done, train)
  bar.set_postfix(loss=f"{train['train_loss']:.3f}", acc=f"{train['train_accuracy']:.3f}")
  return train


def record(done: int, total: int, train: dict[str, float], val: dict | None,
           clock: TrainClock) -> str:
  """The log line of one log interval: a log file gets the progress the bar would show."""
  rate = train["steps_per_s"]
  eta = _duration(clock.eta(done, total, rate))
  line = (f"step {done}/{total}: train loss {train['train_loss']:.4f}, accuracy "
          f"{train['train_accuracy']:.4f}, {rate:.2f} steps/s, ETA {eta}")
  if val is not None:
    line += f"; validation loss {val['loss']:.4f}, accuracy {val['accuracy']:.4f}"
  return line


def say(line: str, bar, config) -> None:
  """One whole line to stdout, flushed at once (a log file under nohup or SLURM reads as it
  grows), above the bar if one is drawn (`bar` None: none is). Process 0 only, unless
  config.log_all_processes."""
  if jax.process_index() != 0:
    if not config.log_all_processes:
      return
    line = f"[process {jax.process_index()}] {line}"
  if bar is None or bar.disable:
    print(line, flush=True)
  else:
    bar.write(line, file=sys.stdout)  # clears the bar, writes, redraws it
    sys.stdout.flush()


def evaluation_line(name: str, done: int, examples: int, seconds: float) -> str:
  """How far a long evaluation pass is, and how long it has left at its rate so far."""
  left = seconds * (examples - done) / max(done, 1)
  return (f"{name}: {done:,}/{examples:,} examples in {_duration(seconds)}, about "
          f"{_duration(left)} left")


def _duration(seconds: float) -> datetime.timedelta:
  return datetime.timedelta(seconds=round(seconds))


def time_spent_line(done: int, total: int, config, used: float) -> str:
  """A run started with its time limit already used up (by the runs it resumes)."""
  return (f"config.max_train_time_s={config.max_train_time_s:g} s is used up ({used:.1f} s "
          f"trained, to step {done}/{total}): no step is trained; testing the best checkpoint "
          f"again (the same command with a larger limit, or 0, goes on)")


def time_stop_line(done: int, total: int, config) -> str:
  return (f"stopped after step {done}/{total}: config.max_train_time_s="
          f"{config.max_train_time_s:g} s of training used; testing the best checkpoint (the "
          f"same command with a larger limit, or 0, goes on)")
