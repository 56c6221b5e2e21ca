"""Faster restarts and a look inside: JAX's persistent compilation cache, and a jax.profiler
trace of chosen steps (config.compilation_cache_dir, config.profile_steps)."""
from __future__ import annotations

import os

import jax

from lra import paths
from lra.errors import UserError
from lra.training import writers


def enable_compilation_cache(directory: str) -> None:
  """Points JAX's persistent compilation cache at `directory` ("" = leave it off). Every
  program is cached however fast it compiled: on CPU most take under JAX's 1 s default."""
  if not directory:
    return
  if "://" not in directory:  # a gs:// URL is passed as it is
    directory = os.path.expanduser(directory)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def profile_range(config) -> tuple[int, int] | None:
  """config.profile_steps "START,STOP" -> (START, STOP); None for ""."""
  text = config.profile_steps.strip()
  if not text:
    return None
  try:
    start, stop = (int(part) for part in text.split(","))
  except ValueError:  # not two integers
    start = stop = -1
  if not 0 <= start < stop:
    raise UserError(f"config.profile_steps={config.profile_steps!r} must be 'START,STOP' with "
                    f"0 <= START < STOP, e.g. '10,15' traces steps 11 to 15; '' = no trace")
  return start, stop


class Trace:
  """The trace of steps START+1..STOP (config.profile_steps) below WORKDIR/tensorboard, the
  TensorBoard log folder: jax.profiler writes plugins/profile/RUN/HOST.xplane.pb there, where
  TensorBoard's profile plugin finds it (`tensorboard --logdir WORKDIR/tensorboard`, profile
  tab). Several processes trace into tensorboard/process_N each (one TensorBoard run each:
  processes on one host would share a file name). The profiler writes local files; a remote
  workdir gets them uploaded when the trace stops."""

  def __init__(self, config, workdir, first_step: int):
    self.range, self.first_step, self.staging = profile_range(config), first_step, None
    self.folder = workdir / writers.TENSORBOARD_DIR
    if jax.process_count() > 1:  # each host traces its own devices
      self.folder = self.folder / f"process_{jax.process_index()}"

  def before_step(self, step: int) -> None:
    if self.range and step == max(self.range[0], self.first_step) and step < self.range[1]:
      self.staging = paths.LocalStaging(self.folder)
      jax.profiler.start_trace(self.staging.path)

  def due(self, done: int, total: int) -> bool:
    """Whether the trace stops after step `done`: its last step, or the run's."""
    return self.staging is not None and done in (self.range[1], total)

  def after_step(self, done: int, total: int, state) -> str | None:
    """Stops the trace at its last step (or the run's); returns the line to print then."""
    if not self.due(done, total):
      return None
    jax.block_until_ready(state)  # the traced steps' device work belongs in the trace
    jax.profiler.stop_trace()
    self.staging.close()
    self.staging = None
    return (f"profiler trace written to {self.folder}/plugins/profile (TensorBoard's profile "
            f"tab: tensorboard --logdir {self.folder}; or https://ui.perfetto.dev)")
