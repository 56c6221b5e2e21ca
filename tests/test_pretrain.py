"""Self-pretraining: the denoise objective (lra/training/pretrain.py), a run started from another
run's encoder (config.init_from, lra/training/initialise.py), both through the one trainer, and
how the reports show them."""
import importlib
import json
import os
import shutil
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.data import tasks
from lra.errors import UserError
from lra.reporting import accuracy, markdown, paper, results
from lra.training import checkpoint, initialise, pretrain, steps, trainer
from lra.models.settings import EncoderConfig
from tests import commands
from tests.commands import NONZERO, ROOT, error_line
from tests.test_cli import TINY
from tests.tiny import tiny_config

LISTOPS_VOCAB = tasks.FACTS["listops"].vocab_size  # 17: the mask token is id 17


# --- the objective, on its own ------------------------------------------------------------

def test_only_real_tokens_are_masked():
  tokens = np.random.default_rng(0).integers(1, LISTOPS_VOCAB, (64, 50))
  tokens[:, 30:] = 0  # padding
  tokens = jnp.asarray(tokens, jnp.int32)
  corrupted, chosen = pretrain.corrupt(jax.random.PRNGKey(0), tokens, tokens != 0, 0.3,
                                       LISTOPS_VOCAB)
  chosen = np.asarray(chosen)
  assert not chosen[:, 30:].any()
  assert abs(chosen[:, :30].mean() - 0.3) < 0.03
  np.testing.assert_array_equal(np.asarray(corrupted), np.where(chosen, LISTOPS_VOCAB, tokens))


class _Predictor:
  """Stands in for the Denoiser: records the tokens it is given and predicts `answer`."""

  def __init__(self, answer):
    self.answer, self.seen = answer, None

  def apply(self, variables, tokens, mask, deterministic, rngs=None, mutable=None):
    self.seen = (np.asarray(tokens), np.asarray(mask))
    logits = 10.0 * jax.nn.one_hot(self.answer(np.asarray(tokens)), LISTOPS_VOCAB)
    return (logits, {}) if mutable else logits


@pytest.mark.parametrize("pair", [False, True])
def test_targets_are_the_original_tokens_at_the_masked_positions_only(pair):
  rng = np.random.default_rng(1)
  batch = {"inputs": rng.integers(1, LISTOPS_VOCAB, (8, 20)), "weights": np.ones(8, np.float32)}
  batch["inputs"][:, 15:] = 0
  if pair:
    batch["inputs2"] = rng.integers(1, LISTOPS_VOCAB, (8, 20))
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  originals = np.asarray(batch["inputs"])
  if pair:
    originals = np.concatenate([originals, np.asarray(batch["inputs2"])])
  oracle = _Predictor(lambda tokens: originals)
  echo = _Predictor(lambda tokens: tokens)  # right wherever a token was left as it was
  for model, all_correct in ((oracle, True), (echo, False)):
    loss, _ = pretrain.denoise_loss(model, pair, 0.25, LISTOPS_VOCAB)
    _, (sums, _) = loss({}, {}, batch, jax.random.PRNGKey(2))
    tokens, real = model.seen
    masked = tokens == LISTOPS_VOCAB
    assert masked.any() and not (masked & (originals == 0)).any()  # padding never masked
    np.testing.assert_array_equal(tokens[~masked], originals[~masked])
    np.testing.assert_array_equal(real, originals != 0)
    assert float(sums["count"]) == masked.sum()
    assert float(sums["correct"]) == (masked.sum() if all_correct else 0)
  # Evaluation: the same masks every time; an example of weight 0 counts nothing.
  _, evaluate = pretrain.denoise_loss(oracle, pair, 0.25, LISTOPS_VOCAB)
  state = types.SimpleNamespace(params={}, batch_stats={})
  first = evaluate(state, batch)
  assert float(evaluate(state, batch)["count"]) == float(first["count"])
  light = evaluate(state, {**batch, "weights": batch["weights"].at[0].set(0.0)})
  rows = [0, 8] if pair else [0]
  assert float(light["count"]) == float(first["count"]) - (oracle.seen[0][rows] ==
                                                           LISTOPS_VOCAB).sum()


