"""MQAR, multi-query associative recall (Arora, Eyuboglu et al. 2023, "Zoology: Measuring and
Improving Recall in Efficient Language Models", arXiv 2312.04927): a generator, a reader of its
files and the task loader (generating the data on first use, as ListOps). A task beside LRA's
six, never in LRA's tables or averages (lra/reporting: a table of its own).

An example (vocabulary V, N key-value pairs, length L):

  position  0  1  2  3 ... 2N-2 2N-1 | 2N ... L-1
  input     k1 v1 k2 v2 ... kN   vN   | fillers, and each key once more, at even offsets
  label     -  -  -  -  ...  -    -   | at a repeated key: its value; elsewhere NO_TARGET (-1)

Keys are distinct, drawn from 1..V/2-1, values distinct from V/2..V-1; the queries' offsets
follow a power law (close queries likelier); the fillers are 0 (random tokens of 0..V-1 with
random_non_queries). Token 0 is a real token here: every position is real (Task.padding False).

The target: MQAR is a per-position task, as in the paper (predict the value at every query),
and so it is here: labels are NxL, the model is the encoder with its per-token head
(models.classifiers.Denoiser, Dense(mlp_dim)-GELU-Dense(V) at every position; V classes, as
Zoology's LM head predicts over its whole vocabulary), the loss the mean cross-entropy over the
query positions, and accuracy the share of queries answered right (lra.training.steps
position_loss); with N queries in every example this is Zoology's accuracy, the mean over
examples of each example's share (zoology/train.py, compute_metrics). Not one query classified
per pooled example, because the encoders here are bidirectional: a backward scan would read
the one query before the pairs and need to keep one value, not N (what "Just read twice",
Arora et al. 2024, does on purpose), so the task would no longer measure recall. With N
queries after all the pairs, and no value among the inputs after them, every value a query
needs lies before it: whichever way a mixer reads, what it recalls must pass its state from
the pairs to the queries. The trainer change is small: a task whose Facts say per_position
gets the per-token head and that loss; nothing else in the trainer differs.

Followed from the paper's code (HazyResearch/zoology, commit d88d6f5):
- zoology/data/multiquery_ar.py, lines 88-137 (multiquery_ar): the checks (L even, V > L,
  4N <= L), keys from 1..V/2-1 and values from V/2..V-1, each without replacement (lines
  97-106), the pairs interleaved at the start (109-111), the gaps drawn without replacement
  with p(g) ~ a * g^(a-1), g = 1..(L-2N)/2 (114-120), a key at offset 2*gap of the query part
  with its value as the label at that position (123-133: the label one later, shifted back by
  one), and random_non_queries replacing every 0 by a random token of 0..V-1 (136-137).
- zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py (the paper's Figure 2):
  V = 8,192 (line 11); (L, N) = (64, 4), (128, 8), (256, 16) (lines 15-20; (512, 64)
  commented out); power_a 0.01 and random_non_queries False (lines 31-36); 100,000 train and
  3,000 test examples (lines 39-40). SETTINGS below are its (256, 16) point; PAPER_POINTS all.
Ours: numpy's Generator, not the global seed (each split its own stream from (seed, split));
the draws without replacement by rejection (keys, values: uniform) and as ordered Gumbel top-k
(gaps: the same distribution as numpy's successive choice(replace=False, p=...)); a
validation split of 3,000 more (Zoology validates on its test set).
"""
from __future__ import annotations

import os

import numpy as np

from lra.data import console, publish, record, store
from lra.data.tasks import NO_TARGET, SPLITS, Task
from lra.errors import UserError

# (max_len, num_kv_pairs) of the paper's Figure 2 (configs.py lines 15-20).
PAPER_POINTS = ((64, 4), (128, 8), (256, 16))
# The generator's settings, each a config.data field of the same name (configs/mqar.py), at
# the paper's Figure 2 values (its (256, 16) point); the data command's defaults.
SETTINGS: dict = dict(vocab_size=8192, max_len=256, num_kv_pairs=16, power_a=0.01,
                      random_non_queries=False, num_train=100_000, num_val=3_000,
                      num_test=3_000)
MAX_VOCAB = 1 << 15  # labels are stored as int16 (inputs as uint16)
FIELDS = ("inputs", "labels")
_STREAM = {"train": 0, "val": 1, "test": 2}  # each split's own random stream
_CHUNK_ROWS = 4096  # examples drawn at once


