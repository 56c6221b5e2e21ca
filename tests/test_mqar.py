"""MQAR (Zoology's multi-query associative recall), the task beyond LRA: its generator
(determinism, the paper's layout), its reader and malformed files, the per-position loss, its
config for every mixer, its own table, and a tiny run through train.py."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.commands import grid_plan
from lra.configs import mqar as mqar_config
from lra.data import mqar, record, store, tasks
from lra.errors import UserError
from lra.models import registry
from lra.reporting import accuracy
from lra.training import steps
from tests import commands

SMALL = dict(vocab_size=64, max_len=32, num_kv_pairs=4, power_a=0.01,
             random_non_queries=False, num_train=40, num_val=8, num_test=8)


def _config(data_dir, **data):
  c = mqar_config.get_config("transformer,cpu")
  c.data.update({**SMALL, **data})
  c.data.data_dir = str(data_dir)
  return c


def test_the_same_seed_gives_the_same_files(tmp_path):
  made = {}
  for name, seed in (("a", 0), ("b", 0), ("c", 1)):
    mqar.make_folder(str(tmp_path / name), SMALL, seed, progress=False)
    made[name] = record.read(str(tmp_path / name))["files"]
  assert made["a"] == made["b"]  # sizes and SHA-256 of every file
  assert made["a"]["train.inputs.npy"] != made["c"]["train.inputs.npy"]
  # Each split its own stream: val and test do not move with the train split's size.
  val = mqar.generate(8, SMALL, 0, "val")
  again = mqar.generate(8, {**SMALL, "num_train": 1000}, 0, "val")
  assert all(np.array_equal(x, y) for x, y in zip(val, again))
  assert not np.array_equal(val[0], mqar.generate(8, SMALL, 0, "test")[0])


@pytest.mark.parametrize("random_non_queries", [False, True])
def test_examples_have_the_papers_layout(random_non_queries):
  s = {**SMALL, "vocab_size": 128, "max_len": 64, "num_kv_pairs": 8,
       "random_non_queries": random_non_queries}
  inputs, labels = mqar.generate(500, s, 3, "train")
  v, n, half = s["vocab_size"], s["num_kv_pairs"], s["vocab_size"] // 2
  assert inputs.shape == labels.shape == (500, 64)
  assert inputs.min() >= 0 and inputs.max() < v
  for x, y in zip(inputs, labels):
    keys, values = x[0:2 * n:2], x[1:2 * n:2]
    assert len(set(keys)) == n and len(set(values)) == n  # distinct within an example
    assert keys.min() >= 1 and keys.max() < half and values.min() >= half
    pair = dict(zip(keys, values))
    asked = np.flatnonzero(y != tasks.NO_TARGET)
    assert len(asked) == n and np.all(asked >= 2 * n) and np.all((asked - 2 * n) % 2 == 0)
    assert sorted(x[asked]) == sorted(keys)  # each key queried once, after all the pairs
    for where in asked:  # the label: the value paired with the queried key, shown before
      assert y[where] == pair[x[where]]
      assert x[where] not in x[asked[asked < where]]  # (no earlier query of the same key)
    fillers = np.setdiff1d(np.arange(2 * n, 64), asked)
    assert (x[fillers] == 0).all() != random_non_queries


def test_query_gaps_follow_the_power_law():
  s = {**SMALL, "vocab_size": 128, "max_len": 64, "num_kv_pairs": 4}
  _, labels = mqar.generate(2000, s, 0, "train")
  per_slot = (labels[:, 8::2] != tasks.NO_TARGET).sum(axis=0)  # how often each query slot
  assert per_slot.sum() == 2000 * 4 and len(per_slot) == (64 - 8) // 2
  # p(g) ~ g^-0.99: the first slot far likelier than the last.
  assert per_slot[0] > 3 * per_slot[-1] and per_slot[0] == per_slot.max()


@pytest.mark.parametrize("change, says", [
    (dict(max_len=31), "must be even"), (dict(max_len=12), "too short"),
    (dict(vocab_size=32), "larger than max_len"), (dict(num_kv_pairs=0), "at least 1"),
    (dict(vocab_size=1 << 16, max_len=64), "at most"), (dict(power_a=0.0), "power_a")])
def test_impossible_settings_are_one_line(change, says):
  with pytest.raises(UserError, match=says):
    mqar.check_settings({**SMALL, **change})


def test_the_reader_gives_a_per_position_task(tmp_path):
  task = tasks.load(_config(tmp_path / "d"))  # generated on first use
  assert (task.name, task.per_position, task.padding, task.pair) == ("mqar", True, False, False)
  assert task.vocab_size == task.num_classes == 64 and task.max_len == 32
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [40, 8, 8]
  train = task.splits["train"]
  assert train["inputs"][np.arange(3)].shape == train["labels"][:3].shape == (3, 32)
  assert task.data["record"]["settings"]["num_kv_pairs"] == 4
  with pytest.raises(UserError, match="other settings"):  # data of other settings
    tasks.load(_config(tmp_path / "d", power_a=0.5))
  with pytest.raises(UserError, match="never cut"):
    tasks.load(_config(tmp_path / "d", max_len=16, num_kv_pairs=2))


def _hand_made(folder, labels_change=None):
  """Splits written by hand (no record: read as they are), one file spoiled."""
  for split in tasks.SPLITS:
    inputs, labels = mqar.generate(8, SMALL, 0, split)
    if split == "val" and labels_change is not None:
      labels = labels_change(labels)
    store.write_split(str(folder), split, {"inputs": inputs, "labels": labels})


@pytest.mark.parametrize("spoil, says", [
    (lambda y: np.where(y == tasks.NO_TARGET, y, 5).astype(np.int16), "outside the values"),
    (lambda y: np.full_like(y, 40), "holds no key"),
    (lambda y: y[:, :16], "shape")])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, spoil, says):
  _hand_made(tmp_path, spoil)
  with pytest.raises(UserError, match=says) as caught:
    tasks.load(_config(tmp_path, generate_if_missing=False))
  message = str(caught.value)
  assert "\n" not in message and "val.labels.npy" in message and "python -m lra.data mqar" in message
  _hand_made(tmp_path / "t")  # a file cut short
  os.truncate(store.path(str(tmp_path / "t"), "train", "inputs"), 100)
  with pytest.raises(UserError, match="damaged"):
    tasks.load(_config(tmp_path / "t", generate_if_missing=False))


def test_the_loss_counts_the_labelled_positions_only():
  import flax.linen as nn

  class Fixed(nn.Module):  # logits BxLxC: class 1 everywhere
    @nn.compact
    def __call__(self, inputs_BxL, mask_BxL=None, *, deterministic=True):
      bias = self.param("b", nn.initializers.zeros, ())
      return jnp.zeros((*inputs_BxL.shape, 3)).at[..., 1].set(1.0) + bias

  model = Fixed()
  params = {"params": model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]}
  labels = jnp.array([[-1, 1, -1, 2], [1, -1, -1, -1]])
  batch = {"inputs": jnp.ones((2, 4), jnp.int32), "labels": labels,
           "weights": jnp.array([1.0, 0.0])}  # the second row is eval padding
  loss, evaluate = steps.position_loss(model)
  mean, (sums, _) = loss(params, {}, batch, jax.random.PRNGKey(1))
  assert (float(sums["count"]), float(sums["correct"])) == (3.0, 2.0)
  assert np.isclose(float(mean), float(sums["loss_sum"]) / 3)
  state = type("S", (), {"params": params, "batch_stats": {}})
  evaluated = evaluate(state, batch)
  assert (float(evaluated["count"]), float(evaluated["correct"])) == (2.0, 1.0)


@pytest.mark.parametrize("option", ["", ",cpu"])
def test_every_mixer_takes_the_config(option):
  for name in registry.names():
    c = mqar_config.get_config(name + option)
    assert (c.task, c.model.feedforward, c.model.use_cls) == ("mqar", False, False)
    net = models.build(c.model.to_dict(), vocab_size=c.data.vocab_size,
                       num_classes=c.data.vocab_size, max_len=c.data.max_len, pair=False,
                       denoise=True)  # every setting checked, no tracing
    assert isinstance(net, models.Denoiser), name
  base = mqar_config.get_config("transformer")
  assert (base.data.vocab_size, base.data.max_len, base.data.num_kv_pairs) == (8192, 256, 16)
  assert (base.data.max_len, base.data.num_kv_pairs) in mqar.PAPER_POINTS
  assert base.num_train_steps == 64 * 100_000 // 256 and base.batch_size == 256
  assert tasks.FACTS["mqar"].train_size == base.data.num_train
  assert tasks.FACTS["mqar"].test_size == base.data.num_test


def test_lra_stays_six_tasks_and_mqar_is_asked_by_name():
  assert "mqar" not in tasks.NAMES and "mqar" in tasks.EXTRA
  every, names = list(tasks.FACTS), list(tasks.NAMES)
  assert grid_plan._names("all", "tasks", every, names) == names
  assert grid_plan._names("listops,mqar", "tasks", every, names) == ["listops", "mqar"]


def _result(task, model, acc):
  facts = tasks.FACTS[task]
  return {"task": task, "model": model, "mixer": model, "test_accuracy": acc,
          "best_val_accuracy": acc, "test_count": facts.test_size,
          "train_count": facts.train_size, "test_majority_rate": 0.1, "config": {},
          "workdir": f"runs/{task}/{model}", "num_train_steps": 10, "best_step": 10}


def test_mqar_has_its_own_table_and_leaves_the_averages(tmp_path):
  none = lambda task, model: ()
  lra = [_result(t, "transformer", 0.5) for t in tasks.NAMES]
  both = lra + [_result("mqar", "transformer", 0.9), _result("mqar", "s5", 0.3)]
  alone, _ = accuracy.write_tables(lra, str(tmp_path / "a"), none)
  table, text = accuracy.write_tables(both, str(tmp_path / "b"), none)
  assert [r["model"] for r in table["rows"]] == ["transformer"]  # no S5 row of dashes
  assert table["tasks"] == list(tasks.NAMES) and table["rows"][0]["avg5"] == 50.0
  assert table["rows"][0]["avg6"] == alone["rows"][0]["avg6"]
  beyond = table["beyond"]
  assert beyond["tasks"] == ["mqar"]  # the models in the reports' order: the paper's first
  assert [r["model"] for r in beyond["rows"]] == ["transformer", "s5"]
  assert beyond["rows"][0]["cells"]["mqar"]["ours"] == 90.0
  assert "Beyond LRA" in text and "| MQAR |" in text and "Beyond" not in accuracy.write_tables(
      lra, str(tmp_path / "c"), none)[1]
  saved = json.loads((tmp_path / "b" / "accuracy.json").read_text())
  assert saved["beyond"]["tasks"] == ["mqar"]
  assert "mqar" in (tmp_path / "b" / "accuracy.csv").read_text()


# `-m slow`: two commands and a compile (the per-position trainer runs in-process in the
# length protocol's test, train.py's path in test_cli's).
@pytest.mark.slow
@pytest.mark.commands
def test_a_tiny_run_through_train_py_and_the_data_command(tmp_path):
  data = tmp_path / "data"
  proc = commands.run("-m", "lra.data", "mqar", f"--data_dir={data}", "--vocab_size=64",
                      "--max_len=32", "--num_kv_pairs=4", "--num_train=64", "--num_val=16",
                      "--num_test=16")
  assert "wrote train: 64 examples" in proc.stdout
  tiny = ["--config.data.vocab_size=64", "--config.data.max_len=32",
          "--config.data.num_kv_pairs=4", "--config.data.num_train=64",
          "--config.data.num_val=16", "--config.data.num_test=16", "--config.batch_size=16",
          "--config.eval_batch_size=16", "--config.num_train_steps=4", "--config.log_every=2",
          "--config.eval_every=2", "--config.checkpoint_every=2", "--config.model.emb_dim=16",
          "--config.model.qkv_dim=16", "--config.model.mlp_dim=16", "--config.progress=False",
          "--config.compilation_cache_dir=", f"--config.data.data_dir={data}"]
  commands.run("train.py", "--config=configs/mqar.py:transformer,cpu",
               f"--workdir={tmp_path / 'run'}", *tiny, xla_flags=commands.FAST_COMPILE)
  results = json.loads((tmp_path / "run" / "results.json").read_text())
  assert (results["task"], results["test_count"], results["test_positions"]) == ("mqar", 16, 64)
  assert 0 <= results["test_accuracy"] <= 1 and results["num_train_steps"] == 4
  bad = commands.run("-m", "lra.data", "mqar", f"--data_dir={tmp_path / 'x'}", "--max_len=63",
                     expect=commands.NONZERO)
  assert "must be even" in commands.error_line(bad)