def test_token_features_leave_the_classifier_as_it_was():
  """The Denoiser's encoder has the Classifier's parameter names and shapes (CLS included);
  tokens=True gives the features that MEAN pooling averages."""
  spec = dict(name="transformer", num_layers=1, emb_dim=16, qkv_dim=16, mlp_dim=32,
              num_heads=2, use_cls=True)
  build = lambda **kw: models.build(spec, vocab_size=18, max_len=12, pair=False, **kw)
  inputs = jnp.asarray(np.random.default_rng(3).integers(1, 17, (2, 12)), jnp.int32)
  # Shapes only: nothing is computed to compare names and shapes.
  classifier = jax.eval_shape(build(num_classes=10).init, jax.random.PRNGKey(0),
                              inputs)["params"]
  denoiser = jax.eval_shape(build(num_classes=17, denoise=True).init, jax.random.PRNGKey(0),
                            inputs)["params"]
  shapes = lambda tree: jax.tree_util.tree_map(np.shape, tree)
  assert shapes(classifier["encoder"]) == shapes(denoiser["encoder"])
  assert set(denoiser) == {"encoder", "token_hidden", "token_out"}
  encoder = models.Encoder(vocab_size=18, max_len=12, config=EncoderConfig(
      num_layers=1, emb_dim=16, qkv_dim=16, mlp_dim=32, num_heads=2, pooling="MEAN",
      use_cls=False))
  @jax.jit  # one program, not op by op
  def pooled_and_tokens(inputs):
    variables = encoder.init(jax.random.PRNGKey(1), inputs)
    return encoder.apply(variables, inputs), encoder.apply(variables, inputs, tokens=True)

  pooled, tokens = pooled_and_tokens(inputs)
  assert tokens.shape == (2, 12, 16)
  np.testing.assert_allclose(pooled, tokens.mean(1), rtol=1e-5, atol=1e-6)


# --- a denoise run through the trainer ------------------------------------------------------

def _record_steps(patch, seen):
  """Wraps the trainer's steps so that the test sees every batch each is given."""
  real = steps.make_steps

  def recording(*args, **kwargs):
    train, evaluate, sharding = real(*args, **kwargs)

    def train_seen(state, batch, rng):
      seen["train"].append(jax.device_get(batch))
      return train(state, batch, rng)

    def evaluate_seen(state, batch):
      seen["eval"].append(jax.device_get(batch))
      return evaluate(state, batch)

    return train_seen, evaluate_seen, sharding

  patch.setattr(steps, "make_steps", recording)


SHORT = {"num_train_steps": 2, "eval_every": 2, "checkpoint_every": 2}  # one checkpoint: step 2


# The two finished runs are kept for the worker's session: a module's fixture is made again
# each time an xdist worker comes back to the module.
@pytest.fixture(scope="session")
def pretrained(listops_dir, tmp_path_factory):
  """A finished two-step tiny ListOps denoise run of the Transformer (best/2), the run the
  init_from tests start from: (workdir, results). Tests copy it where they change it."""
  workdir = str(tmp_path_factory.mktemp("denoise") / "run")
  result = trainer.train_and_evaluate(tiny_config(listops_dir, objective="denoise", **SHORT),
                                      workdir)
  return types.SimpleNamespace(workdir=workdir, results=result)


@pytest.fixture(scope="session")
def classified(listops_dir, tmp_path_factory) -> str:
  """The workdir of a finished two-step tiny ListOps classification run (best/2 and
  checkpoints/2). Tests read it, or copy it where they change it."""
  workdir = str(tmp_path_factory.mktemp("classify") / "run")
  trainer.train_and_evaluate(tiny_config(listops_dir, **SHORT), workdir)
  return workdir


def _rows(array) -> set[bytes]:
  return {row.tobytes() for row in np.asarray(array, np.int32)}


