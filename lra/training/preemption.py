"""Stopping on a preemption notice: SIGTERM (Cloud TPUs, SLURM) or SIGINT (Ctrl-C) lets the
current step finish, then the trainer saves a checkpoint and raises Preempted."""
from __future__ import annotations

import signal

import jax
from jax.experimental import multihost_utils

from lra.errors import UserError


class Preempted(UserError):
  """SIGTERM or SIGINT stopped the run after a whole step, and a checkpoint of it was saved."""

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum


_stop_signal: list[int] = []  # the first SIGTERM/SIGINT seen by install_stop_handlers


def uses_preemption_service() -> bool:
  """Whether JAX's preemption service runs (jax.distributed initialised): it catches SIGTERM
  on any host and picks one step at which every host stops (one host alone would hang)."""
  return jax.distributed.is_initialized() and jax.config.jax_enable_preemption_service


def install_stop_handlers() -> None:
  """SIGTERM (a preemption notice) or SIGINT (Ctrl-C): training finishes its step, saves a
  checkpoint and raises Preempted; a second signal kills at once. Process-wide, so only
  train.py's main installs it (after jax.distributed.initialize); a library caller opts in."""
  service = uses_preemption_service()
  if jax.process_count() > 1 and not service:
    return  # the hosts could not agree on a step: a signal kills as it always did

  def handle(signum, frame):
    del frame
    signal.signal(signum, signal.SIG_DFL)  # the next one kills
    if not _stop_signal:
      _stop_signal.append(signum)
    if service and signum == signal.SIGINT:
      signal.raise_signal(signal.SIGTERM)  # JAX's own handler tells every host

  signal.signal(signal.SIGINT, handle)
  if not service:  # with the service, JAX's handler (C++) catches SIGTERM; keep it
    signal.signal(signal.SIGTERM, handle)


def stop_requested(done: int, service: bool) -> bool:
  """Whether to stop after step `done`. With the preemption service every host must ask at
  every step; the local flag alone decides only where no other host waits on this one."""
  reached = service and multihost_utils.reached_preemption_sync_point(done)
  return reached or (bool(_stop_signal) and jax.process_count() == 1)


def stop_signal() -> int:
  """The signal that asked for the stop (the service saw a SIGTERM if none came here)."""
  return _stop_signal[0] if _stop_signal else signal.SIGTERM