def check_settings(s: dict) -> None:
  """Refuses, in one line, settings no example can have (zoology's asserts, and ours)."""
  v, length, n = s["vocab_size"], s["max_len"], s["num_kv_pairs"]
  problems = [
      (n < 1, f"num_kv_pairs={n}: give at least 1"),
      (length % 2, f"max_len={length} must be even (pairs, then key / filler pairs)"),
      (4 * n > length, f"max_len={length} is too short for num_kv_pairs={n}: it needs "
                       f"4 x num_kv_pairs = {4 * n} (the pairs, then room for each query)"),
      (v <= length, f"vocab_size={v} must be larger than max_len={length} (as Zoology's)"),
      (v // 2 - 1 < n, f"vocab_size={v} has {v // 2 - 1} keys, fewer than num_kv_pairs={n}"),
      (v > MAX_VOCAB, f"vocab_size={v}: at most {MAX_VOCAB}"),
      (not s["power_a"] > 0, f"power_a={s['power_a']}: give a number > 0 (1 = uniform gaps)"),
  ]
  for bad, what in problems:
    if bad:
      raise UserError(f"MQAR: {what}")


def _ordered_sample(rng: np.random.Generator, log_weights, rows: int, k: int) -> np.ndarray:
  """rows x k distinct indices into log_weights, in the order successive draws without
  replacement (each proportional to the weights left) would give: Gumbel top-k."""
  scores = log_weights[None, :] + rng.gumbel(size=(rows, len(log_weights)))
  top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
  order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
  return np.take_along_axis(top, order, axis=1)


def _distinct(rng: np.random.Generator, m: int, rows: int, k: int) -> np.ndarray:
  """rows x k distinct indices of 0..m-1, uniform over ordered draws: rows with a repeat are
  drawn again (few, for k*k <= m), else the dense draw."""
  if k * k > m:
    return _ordered_sample(rng, np.zeros(m), rows, k)
  out = rng.integers(0, m, size=(rows, k))
  while True:
    ordered = np.sort(out, axis=1)
    again = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if not again.any():
      return out
    out[again] = rng.integers(0, m, size=(int(again.sum()), k))


def _rows(rng, rows: int, s: dict) -> tuple[np.ndarray, np.ndarray]:
  """`rows` examples: inputs rows x L (uint16), labels rows x L (int16, NO_TARGET)."""
  v, length, n = s["vocab_size"], s["max_len"], s["num_kv_pairs"]
  half, context = v // 2, 2 * n
  keys = 1 + _distinct(rng, half - 1, rows, n)  # 1..V/2-1
  values = half + _distinct(rng, v - half, rows, n)  # V/2..V-1
  space = (length - context) // 2
  a = s["power_a"]
  gaps = _ordered_sample(rng, np.log(a * np.arange(1, space + 1) ** (a - 1)), rows, n)
  inputs = np.zeros((rows, length), np.int64)
  inputs[:, 0:context:2], inputs[:, 1:context:2] = keys, values
  where = context + 2 * gaps  # each key again, its value the label there
  np.put_along_axis(inputs, where, keys, axis=1)
  labels = np.full((rows, length), NO_TARGET, np.int16)
  np.put_along_axis(labels, where, values.astype(np.int16), axis=1)
  if s["random_non_queries"]:
    inputs = np.where(inputs == 0, rng.integers(0, v, size=inputs.shape), inputs)
  return inputs.astype(np.uint16), labels


def generate(num: int, settings: dict, seed: int, split: str = "train",
             progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """`num` examples of `split` (inputs num x L uint16, labels num x L int16): a function of
  (settings, seed, split) alone."""
  check_settings(settings)
  rng = np.random.default_rng([seed, _STREAM[split]])
  chunk = _CHUNK_ROWS
  parts = []
  with console.bar(total=num, progress=progress, unit="ex", desc=f"mqar {split}") as bar:
    for start in range(0, num, chunk):
      parts.append(_rows(rng, min(chunk, num - start), settings))
      bar.update(len(parts[-1][0]))
  return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def plan(settings: dict) -> str:
  """What generating with `settings` writes, for the line said before it starts."""
  counts = "/".join(f"{settings[f'num_{split}']:,}" for split in SPLITS)
  total = sum(settings[f"num_{split}"] for split in SPLITS)
  return (f"{counts} examples ({'/'.join(SPLITS)}) of {settings['max_len']} tokens, "
          f"{settings['num_kv_pairs']} key-value pairs, vocabulary {settings['vocab_size']:,}, "
          f"about {total * settings['max_len'] * 4 / 1e6:,.0f} MB")


def make_folder(data_dir: str, settings: dict, seed: int, progress: bool = True) -> dict:
  """Generates the three splits into an empty folder or one generated before (its record,
  lra.data.record); returns split -> examples."""
  check_settings(settings)
  made = {"task": "mqar", "settings": {**settings, "seed": seed},
          "source": {"generator": __name__}}
  with record.writing(data_dir, made, record.npy_files(SPLITS, FIELDS)):
    for split in SPLITS:
      inputs, labels = generate(settings[f"num_{split}"], settings, seed, split, progress)
      store.write_split(data_dir, split, {"inputs": inputs, "labels": labels})
  return {split: settings[f"num_{split}"] for split in SPLITS}


def read_split(data_dir: str, split: str, vocab_size: int, max_len: int,
               remake: str) -> dict:
  """A split's files: {"inputs": lazy rows, "labels": N x L int16}. A file that is damaged,
  of another shape, or holds a token, target or query that no MQAR example can have, raises
  one UserError naming it and `remake`."""
  files = {field: store.path(data_dir, split, field) for field in FIELDS}
  inputs = store.open_array(files["inputs"], 2, remake)
  labels = store.open_array(files["labels"], 2, remake)

  def bad(field: str, what: str) -> UserError:
    return UserError(f"{files[field]} is not MQAR data ({what}); make the data again with: "
                     f"{remake}")

  if inputs.shape[1] != max_len:
    raise bad("inputs", f"rows of {inputs.shape[1]} tokens, the config's max_len is {max_len}")
  if labels.shape != inputs.shape:
    raise bad("labels", f"shape {labels.shape}, its inputs file's is {inputs.shape}")
  tokens, targets = np.asarray(inputs), np.asarray(labels)
  if tokens.size and int(tokens.max()) >= vocab_size:
    raise bad("inputs", f"token {int(tokens.max())} outside the vocabulary 0..{vocab_size - 1}")
  asked = targets != NO_TARGET
  values, keys = targets[asked], tokens[asked]
  half = vocab_size // 2
  if values.size and (values.min() < half or values.max() >= vocab_size):
    raise bad("labels", f"a target outside the values {half}..{vocab_size - 1}")
  if keys.size and (keys.min() < 1 or keys.max() >= half):
    raise bad("labels", f"a target at a position that holds no key (1..{half - 1})")
  return {"inputs": store.Rows(inputs, np.arange(len(inputs))),
          "labels": targets.astype(np.int16)}


def generate_command(data) -> str:
  flags = {**{k: data[k] for k in SETTINGS}, "seed": data.seed}
  return "python -m lra.data mqar --data_dir=" + data.data_dir + "".join(
      f" --{k}={v}" for k, v in flags.items())


def _complete(data_dir: str) -> bool:
  return store.exists(data_dir, SPLITS) and record.is_complete(record.read(data_dir))


def load(config) -> Task:
  """The MQAR task from config.data.data_dir, generated there first if missing and allowed.
  Files given by hand are read as they are; generated ones must have the config's settings."""
  data = config.data
  settings = {k: data[k] for k in SETTINGS}
  check_settings(settings)
  remake = generate_command(data)
  record.verify(data.data_dir, remake)  # generated files changed since are neither read nor made
  if not _complete(data.data_dir):
    if not data.generate_if_missing:
      raise UserError(f"MQAR data not found in {data.data_dir}; make it with: {remake}")

    def make():
      print(f"MQAR data not found in {data.data_dir}; generating {plan(settings)} there "
            f"(same as: {remake})", flush=True)
      make_folder(data.data_dir, settings, data.seed)

    publish.prepare_once(data.data_dir, lambda: _complete(data.data_dir), make)
  made = record.read(data.data_dir)
  note = {"record": None, "cut": None}
  if made is not None:
    recorded = made["settings"].get("max_len")
    if recorded != data.max_len:  # record.compare would cut the rows: not MQAR's
      raise UserError(f"config.data.max_len={data.max_len}, the data in {data.data_dir} has "
                      f"max_len={recorded}; MQAR rows are never cut (queries fill the whole "
                      f"row): make it again with: {remake}")
    note = record.compare(made, data.data_dir, "mqar", data, remake)
  splits = {s: read_split(data.data_dir, s, data.vocab_size, data.max_len, remake)
            for s in SPLITS}
  record.verify(data.data_dir, remake)
  task = Task.of("mqar", data.max_len, splits, padding=False, data=note)
  task.vocab_size = task.num_classes = data.vocab_size  # the data's (FACTS: the paper's)
  return task