def test_a_denoise_run_trains_on_train_inputs_only_its_loss_goes_down(listops_dir, tmp_path):
  """100 steps: the batches its steps are given (train inputs, no labels; validation inputs
  evaluated, never trained on), its loss, and results that say denoise."""
  workdir = str(tmp_path / "run")
  config = tiny_config(listops_dir, objective="denoise", num_train_steps=100, log_every=20,
                       eval_every=50, checkpoint_every=50)
  seen = {"train": [], "eval": []}
  with pytest.MonkeyPatch.context() as patch:
    _record_steps(patch, seen)
    trainer.train_and_evaluate(config, workdir)
  task = tasks.load(config)
  train, val = _rows(task.splits["train"]["inputs"]), _rows(task.splits["val"]["inputs"])
  assert len(seen["train"]) == 100
  for batch in seen["train"]:
    assert set(batch) == {"inputs"}  # no labels
    assert _rows(batch["inputs"]) <= train
  assert seen["eval"]  # validation inputs, for monitoring: evaluated, never trained on
  for batch in seen["eval"]:
    assert set(batch) == {"inputs", "weights"}
    assert _rows(batch["inputs"]) <= val
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  losses = [r["train_loss"] for r in rows if "train_loss" in r]
  assert len(losses) == 6 and np.mean(losses[-2:]) < losses[0] - 0.25, losses
  assert any("val_accuracy" in r for r in rows)  # masked-token validation, for monitoring
  with open(os.path.join(workdir, "results.json")) as f:
    saved = json.load(f)
  assert saved["objective"] == "denoise" and "test_accuracy" not in saved
  assert 0.0 < saved["val_masked_accuracy"] <= 1.0 and saved["val_masked_loss"] > 0
  assert saved["mask_rate"] == 0.10 and saved["mask_token"] == LISTOPS_VOCAB
  assert saved["config"]["objective"] == "denoise" and saved["init"] is None


# --- init_from ------------------------------------------------------------------------------

def _leaves(tree) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_flatten_with_path(jax.device_get(tree))[0]}


def _check_loads_exactly(config, workdir):
  """initialise.load puts the source's saved encoder into this run's state bit for bit, keeps
  the freshly initialised head, and starts the optimiser afresh. Returns the record."""
  source = initialise.find(config, workdir)
  assert source.kind == "best" and source.objective == "denoise"
  task = tasks.load(config)
  model = trainer.build_model(config, task, initialise.needs_mask_token(config, source))
  mesh = trainer.make_mesh()
  fresh = trainer.create_state(model, task, config, mesh)
  before = _leaves(fresh.params["params"])
  loaded, record = initialise.load(source, fresh, mesh)
  saved = checkpoint.restore_raw(source.workdir, source.kind, source.step, mesh)
  theirs = _leaves(saved["params"]["params"]["encoder"])
  ours = _leaves(loaded.params["params"]["encoder"])
  assert theirs.keys() == ours.keys()
  for key, value in theirs.items():
    np.testing.assert_array_equal(ours[key], value, err_msg=key)
  assert any(not np.array_equal(before[f"['encoder']{k}"], v) for k, v in theirs.items())
  heads = {k: v for k, v in _leaves(loaded.params["params"]).items()
           if not k.startswith("['encoder']")}
  assert heads and all(np.array_equal(v, before[k]) for k, v in heads.items())
  assert not any("token_" in k for k in heads)  # the denoiser's head is not carried over
  assert all(not np.any(v) for v in _leaves(loaded.opt_state).values())
  assert int(loaded.step) == 0
  assert ours["['embed']['embedding']"].shape[0] == task.vocab_size + 1  # the mask token's row
  assert record["workdir"] == source.workdir and record["step"] == source.step
  assert record["objective"] == "denoise" and len(record["config_sha256"]) == 16
  return record


def test_init_from_loads_the_encoder_bit_for_bit_and_a_fresh_head(pretrained, listops_dir,
                                                                   tmp_path):
  config = tiny_config(listops_dir, init_from=pretrained.workdir)
  record = _check_loads_exactly(config, str(tmp_path / "run"))
  assert record["checkpoint"] == f"best/{pretrained.results['best_step']}"


@pytest.mark.parametrize("mixer", [pytest.param("s4d", marks=pytest.mark.slow),
                                   pytest.param("performer", marks=pytest.mark.slow),
                                   "local"])  # the first two `-m slow` (12 s each)
def test_init_from_works_for_other_mixers(mixer, listops_dir, tmp_path):
  source = str(tmp_path / "pre")
  trainer.train_and_evaluate(tiny_config(listops_dir, mixer, objective="denoise",
                                         num_train_steps=2, eval_every=2), source)
  _check_loads_exactly(tiny_config(listops_dir, mixer, init_from=source), str(tmp_path / "ft"))


