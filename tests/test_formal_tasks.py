"""The formal-language tasks (lra/data/formal/): each generator against an independent
statement of its task, the rows' layout, determinism, and loading through lra.data.tasks."""
import functools
import itertools

import numpy as np
import pytest

from lra.configs import task_config
from lra.data import tasks
from lra.data.formal import loader, rows, specs
from lra.data.tasks import NO_TARGET
from lra.errors import UserError

COUNT = 40
LENGTHS = (1, 2, 3, 4, 5, 6, 9, 17, 30)


def _strings(task, n, seed=0):
  return specs.SPECS[task].sample(np.random.default_rng(seed), COUNT, n)


def _text(row, symbols):
  return "".join(symbols[v] for v in row)


def _parity(row):
  return [sum(row) % 2]


def _even_pairs(row):  # an odd number of changes iff the ends differ
  return [int(row[0] != row[-1])]


def _cycle(row):
  place = 0
  for a in row:
    place = (place + {0: -1, 1: 0, 2: 1}[a]) % 5
  return [place]


ARITHMETIC = {**{d: str(d) for d in range(5)}, 5: "+", 6: "-", 7: "*", 8: "(", 9: ")"}


def _arithmetic(row):
  return [eval(_text(row, ARITHMETIC)) % 5]  # Python's precedence is the task's


def _stack(row):
  stack = []
  for a in row:
    if a < 2:
      stack.append(a)
    elif a == 2:
      stack = stack[:-1]
    else:
      stack.append(a - 3)
  out = stack[::-1] + [2]
  return out + [0] * (len(row) + 1 - len(out))


def _addition(row):
  text = "".join(map(str, row))
  parts = text.split("2") if "2" in text else [text, "0"]
  total = sum(int(p[::-1], 2) for p in parts)
  out = [int(b) for b in bin(total)[2:][::-1]] + [2]
  return out + [0] * (len(row) + 1 - len(out))


def _odds_first(row):
  return [row[i] for i in range(1, len(row), 2)] + [row[i] for i in range(0, len(row), 2)]


STATEMENTS = {
    "parity": _parity, "even_pairs": _even_pairs, "cycle_navigation": _cycle,
    "modular_arithmetic": _arithmetic, "modular_arithmetic_brackets": _arithmetic,
    "reverse_string": lambda row: row[::-1], "stack_manipulation": _stack,
    "duplicate_string": lambda row: row + row, "odds_first": _odds_first,
    "binary_addition": _addition, "bucket_sort": sorted,
}


@pytest.mark.parametrize("task", sorted(STATEMENTS))
def test_each_generator_is_its_task(task):
  for n in LENGTHS:
    x, y, scored = _strings(task, n)
    assert x.min() >= 0 and x.max() < specs.SPECS[task].inputs
    for i, row in enumerate(x.tolist()):
      want = STATEMENTS[task](row)
      assert y[i].tolist() == want, (task, n, row)
      if scored is not None:  # up to the end symbol, as their accuracy mask
        assert scored[i] == want.index(2) + 1
  assert _strings("modular_arithmetic", 8)[0].shape[1] == 7  # their even lengths lose one
  assert _strings("modular_arithmetic_brackets", 9)[0].shape[1] == 9


def _permutation_products(n, even_only):
  """The word problem's numbering stated with dict maps: permutations of 1..n in
  lexicographic order (even ones alone for A_n), a * b mapping k to a(b(k))."""
  perms = [p for p in itertools.permutations(range(1, n + 1))
           if not even_only or sum(p[i] > p[j] for i in range(n)
                                   for j in range(i + 1, n)) % 2 == 0]
  maps = [dict(zip(range(1, n + 1), p)) for p in perms]
  compose = lambda a, b: perms.index(tuple(maps[a][maps[b][k]] for k in range(1, n + 1)))
  return compose, len(perms)


@pytest.mark.parametrize("task, n, even_only", [("word_s3", 3, False), ("word_z60", 0, False),
                                                 ("word_a5", 5, True), ("word_s5", 5, False)])
def test_word_problems_are_running_products(task, n, even_only):
  compose, order = ((lambda a, b: (a + b) % 60), 60) if not n else \
      _permutation_products(n, even_only)
  assert specs.SPECS[task].classes == order
  x, y, _ = _strings(task, 12)
  for row, labels in zip(x.tolist()[:10], y.tolist()):
    prefixes = [functools.reduce(compose, row[:t + 1]) for t in range(len(row))]
    assert labels == prefixes


def _small(task, **change):
  settings = specs.defaults(task)
  shorter = {"train_min_length": settings["train_min_length"], "train_max_length": 12,
             "test_min_length": 13, "test_max_length": 30, "num_train": 60, "num_val": 30,
             "num_test": 20}
  return {**settings, **shorter, **change}


