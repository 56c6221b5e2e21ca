"""config.init_from: a run that starts from another run's encoder (self-pretraining's second
stage). The encoder (embeddings, blocks, norms, CLS token, learned positions, BatchNorm
averages) is loaded exactly; the task head and the optimiser state are fresh. Only a new run
loads it: a resumed run goes on from its own checkpoints.

Everything that can be checked without compiling (the run exists, holds an intact checkpoint,
is of this task and mixer) is refused in one line before the data loads; the parameter shapes
once this run's state exists, before any step is trained.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import paths
from lra.errors import UserError
from lra.training import checkpoint, workdir as workdir_lib

ENCODER = "encoder"  # the encoder's scope in every model of models/encoder.py


@dataclasses.dataclass(frozen=True)
class Source:
  """The run to start from: its directory, config and chosen checkpoint (KIND/STEP)."""
  workdir: str
  config: dict
  kind: str
  step: int

  @property
  def objective(self) -> str:
    return self.config.get("objective", "classify")


def _config_hash(config: dict) -> str:
  return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def find(config, workdir) -> Source | None:
  """The run config.init_from names (None when it is ""), checked: it is a run directory of
  this trainer, not this run's own, of the same task and mixer, with an intact checkpoint
  (its best-on-validation one if kept, else its newest)."""
  if not config.get("init_from"):
    return None
  where = f"config.init_from={config.init_from}"
  folder = paths.resolve(config.init_from)
  if str(folder) == str(paths.resolve(workdir)):
    raise UserError(f"{where} is this run's own --workdir; name the run to start from")
  if not folder.exists():
    raise UserError(f"{where}: no such run directory (train the run to start from first)")
  recorded = workdir_lib.read_json(folder / "config.json")
  damaged = []
  found = checkpoint.find_intact(folder, damaged=damaged)
  if found is None and damaged:  # it saved checkpoints, and none is whole
    raise UserError(f"{where}: its checkpoint{'s are' if len(damaged) > 1 else ' is'} "
                    f"damaged ({'; '.join(damaged)}); rerun that run's command (it sets a "
                    f"damaged checkpoint aside and trains again), or name another run")
  if recorded is None or found is None:
    raise UserError(f"{where} holds no {'config.json' if recorded is None else 'checkpoint'}"
                    f" of a run; name the --workdir of a run that has saved a checkpoint")
  kind, step, meta = found
  recorded = (meta or {}).get("config") or recorded  # the settings that checkpoint was made with
  task, mixer = recorded.get("task"), (recorded.get("model") or {}).get("name")
  if task != config.task or mixer != config.model.name:
    raise UserError(f"{where} is a run of {mixer!r} on {task!r}; this run is "
                    f"{config.model.name!r} on {config.task!r}: start from a run of the same "
                    f"model and task")
  return Source(str(folder), recorded, kind, step)


def changed_since(config, workdir, started: dict | None) -> str | None:
  """For a resumed run that started from config.init_from's encoder (`started`, the record
  `load` made): how that run's chosen checkpoint differs now ("best/10 then, best/20 now"; it
  trained on, or was made again), or None. A source that is gone is none: a resume needs only
  its own checkpoints."""
  if not started or not config.get("init_from"):
    return None
  if not paths.resolve(config.init_from).exists():
    return None
  now = find(config, workdir)
  then = started.get("checkpoint"), started.get("config_sha256")
  if (f"{now.kind}/{now.step}", _config_hash(now.config)) == then:
    return None
  if then[0] != f"{now.kind}/{now.step}":
    return f"{then[0]} then, {now.kind}/{now.step} now"
  return f"{then[0]} made with other settings now"


def needs_mask_token(config, source: Source | None, started: dict | None = None) -> bool:
  """Whether this run's embedding table has the mask token's row (lra.training.pretrain): a
  denoise run's has, and so has any run initialised from one (`source`, or for a resumed
  run the record `load` made, `started`), so that the table loads."""
  objectives = (config.get("objective"), source and source.objective,
                started and started.get("objective"))
  return "denoise" in objectives


def _shapes(tree) -> dict[str, tuple]:
  """{"/block_0/mixer/query/kernel": shape} of a parameter tree."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  name = lambda path: "".join(f"/{getattr(p, 'key', getattr(p, 'idx', p))}" for p in path)
  return {name(k): tuple(np.shape(v)) for k, v in leaves}


def _check_fits(source: Source, theirs, ours, what: str) -> None:
  """One line naming the first parameter that is missing or shaped otherwise."""
  a, b = _shapes(theirs), _shapes(ours)
  for key in sorted(a.keys() | b.keys()):
    if a.get(key) != b.get(key):
      there = "absent" if key not in a else f"shaped {a[key]}"
      here = "absent" if key not in b else f"shaped {b[key]}"
      raise UserError(f"config.init_from={source.workdir}: its {what} does not fit this model "
                      f"({ENCODER}{key} is {there} there, {here} here): use the model settings "
                      f"it was trained with (its config.json)")


def _fit_mask_token(theirs: dict, ours: dict) -> tuple[dict, str | None]:
  """The source's encoder with the mask token's parameter (the token table's last row, or
  the linear encoder's mask_embed) made as this run has it, and what was done (None: nothing).
  A run without it drops the source's (a classifier is never given the mask token); a run with
  it keeps the one it initialised (from a classifier: no run has learned it yet)."""
  theirs = dict(theirs)
  table = lambda tree: np.shape(((tree.get("embed") or {}).get("embedding")))
  a, b = table(theirs), table(ours)
  if len(a) == len(b) == 2 and a[1] == b[1] and abs(a[0] - b[0]) == 1:
    rows = theirs["embed"]["embedding"]
    rows = rows[:-1] if a[0] > b[0] else jnp.concatenate(
        [rows, ours["embed"]["embedding"][-1:]], axis=0)
    theirs["embed"] = {**theirs["embed"], "embedding": rows}
    return theirs, "dropped" if a[0] > b[0] else "initialised here"
  if ("mask_embed" in theirs) != ("mask_embed" in ours):
    if "mask_embed" in theirs:
      theirs.pop("mask_embed")
      return theirs, "dropped"
    return {**theirs, "mask_embed": ours["mask_embed"]}, "initialised here"
  return theirs, None


def load(source: Source, state, mesh):
  """(state with the source's encoder, head and optimiser state fresh, record for
  results.json). Refuses an encoder of other shapes in one line."""
  saved = checkpoint.restore_raw(source.workdir, source.kind, source.step, mesh)
  params = dict(state.params["params"])
  theirs, mask_token = _fit_mask_token(saved["params"]["params"].get(ENCODER, {}),
                                       params[ENCODER])
  _check_fits(source, theirs, params[ENCODER], "encoder")
  params[ENCODER] = theirs
  stats = dict(state.batch_stats or {})
  if ENCODER in stats or ENCODER in (saved.get("batch_stats") or {}):
    theirs = (saved.get("batch_stats") or {}).get(ENCODER, {})
    _check_fits(source, theirs, stats.get(ENCODER, {}), "BatchNorm statistics")
    stats[ENCODER] = theirs
  new_params = {**state.params, "params": params}
  opt_state = jax.jit(state.tx.init, out_shardings=NamedSharding(mesh, P()))(new_params)
  state = state.replace(params=new_params, batch_stats=stats, opt_state=opt_state)
  return state, {"workdir": source.workdir, "checkpoint": f"{source.kind}/{source.step}",
                 "step": source.step, "objective": source.objective,
                 "config_sha256": _config_hash(source.config), "mask_token": mask_token}