def test_fine_tune_records_its_source_and_a_resume_keeps_its_own_encoder(pretrained,
                                                                        listops_dir, tmp_path):
  source = str(tmp_path / "pre")
  shutil.copytree(pretrained.workdir, source)
  config = tiny_config(listops_dir, init_from=source, num_train_steps=2, eval_every=2)
  first = trainer.train_and_evaluate(config, str(tmp_path / "ft"))
  # The source relative to this run's workdir, as results.json keeps paths.
  assert first["init"]["workdir"] == "../pre" and first["init"]["objective"] == "denoise"
  assert "test_accuracy" in first and first["objective"] == "classify"
  shutil.rmtree(source)  # a resume must not need it
  config.num_train_steps = 4
  second = trainer.train_and_evaluate(config, str(tmp_path / "ft"))
  assert second["num_train_steps"] == 4 and second["init"] == first["init"]


def _refused_resume(config, ft) -> str:
  """The one-line refusal of resuming the fine-tune in `ft`, which leaves it as it was."""
  saved = sorted(os.listdir(os.path.join(ft, "checkpoints")))
  with open(os.path.join(ft, "results.json")) as f:
    results = f.read()
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(config, ft)
  line = str(e.value)
  assert "--allow_config_change" in line and "\n" not in line, line
  assert sorted(os.listdir(os.path.join(ft, "checkpoints"))) == saved
  with open(os.path.join(ft, "results.json")) as f:
    assert f.read() == results  # as the first run left it
  return line


def test_a_resumed_fine_tune_whose_source_changed_is_refused(pretrained, listops_dir, tmp_path):
  """The source run was made again with other settings, or trained on (its best checkpoint is
  another now) after the fine-tune started from it: the fine-tune would go on from the old
  encoder, so it is refused in one line with nothing lost, or goes on with
  --allow_config_change, recorded. The check reads the source's checkpoint manifests: the
  changes are written there, not trained (the grid's slow test trains them)."""
  source, ft = tmp_path / "pre", str(tmp_path / "ft")
  shutil.copytree(pretrained.workdir, source)
  config = tiny_config(listops_dir, init_from=str(source), num_train_steps=2, eval_every=2)
  first = trainer.train_and_evaluate(config, ft)
  best = f"best/{pretrained.results['best_step']}"
  assert first["init"]["checkpoint"] == best
  config.num_train_steps = 4
  manifest = source / best / checkpoint.MANIFEST
  record = json.loads(manifest.read_text())
  record["meta"]["config"]["seed"] += 1  # made again with another seed
  manifest.write_text(json.dumps(record))
  moved = f"{best} made with other settings now"
  assert f"config.init_from={source}, which has changed since ({moved})" in _refused_resume(
      config, ft)
  (source / best).rename(source / "best" / "1000")  # trained on: its best is step 1000 now
  moved = f"{best} then, best/1000 now"
  assert f"config.init_from={source}, which has changed since ({moved})" in _refused_resume(
      config, ft)
  went_on = trainer.train_and_evaluate(config, ft, allow_config_change=True)
  assert went_on["num_train_steps"] == 4 and went_on["init"] == first["init"]
  assert went_on["config_changes"][-1]["init_from_changed"] == moved


def _pair_task(config):
  """A made-up pair task of Retrieval's vocabulary (byte ids 1..256, 0 pads)."""
  rng = np.random.default_rng(4)

  def split(n):
    def tokens():
      rows = rng.integers(1, 257, (n, config.data.max_len))
      rows[np.arange(config.data.max_len) >= rng.integers(5, config.data.max_len, (n, 1))] = 0
      return rows.astype(np.int32)
    return {"inputs": tokens(), "inputs2": tokens(), "labels": rng.integers(0, 2, n)}

  return tasks.Task.of("retrieval", config.data.max_len,
                       {"train": split(64), "val": split(24), "test": split(24)})


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_pair_task_pretrains_and_fine_tunes_its_one_encoder(listops_dir, tmp_path,
                                                            monkeypatch):
  monkeypatch.setattr(tasks, "load", _pair_task)
  pair = lambda **kw: tiny_config(listops_dir, task="retrieval", num_train_steps=2,
                                  eval_every=2, **kw)
  pre = trainer.train_and_evaluate(pair(objective="denoise"), str(tmp_path / "pre"))
  assert pre["mask_token"] == 257 and pre["val_masked_count"] > 0
  record = _check_loads_exactly(pair(init_from=str(tmp_path / "pre")), str(tmp_path / "x"))
  fine = trainer.train_and_evaluate(pair(init_from=str(tmp_path / "pre")), str(tmp_path / "ft"))
  # results.json names the source relative to the run's workdir.
  assert fine["init"] == {**record, "workdir": "../pre"} and "test_accuracy" in fine