@pytest.mark.parametrize("task", sorted(specs.SPECS))
def test_splits_have_the_promised_widths_lengths_and_padding(task):
  spec, settings = specs.SPECS[task], _small(task)
  widths = rows.widths(task, settings)
  for split in ("train", "val", "test"):
    data = rows.generate(task, settings, 0, split)
    inputs, labels, lengths = data["inputs"], data["labels"], data["lengths"]
    assert inputs.shape == labels.shape == (settings[f"num_{split}"], widths[split])
    part = "train" if split == "train" else "test"
    lo, hi = settings[f"{part}_min_length"], settings[f"{part}_max_length"]
    assert lengths.min() >= lo - 1 and lengths.max() <= max(hi, 5)  # Grazzi's s, raised
    real = inputs > 0
    assert not (real[:, 1:] & ~real[:, :-1]).any()  # the real tokens, then padding
    assert (labels[~real] == NO_TARGET).all() and inputs.max() < spec.vocab_size
    assert real.all(axis=1).any()  # the widest row is in the split
    scored = labels != NO_TARGET
    if spec.kind == "class":  # one answer, at the slot (at the last bit: Grazzi's parity)
      assert (scored.sum(1) == 1).all()
      assert (scored.argmax(1) == real.sum(1) - 1).all()
    if spec.kind == "tagging":
      assert (scored == real).all()
    at_slots = (inputs[scored] == spec.inputs + 1).all()
    if spec.kind != "tagging" and not (task == "parity" and settings["layout"] == "grazzi"):
      assert at_slots  # no answer at an input symbol


def test_grazzi_and_deletang_lengths():
  grazzi = rows.generate("parity", _small("parity"), 0, "train")
  bits = (grazzi["inputs"] > 0).sum(1)
  assert (grazzi["lengths"] == bits + 1).all()  # their s counts the answer token
  deletang = rows.generate("parity", _small("parity", layout="deletang"), 0, "test")
  assert ((deletang["inputs"] > 0).sum(1) == deletang["lengths"] + 1).all()  # + the slot
  assert set(deletang["lengths"]) == set(range(13, 31))  # every test length
  arithmetic = rows.generate("modular_arithmetic", _small("modular_arithmetic"), 0, "train")
  assert (arithmetic["lengths"] % 2 == 1).all()
  assert ((arithmetic["inputs"] > 0).sum(1) == arithmetic["lengths"] - 1).all()  # + '='


def test_generation_is_a_function_of_settings_seed_and_split():
  settings = _small("binary_addition")
  one, again = (rows.generate("binary_addition", settings, 3, "val") for _ in range(2))
  for key in one:
    np.testing.assert_array_equal(one[key], again[key])
  other = rows.generate("binary_addition", settings, 4, "val")
  assert not np.array_equal(one["inputs"], other["inputs"])


def test_the_task_loads_through_lra_data_tasks(tmp_path):
  config = task_config("parity").get_config("transformer,cpu")
  config.data.data_dir = str(tmp_path / "parity")
  config.data.update(num_train=50, num_val=20, num_test=20, test_max_length=60)
  task = tasks.load(config)
  assert (task.per_position, task.chance, task.num_classes, task.vocab_size) == \
      (True, 0.5, 2, 4)
  widths = {split: task.splits[split]["inputs"].shape[1] for split in task.splits}
  assert widths == {"train": 39, "val": 59, "test": 59} and task.max_len == 59
  assert task.max_len == loader.max_len("parity", config.data)
  assert set(task.splits["test"]) == {"inputs", "labels", "lengths"}
  again = tasks.load(config)  # read back, not made again
  np.testing.assert_array_equal(again.splits["val"]["labels"], task.splits["val"]["labels"])
  config.data.test_max_length = 61
  with pytest.raises(UserError, match="test_max_length"):
    tasks.load(config)


def test_parity_config_is_grazzis_yaml_and_takes_every_mixer():
  from lra import models
  from lra.models import registry
  c = task_config("parity").get_config("mamba")
  assert (c.model.num_layers, c.model.emb_dim, c.model.feedforward) == (1, 16, False)
  assert (c.num_train_steps, c.batch_size, c.learning_rate, c.warmup_steps) == \
      (20_000, 256, 1e-3, 2_000)
  d = c.data
  assert (d.layout, d.train_min_length, d.train_max_length, d.test_min_length,
          d.test_max_length, d.num_train) == ("grazzi", 3, 40, 40, 256, 5_120_000)
  facts = tasks.FACTS["parity"]
  for name in registry.names():
    for option in ("", ",cpu"):
      c = task_config("parity").get_config(name + option)
      net = models.build(c.model.to_dict(), vocab_size=facts.vocab_size,
                         num_classes=facts.num_classes, max_len=loader.max_len("parity", c.data),
                         pair=False, denoise=True)  # every setting checked, no tracing
      assert isinstance(net, models.Denoiser), name
      if "bidirectional" in c.model.attention:
        assert c.model.attention.bidirectional is False, name
