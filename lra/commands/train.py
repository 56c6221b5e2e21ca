"""Train and test one model on one LRA task.

  python train.py --config=configs/listops.py:transformer,cpu --workdir=runs/listops_cpu

Overrides: --config.model.num_layers=2 (a key the config lacks is an error; lra.cli reads them
as every command does). --explain_config prints the final config, each value with the layer
that set it, checks it as a run does before its data, and exits. Running the same command
again resumes from the last checkpoint in --workdir. --import=MODULE (repeatable, or
the environment variable LRA_IMPORT) imports a module of your own before the config is loaded,
so a mixer it registers can be named: --import=my_attention --config=configs/listops.py:NAME.
"""
import json
import logging as py_logging
import os
import re
import shlex
import sys

from absl import app, flags, logging

from lra import cli, config_sources, errors

# The config file; its single settings are --config.KEY=VALUE (or --config.KEY VALUE), which
# lra.cli takes out of the command line before absl reads the rest.
flags.DEFINE_string("config", None, "configs/TASK.py:MODEL[,cpu][,paper]; change one setting "
                    "with --config.KEY=VALUE (KEY its path, e.g. --config.model.num_layers=2)")
_EXPLAIN = flags.DEFINE_bool(
    "explain_config", False, "Print the final config of this run, each value with the layer "
    "that set it (base, the --config argument, a preset, the task's config or table, the "
    "published recipe, the mixer's own settings, the command line), then check it as a run "
    "does before its data (a value it refuses: one error line, exit 1), and exit: no data, "
    "no --workdir needed.")
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


# What _parse_flags made of the command line: the config (overrides applied) and the keys the
# command line set.
_RUN: dict = {}


def _parse_flags(argv):
  """The overrides (lra.cli), then absl's flags, then the config; a bad command line or config
  is one line, a bug keeps its traceback."""
  from lra import plugins
  from lra.errors import UserError
  try:  # before the config is loaded: it checks the model's name against the registry
    plugins.import_modules(plugins.flag_values(argv[1:]))
    rest, items = cli.take_overrides(argv[1:], old_spelling=False, last_wins=True)
  except UserError as e:
    _fail(str(e))
  argv = _config_anywhere(argv[:1] + rest)
  if len(_config_values(argv)) > 1:
    _fail(f"--config is given {len(_config_values(argv))} times; give it once (change single "
          f"settings with --config.KEY=VALUE)")
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:  # absl's own refusals are one line
    _fail(str(e))
  if not flags.FLAGS.config:
    _fail("cannot load --config: --config is required, e.g. "
          "--config=configs/listops.py:transformer")
  try:
    _RUN["config"] = cli.load_config(flags.FLAGS.config, items)
  except UserError as e:  # raised where the config meets the mistake (configs/, lra.cli)
    _fail(str(e))
  _RUN["overrides"] = [key for _, key, _ in items]
  if not _WORKDIR.value and not _EXPLAIN.value:
    _fail("--workdir is required (checkpoints, metrics and results.json go there)")
  return rest


def check_before_data(config, built: set[str] | None = None) -> None:
  """The checks a run makes before it loads data or compiles, in their order: every setting's
  rule and the mixer's setting names (config_checks.check_settings), the model built for the
  task's sizes, and its parameters traced on them (a mixer that checks its heads against its
  input's width refuses there, as the run's init does). --explain_config and the grid's check
  of every run (lra.commands.grid_plan) make them; a refusal is a UserError. `built`: the
  models already checked (the grid's points of one model are built and traced once)."""
  import jax
  import jax.numpy as jnp
  from lra.training import config_checks, memory_check, trainer
  config_checks.check_settings(config)
  model_key = json.dumps([config.task, config.get("objective"), config.model.to_dict(),
                          config.data.to_dict()], sort_keys=True, default=str)
  if built is not None and model_key in built:
    return
  shapes = memory_check.task_shapes(config)
  model = trainer.build_model(config, shapes)
  ids = jax.ShapeDtypeStruct((1, shapes.max_len), jnp.int32)  # as create_state's dummy batch
  pair = shapes.pair and config.get("objective") != "denoise"
  jax.eval_shape(model.init, jax.ShapeDtypeStruct((2,), jnp.uint32), *(ids,) * (1 + pair))
  if built is not None:
    built.add(model_key)


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
  config = _RUN["config"]
  _quiet_backend_probe()
  if _EXPLAIN.value:  # no data, no workdir
    print("\n".join(config_sources.explain(config)), flush=True)
    try:
      check_before_data(config)
    except errors.UserError as e:  # after the listing, as a run would refuse it
      errors.fail(f"a run of this config is refused: {e}")
    return
  import jax  # after flag parsing, so a bad command line fails fast
  from lra.training import (config_checks, faults, per_length, preemption, profiling,
                            trainer)
  # Before anything compiles; a restart then loads the compiled programs from disk.
  profiling.enable_compilation_cache(config.compilation_cache_dir)
  if _COORDINATOR.value:
    if jax.config.jax_platforms in (None, "", "cpu"):
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  elif _MULTIHOST.value:
    jax.distributed.initialize()
  _quiet_logs(config)
  preemption.install_stop_handlers()  # after initialize: it picks the multi-host protocol
  for line in config_checks.idle_overrides(config, _RUN["overrides"]):
    if jax.process_index() == 0:
      print(f"warning: {line}", flush=True)
  try:
    with faults.QuietFaults(logging.get_absl_handler()):
      results = trainer.train_and_evaluate(config, _WORKDIR.value,
                                           allow_config_change=_ALLOW_CONFIG_CHANGE.value)
  except preemption.Preempted as e:  # 128 + signal, as a shell reports a killed job: 143, 130
    errors.fail(f"{e}; to resume, run the same command again: python {shlex.join(sys.argv)}",
                128 + e.signum)
  except errors.UserError as e:  # a bad config or bad data; anything else is a bug: traceback
    errors.fail(str(e))
  except (OSError, ValueError, MemoryError, jax.errors.JaxRuntimeError) as e:
    message = errors.environment_fault(e) or faults.out_of_memory(e, config)
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
    if per_length.KEY in results:  # a length-generalisation task: its accuracy per length
      print("\n".join(per_length.table_lines(results[per_length.KEY])), flush=True)


def run() -> None:
  """The command line entry point (train.py in a checkout, `python -m lra.commands.train` installed)."""
  app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  run()