def _check_mask_row(source, config, workdir, done: str | None, train: bool = False):
  """initialise.load from `source` into the run of `config`: every parameter but the mask
  token's row is the source's bit for bit; that row is dropped, or kept as initialised here
  (`done`, as the record says); with `train`, the run then trains."""
  found = initialise.find(config, workdir)
  task = tasks.load(config)
  model = trainer.build_model(config, task, initialise.needs_mask_token(config, found))
  mesh = trainer.make_mesh()
  fresh = trainer.create_state(model, task, config, mesh)
  loaded, record = initialise.load(found, fresh, mesh)
  assert record["mask_token"] == done
  saved = checkpoint.restore_raw(source, found.kind, found.step, mesh)
  theirs = _leaves(saved["params"]["params"]["encoder"])
  ours = _leaves(loaded.params["params"]["encoder"])
  table = "['embed']['embedding']"
  rows = ours[table].shape[0]
  assert rows == LISTOPS_VOCAB + (config.objective == "denoise")
  for key, value in theirs.items():
    if key == table:  # the vocabulary's rows
      ours[key], value = ours[key][:LISTOPS_VOCAB], value[:LISTOPS_VOCAB]
    np.testing.assert_array_equal(ours[key], value, key)
  if done == "initialised here":
    np.testing.assert_array_equal(_leaves(loaded.params["params"]["encoder"])[table][-1],
                                  _leaves(fresh.params["params"]["encoder"])[table][-1])
  if train:
    run = trainer.train_and_evaluate(config, workdir)
    # As load made it, the source named relative to this run's workdir.
    assert run["init"] == {**record, "workdir": os.path.relpath(source, workdir)}
    assert run["num_train_steps"] == config.num_train_steps


@pytest.mark.slow  # four more short runs; the one-step load above stays in the default suite
def test_init_from_chains_through_the_mask_token_row(pretrained, classified, listops_dir,
                                                    tmp_path):
  """A denoise run's token table has the mask token's row, a classifier's
  (from scratch, or from a fine-tune) may not: every chain loads, the rows of the vocabulary
  exactly."""
  short, scratch, ft = SHORT, classified, str(tmp_path / "ft")
  trainer.train_and_evaluate(tiny_config(listops_dir, init_from=pretrained.workdir, **short), ft)
  denoise = dict(short, objective="denoise")
  _check_mask_row(scratch, tiny_config(listops_dir, init_from=scratch, **denoise),
                  str(tmp_path / "a"), "initialised here", train=True)  # classifier -> denoise
  _check_mask_row(pretrained.workdir, tiny_config(listops_dir, init_from=pretrained.workdir,
                                                  **denoise), str(tmp_path / "b"), None)
  _check_mask_row(ft, tiny_config(listops_dir, init_from=ft, **short), str(tmp_path / "c"),
                  "dropped")  # a fine-tune (it has the row) -> a classifier
  _check_mask_row(ft, tiny_config(listops_dir, init_from=ft, **denoise), str(tmp_path / "d"),
                  None)


@pytest.mark.slow  # two training runs, 19 s on 2 cores: `pytest -m slow`
def test_init_from_chains_through_the_linear_encoders_mask_vector(listops_dir, tmp_path):
  """The same for the pixel tasks' "linear" input encoder: its mask token is a learned
  vector, mask_embed, which a denoise run has and a classifier has not."""
  linear = {"num_train_steps": 2, "eval_every": 2, "checkpoint_every": 2,
            "model.input_encoder": "linear"}
  mesh = trainer.make_mesh()
  for first, then, done in (("classify", "denoise", "initialised here"),
                            ("denoise", "classify", "dropped")):
    source = str(tmp_path / first)
    trainer.train_and_evaluate(tiny_config(listops_dir, objective=first, **linear), source)
    config = tiny_config(listops_dir, objective=then, init_from=source, **linear)
    found = initialise.find(config, str(tmp_path / "x"))
    task = tasks.load(config)
    model = trainer.build_model(config, task, then == "denoise")
    fresh = trainer.create_state(model, task, config, mesh)
    loaded, record = initialise.load(found, fresh, mesh)
    assert record["mask_token"] == done
    theirs = _leaves(checkpoint.restore_raw(source, found.kind, found.step, mesh)
                     ["params"]["params"]["encoder"])
    ours = _leaves(loaded.params["params"]["encoder"])
    assert ("['mask_embed']" in ours) == (then == "denoise") != ("['mask_embed']" in theirs)
    for key, value in ours.items():
      expected = theirs.get(key, _leaves(fresh.params["params"]["encoder"]).get(key))
      np.testing.assert_array_equal(value, expected, key)


