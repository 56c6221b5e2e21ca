"""Runs of one cell that differ only in the seed are pooled, not chosen among: the table shows
their mean test accuracy with the sample standard deviation and n beside it."""
from __future__ import annotations

import json
import statistics

from lra import config_record
from lra.reporting import comparable
from lra.reporting.numbers import finite
from lra.rules import is_int

# How the tables combine seeds, as they state it.
SEED_RULE = ("Finished runs of one model and task that differ only in the seed (config.seed: "
             "initialisation, dropout and batch order; the same data and otherwise the same "
             "config) are pooled: the cell shows their mean test accuracy ± the sample standard "
             "deviation (n - 1 in the denominator) over n seeds; the difference to the paper and "
             "the averages use the mean.")


def seed_of(result: dict) -> int | None:
  """The run's recorded config.seed; None where it recorded none."""
  config = result.get("config")
  seed = config.get("seed") if isinstance(config, dict) else None
  return seed if is_int(seed) else None


def _identity(result: dict) -> str | None:
  """All that runs pooled together share: everything but the seed (the data, the config, the
  steps they ran). None for a run that recorded no seed: it is never pooled."""
  if seed_of(result) is None:
    return None
  # Each seed of a self-pretrained cell starts from its own seed's pretraining (init_from
  # differs by construction): what they share is the objective they were initialised from.
  config = {k: v for k, v in config_record.flat(result["config"]).items()
            if k not in ("seed", "init_from")}
  init = (result.get("init") or {}).get("objective")
  return json.dumps([comparable.data_key(result), config, result.get("num_train_steps"),
                     result.get("stopped_early"), result.get("config_changes"), init],
                    sort_keys=True, default=str)


def groups(runs: list[dict]) -> list[list[dict]]:
  """The runs of one cell in sets that differ only in the seed, in the order found."""
  found: dict = {}
  for i, run in enumerate(runs):
    key = _identity(run)
    found.setdefault(("alone", i) if key is None else key, []).append(run)
  return list(found.values())


def by_seed(group: list[dict]) -> list[list[dict]]:
  """A set's runs by seed: more than one run of a seed is a repeat, chosen among as before."""
  found: dict = {}
  for run in group:
    found.setdefault(seed_of(run), []).append(run)
  return list(found.values())


def mean_std(values: list[float]) -> tuple[float, float | None]:
  """(mean, sample standard deviation with n - 1; None for one value)."""
  return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


# What each seed's entry keeps for lra.reporting.chance and results.checkpoint_rule.
JUDGED = ("test_count", "test_majority_rate", "tested_checkpoint", "tested_step")


def pool(runs: list[dict]) -> dict:
  """One result for runs that differ only in the seed (one run per seed): the mean test and
  validation accuracy, the rest as the run of the lowest seed records it, and "seeds": each
  run's seed, test and validation accuracy, best step and workdir, and what judges it (test
  count, majority rate, the checkpoint tested). One run is left as it is."""
  if len(runs) == 1:
    return runs[0]
  runs = sorted(runs, key=seed_of)
  vals = [finite(r.get("best_val_accuracy")) for r in runs]
  return {**runs[0],
          "test_accuracy": mean_std([r["test_accuracy"] for r in runs])[0],
          "best_val_accuracy": None if None in vals else mean_std(vals)[0],
          "superseded": [d for r in runs for d in r.get("superseded", [])],
          "seeds": [{"seed": seed_of(r), "test_accuracy": r["test_accuracy"],
                     "best_val_accuracy": r.get("best_val_accuracy"),
                     "best_step": r.get("best_step"), "workdir": r["workdir"],
                     **{k: r.get(k) for k in JUDGED}} for r in runs]}


def workdirs(result: dict) -> list[str]:
  """Every run directory behind a (possibly pooled) result."""
  return [s["workdir"] for s in result["seeds"]] if "seeds" in result else [result["workdir"]]
