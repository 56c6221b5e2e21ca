"""Train and test one model on one LRA task.

  python train.py --config=configs/listops.py:transformer,cpu --workdir=runs/listops_cpu

Overrides: --config.model.num_layers=2 (a key the config lacks is an error). Running the same
command again resumes from the last checkpoint in --workdir. --import=MODULE (repeatable, or
the environment variable LRA_IMPORT) imports a module of your own before the config is loaded,
so a mixer it registers can be named: --import=my_attention --config=configs/listops.py:NAME.
"""
import logging as py_logging
import os
import re
import shlex
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from lra import errors

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/TASK.py:MODEL[,cpu][,paper]")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0, for multi-host runs "
    "(with --num_processes and --process_id); see also --multihost.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in a multi-host run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_ALLOW_CONFIG_CHANGE = flags.DEFINE_bool(
    "allow_config_change", False,
    "Resume the run in --workdir although settings that change its result differ from those "
    "its checkpoints were made with, or it diverged (recorded in results.json).")
# Read before absl parses the command line (_parse_flags): the config, loaded while the flags
# are parsed, asks the registry for the model. Defined so that absl accepts and lists it.
flags.DEFINE_multi_string("import", [], "A module (dotted name, or a .py file) to import "
                          "first: one that registers a mixer of your own (repeatable; also "
                          "the environment variable LRA_IMPORT, comma separated).")
_MULTIHOST = flags.DEFINE_bool("multihost", False,
                               "Call jax.distributed.initialize() with the cluster's "
                               "auto-detected settings (TPU pods, SLURM, ...).")


def _fail(message: str) -> None:
  """A bad command line: exit 2, as absl's own usage errors."""
  errors.fail(message, 2)


def _unknown_override(error: AttributeError, argv) -> str | None:
  """The one-line message for an override of a KEY the config lacks (ml_collections' answer,
  with its "Did you mean" suggestion), or None if no --config.PATH.KEY=... was given: then the
  AttributeError is a bug. A mixer setting the model does not take never gets here: the config
  raises the mixer's own error (configs/base.py MixerSettings)."""
  # ml_collections' text is the repr of a KeyError: 'KEY' then, maybe, Did you mean "OTHER"
  found = re.search(r"'(\w+)\\?'", str(error))
  key = found.group(1) if found else str(error)
  suggestion = re.search(r'Did you mean "(\w+)"', str(error))
  flags_given = [a.split("=")[0] for a in argv
                 if a.startswith("--config.") and a.split("=")[0].split(".")[-1] == key]
  if not flags_given:
    return None
  hint = f" (did you mean {suggestion.group(1)!r}?)" if suggestion else ""
  return (f"bad --config override {flags_given[-1]}: the config has no key {key!r}{hint}; a "
          f"key must already exist in the config (see the config file for the valid keys)")


def _config_values(argv) -> list[tuple[int, str]]:
  """Where each --config (or -config) value stands: (index in argv, the text before the value
  there: "--config=" when given inline, "" when it is the next argument)."""
  found = []
  for i, arg in enumerate(argv):
    flag = re.match(r"--?config(=|$)", arg)
    if flag and flag.group(1):
      found.append((i, arg[:flag.end()]))
    elif flag and i + 1 < len(argv):
      found.append((i + 1, ""))
  return found


def _config_anywhere(argv: list[str]) -> list[str]:
  """--config=configs/TASK.py:MODEL names its file relative to the current folder, or else to
  the checkout or the installed package (lra.locations.PACKAGE_ROOT): commands work from any folder."""
  from lra.locations import PACKAGE_ROOT
  out = list(argv)
  for i, prefix in _config_values(out):
    file, sep, rest = out[i][len(prefix):].partition(":")
    packaged = os.path.join(PACKAGE_ROOT, file)
    if file and not os.path.isabs(file) and not os.path.exists(file) and os.path.isfile(packaged):
      out[i] = prefix + packaged + sep + rest
  return out


def _parse_flags(argv):
  """absl's parser; a bad command line or config is one line, a bug keeps its traceback."""
  from lra import plugins
  from lra.errors import UserError
  try:  # before the config is loaded: it checks the model's name against the registry
    plugins.import_modules(plugins.flag_values(argv[1:]))
  except UserError as e:
    _fail(str(e))
  argv = _config_anywhere(argv)
  if len(_config_values(argv)) > 1:  # absl would fail with its internals
    _fail(f"--config is given {len(_config_values(argv))} times; give it once (change single "
          f"settings with --config.KEY=VALUE)")
  try:
    rest = flags.FLAGS(argv)
  except UserError as e:  # raised where the config meets the mistake (configs/)
    _fail(str(e))
  except flags.Error as e:
    # absl's own refusals are one line. A config's get_config raises our user errors, which
    # arrive above as they are; an error absl wraps with a traceback is a bug in a config.
    if "Traceback" in str(e):
      raise
    _fail(str(e))
  except AttributeError as e:
    message = _unknown_override(e, argv)
    if message is None:
      raise
    _fail(message)
  try:
    config = _CONFIG.value
    loaded = config is not None and hasattr(config, "task")
  except OSError as e:  # ml_collections reports a missing config file when it is first read
    last = [l for l in str(e).splitlines() if l.strip()] or [repr(e)]
    _fail(f"cannot load --config: {last[-1].strip()}")
  if not loaded:
    _fail("cannot load --config: --config is required, e.g. "
          "--config=configs/listops.py:transformer")
  if not _WORKDIR.value:
    _fail("--workdir is required (checkpoints, metrics and results.json go there)")
  return rest