def test_init_from_a_run_whose_checkpoints_are_damaged_names_the_file(classified, listops_dir,
                                                                      tmp_path):
  """The run did save a checkpoint; the line says it is damaged, and which
  file, and leaves it as it is."""
  source = tmp_path / "pre"
  shutil.copytree(classified, source)
  cut = []
  for kind in ("best", "checkpoints"):
    files = sorted((p for p in (source / kind / "2").rglob("*") if p.is_file()),
                   key=lambda p: p.stat().st_size)
    size = files[-1].stat().st_size
    os.truncate(files[-1], size // 2)
    cut.append((files[-1], files[-1].relative_to(source / kind / "2"), size // 2))
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(tiny_config(listops_dir, init_from=str(source)),
                               str(tmp_path / "ft"))
  line = str(e.value)
  assert line.startswith(f"config.init_from={source}: its checkpoints are damaged (") and \
      "\n" not in line, line
  for path, rel, size in cut:
    assert f"{path.parents[len(rel.parts) - 1]}: {rel} has {size} bytes" in line, line
  assert all(path.stat().st_size == size for path, _, size in cut)  # nothing moved or mended
  assert not (tmp_path / "ft" / "metrics.jsonl").exists()


# --- one line for every bad value -----------------------------------------------------------

def test_init_from_another_mixer_or_size_is_one_line(pretrained, listops_dir, tmp_path):
  other = tiny_config(listops_dir, "performer", init_from=pretrained.workdir)
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(other, str(tmp_path / "a"))
  assert str(e.value) == (f"config.init_from={pretrained.workdir} is a run of 'transformer' on "
                          f"'listops'; this run is 'performer' on 'listops': start from a run "
                          f"of the same model and task")
  wider = tiny_config(listops_dir, init_from=pretrained.workdir,
                      **{"model.emb_dim": 32, "model.qkv_dim": 32})
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(wider, str(tmp_path / "b"))
  assert "its encoder does not fit this model" in str(e.value) and "\n" not in str(e.value)
  assert "(encoder/block_0/LayerNorm_0/bias is shaped (16,) there, shaped (32,) here)" in str(
      e.value)
  assert not os.path.exists(tmp_path / "b" / "metrics.jsonl")  # nothing trained


@pytest.mark.commands
def test_a_bad_objective_from_the_command_line_is_one_line(listops_dir, tmp_path):
  proc = commands.run(os.path.join(ROOT, "train.py"),
                      "--config=configs/listops.py:transformer,cpu",
                      f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={listops_dir}",
                      *TINY, "--config.objective=pretrain", expect=NONZERO)
  expected = "error: config.objective='pretrain' is not valid"
  assert error_line(proc).startswith(expected), proc.stderr[-2000:]


def test_init_from_no_run_is_one_line(listops_dir, tmp_path):
  """train.py prints a UserError as its one `error:` line (the command above; tests/test_cli.py)."""
  with pytest.raises(UserError) as e:
    trainer.train_and_evaluate(tiny_config(listops_dir, init_from="no/such/run"),
                               str(tmp_path / "run"))
  assert str(e.value).startswith("config.init_from=no/such/run: no such run directory")
  assert "\n" not in str(e.value) and not (tmp_path / "run" / "metrics.jsonl").exists()


# --- the reports ----------------------------------------------------------------------------

def _result(root, name, **fields):
  run = root / name
  run.mkdir()
  base = {"task": "listops", "model": "transformer", "test_accuracy": 0.6, "test_count": 2000}
  (run / "results.json").write_text(json.dumps({**base, **fields}))


def test_denoise_runs_are_not_results_and_spt_runs_have_their_own_row(tmp_path):
  _result(tmp_path, "pre", objective="denoise", val_masked_accuracy=0.5, test_accuracy=None)
  _result(tmp_path, "scratch", test_accuracy=0.4)
  _result(tmp_path, "spt", init={"objective": "denoise", "workdir": "pre"})
  warnings: list[str] = []
  found = results.collect_results([str(tmp_path)], warnings, references=lambda t, m: ())
  assert not warnings
  assert sorted(r["model"] for r in found) == ["transformer", "transformer_spt"]
  table = accuracy.accuracy_table(found, references=lambda t, m: (),
                                  include_paper_models=False)
  assert [r["model"] for r in table["rows"]] == ["transformer", "transformer_spt"]
  spt = next(r for r in table["rows"] if r["model"] == "transformer_spt")
  assert spt["cells"]["listops"]["ours"] == pytest.approx(60.0)
  assert spt["cells"]["listops"]["paper"] == paper.SPT_ACCURACY["transformer_spt"]["listops"]
  text = markdown.accuracy_markdown(table)
  assert "| Transformer (SPT) |" in text and paper.SPT_NOTE in text
  assert paper.model_order(["local", "transformer_spt", "zz", "transformer"]) == [
      "transformer", "transformer_spt", "local", "zz"]


def test_an_outside_mixers_spt_row_is_titled_as_the_readme_says(tmp_path):
  """An outside mixer's SPT row is `relu_linear (SPT)`, not the row's key `relu_linear_spt`."""
  _result(tmp_path, "mine", model="relu_linear", test_accuracy=0.4)
  _result(tmp_path, "mine_spt", model="relu_linear", init={"objective": "denoise"})
  found = results.collect_results([str(tmp_path)], [], references=lambda t, m: ())
  table = accuracy.accuracy_table(found, references=lambda t, m: (),
                                  include_paper_models=False)
  text = markdown.accuracy_markdown(table)
  assert "| relu_linear (SPT) |" in text and "| relu_linear |" in text, text
  assert "relu_linear_spt" not in text
  assert paper.model_title("transformer_rotary_spt") == "Transformer (rotary) (SPT)"


def test_a_run_from_a_classifiers_encoder_is_a_row_of_its_own(classified, listops_dir,
                                                               tmp_path):
  """A run started from a finished classification run (init.objective classify) is
  `eval.py accuracy`'s "Transformer (from classify run)" row, marked not comparable with the
  paper's from-scratch rows, and never pooled with the seeds from scratch."""
  short, runs = SHORT, tmp_path / "runs"
  base = str(runs / "base1")
  shutil.copytree(classified, base)  # seed 0
  trainer.train_and_evaluate(tiny_config(listops_dir, seed=1, **short), str(runs / "seed1"))
  from_base = trainer.train_and_evaluate(tiny_config(listops_dir, seed=1, init_from=base,
                                                     **short), str(runs / "b"))
  assert from_base["init"]["objective"] == "classify"
  out = tmp_path / "table"
  importlib.import_module("eval").main(["accuracy", str(runs), f"--out={out}"])
  table = json.loads((out / "accuracy.json").read_text())
  cells = {row["model"]: row["cells"]["listops"] for row in table["rows"]}
  assert set(cells) == {"transformer", "transformer_from_classify"}
  assert cells["transformer"]["n"] == 2 and cells["transformer_from_classify"]["n"] == 1
  assert cells["transformer_from_classify"]["ours"] == pytest.approx(
      100 * from_base["test_accuracy"])
  why = ("started from the encoder of a classify run (config.init_from: ../base1 from this "
         "run's workdir); the paper's runs")
  assert any(w.startswith(why) for w in cells["transformer_from_classify"]["not_comparable"])
  assert not any("started from" in w for w in cells["transformer"]["not_comparable"])
  assert cells["transformer_from_classify"]["paper"] is None
  text = (out / "accuracy.md").read_text()
  assert "| Transformer (from classify run) |" in text and paper.FROM_NOTE in text, text
  assert paper.SPT_NOTE not in text
  assert paper.model_order(["transformer_from_classify", "transformer_spt", "transformer"]) == [
      "transformer", "transformer_spt", "transformer_from_classify"]
  assert paper.model_title("x_from_run") == "x (from another run)"


def test_amos_table2_row_agrees_with_its_printed_mean():
  row = paper.SPT_MASKED_ROTARY
  assert tuple(row) == paper.TASKS
  assert round(sum(row.values()) / len(row), 2) == paper.SPT_MEANS["transformer"][1]