class _NoOrbaxInfo(py_logging.Filter):
  """Drops Orbax's INFO records (several lines per checkpoint save); its warnings pass."""

  def filter(self, record):
    return (record.levelno >= py_logging.WARNING
            or f"{os.sep}orbax{os.sep}" not in record.pathname)


class _NoBackendProbe(py_logging.Filter):
  """Drops JAX's INFO line about each platform it could not start ("Unable to initialize
  backend 'tpu': ... libtpu.so ..."), which came before every message on a machine without
  that platform; xla_bridge's warnings (a GPU found without its CUDA plugin, ...) pass."""

  def filter(self, record):
    return (record.levelno >= py_logging.WARNING
            or not str(record.msg).startswith("Unable to initialize backend"))


def _quiet_backend_probe() -> None:
  """Before JAX starts its backends (the first jax.devices() or process_index()), unless the
  user asked for a verbosity."""
  if not flags.FLAGS["verbosity"].present:
    py_logging.getLogger("jax._src.xla_bridge").addFilter(_NoBackendProbe())


def _quiet_logs(config) -> None:
  """Without -v/--verbosity: no Orbax INFO lines, and only warnings from processes other than
  0 (unless config.log_all_processes). An explicit verbosity is left as the user set it."""
  if flags.FLAGS["verbosity"].present:
    return
  logging.get_absl_logger().addFilter(_NoOrbaxInfo())  # Orbax logs through absl's logger
  import jax
  if jax.process_index() != 0 and not config.log_all_processes:
    logging.set_verbosity(logging.WARNING)


def main(argv):
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  _quiet_backend_probe()
  import jax  # after flag parsing, so a bad command line fails fast
  from lra.training import config_checks, faults, preemption, profiling, trainer
  # Before anything compiles; a restart then loads the compiled programs from disk.
  profiling.enable_compilation_cache(_CONFIG.value.compilation_cache_dir)
  if _COORDINATOR.value:
    if jax.config.jax_platforms in (None, "", "cpu"):
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  elif _MULTIHOST.value:
    jax.distributed.initialize()
  _quiet_logs(_CONFIG.value)
  preemption.install_stop_handlers()  # after initialize: it picks the multi-host protocol
  for line in config_checks.idle_overrides(
      _CONFIG.value, config_flags.get_override_values(flags.FLAGS["config"])):
    if jax.process_index() == 0:
      print(f"warning: {line}", flush=True)
  try:
    with faults.QuietFaults(logging.get_absl_handler()):
      results = trainer.train_and_evaluate(_CONFIG.value, _WORKDIR.value,
                                           allow_config_change=_ALLOW_CONFIG_CHANGE.value)
  except preemption.Preempted as e:  # 128 + signal, as a shell reports a killed job: 143, 130
    errors.fail(f"{e}; to resume, run the same command again: python {shlex.join(sys.argv)}",
                128 + e.signum)
  except errors.UserError as e:  # a bad config or bad data; anything else is a bug: traceback
    errors.fail(str(e))
  except (OSError, ValueError, MemoryError, jax.errors.JaxRuntimeError) as e:
    message = errors.environment_fault(e) or faults.out_of_memory(e, _CONFIG.value)
    if message is None:
      raise  # a bug: its traceback
    # At once: Orbax's threads, which met the same fault, would print their tracebacks while
    # Python shuts down. Everything saved is closed by then (train_and_evaluate's finally).
    errors.fail(message, now=True)
  if jax.process_index() == 0 and results.get("objective") == "denoise":
    print(f"masked-token validation accuracy {results['val_masked_accuracy']:.4f} (loss "
          f"{results['val_masked_loss']:.4f}, best at step {results['best_step']}); results "
          f"in {_WORKDIR.value}/results.json")
  elif jax.process_index() == 0:
    print(f"test accuracy {results['test_accuracy']:.4f} (best validation "
          f"{results['best_val_accuracy']:.4f} at step {results['best_step']}; "
          f"majority class of the test set {results['test_majority_rate']:.4f}); "
          f"results in {_WORKDIR.value}/results.json")


def run() -> None:
  """The command line entry point (train.py in a checkout, `python -m lra.commands.train` installed)."""
  app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  run()
