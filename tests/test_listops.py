"""Tests for the ListOps generator and reader (no JAX needed)."""

import os
import random
import statistics

import numpy as np
import pytest

from lra.data import listops
from lra.errors import UserError

SMALL = dict(min_length=10, max_length=200, max_depth=5, max_args=10)


def generate_tree(rng: random.Random, depth: int, max_depth: int, max_args: int):
  """One tree drawn as the generator draws it, its root at `depth` (the original's is 1), with
  no length limit (the generator's own draws stop once a tree is too long)."""
  return listops._grow(rng, depth, max_depth, max_args, float("inf"))[0]


@pytest.fixture(scope="module")
def small_examples():
  return listops.generate(400, seed=3, workers=1, progress=False, **SMALL)


def reference_eval(source: str) -> int:
  """Independent stack evaluator over the preprocessed token stream (prefix form)."""
  ops = {
    "[MIN": min,
    "[MAX": max,
    "[MED": lambda v: int(statistics.median(v)),
    "[SM": lambda v: sum(v) % 10,
  }
  stack: list[tuple[str, list[int]]] = []
  result = None
  for tok in source.replace("]", "X").replace("(", " ").replace(")", " ").split():
    if tok in ops:
      stack.append((tok, []))
      continue
    value = ops[stack[-1][0]](stack.pop()[1]) if tok == "X" else int(tok)
    if stack:
      stack[-1][1].append(value)
    else:
      assert result is None, "more than one top-level expression"
      result = value
  assert not stack and result is not None
  return result


def test_known_strings_and_tokens():
  assert listops.tree_to_string(("[MAX", (2, 9))) == "( ( ( [MAX 2 ) 9 ) ] )"
  tree = ("[MAX", (2, ("[MIN", (4, 7))))
  assert listops.tree_to_string(tree) == "( ( ( [MAX 2 ) ( ( ( [MIN 4 ) 7 ) ] ) ) ] )"
  assert listops.tree_to_string(3) == "3"
  assert listops.tree_length(tree) == 7
  assert listops.evaluate_tree(tree) == 4
  assert listops.evaluate_tree(("[MED", (1, 2, 4, 9))) == 3  # int(median 3.0)
  assert listops.evaluate_tree(("[MED", (1, 2))) == 1  # int(1.5)
  assert listops.evaluate_tree(("[SM", (9, 8, 7))) == 4


def test_vocabulary_and_tokenize():
  assert listops.VOCAB == ("[MIN", "[MAX", "[MED", "[SM",
                           "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "X")
  assert (listops.PAD_ID, listops.OOV_ID) == (0, 16)
  assert (listops.VOCAB_SIZE, listops.NUM_CLASSES) == (17, 10)
  assert listops.tokenize("( ( ( [MAX 2 ) 9 ) ] )") == [2, 7, 14, 15]
  assert listops.tokenize("( ( [FOO 12 ) ] )") == [16, 16, 15]


def test_labels_match_independent_evaluator(small_examples):
  assert len(small_examples) == 400
  for source, label in small_examples:
    assert label == reference_eval(source), source


def test_lengths_in_window_and_unique(small_examples):
  sources = [s for s, _ in small_examples]
  assert len(set(sources)) == len(sources)
  assert len({len(listops.tokenize(s)) for s in sources}) > 20  # lengths actually vary
  for source in sources:
    n = len(listops.tokenize(source))
    assert SMALL["min_length"] < n < SMALL["max_length"]
    # The original bracket structure is intact: one "(" per ")" and an outer pair.
    assert source.count("(") == source.count(")") and source.startswith("( ")


def test_tree_helpers_agree_with_string():
  rng = random.Random(7)
  for _ in range(300):
    tree = generate_tree(rng, 1, 6, 5)
    source = listops.tree_to_string(tree)
    assert listops.tree_length(tree) == len(listops.tokenize(source))
    assert listops.evaluate_tree(tree) == reference_eval(source)


def test_determinism_and_worker_independence():
  args = dict(min_length=10, max_length=100, max_depth=4, progress=False)
  one = listops.generate(500, seed=11, workers=1, **args)
  assert one == listops.generate(500, seed=11, workers=1, **args)
  assert one == listops.generate(500, seed=11, workers=2, **args)
  assert one != listops.generate(500, seed=12, workers=1, **args)
  # A prefix request gives the prefix of a longer one (chunks are consumed in order).
  assert listops.generate(123, seed=11, workers=1, **args) == one[:123]


def test_structure_at_max_depth_2():
  rng = random.Random(0)
  operators = 0
  draws = 20_000
  for _ in range(draws):
    tree = generate_tree(rng, 1, 2, 4)
    if isinstance(tree, int):
      assert 0 <= tree <= 9
      continue
    operators += 1
    op, children = tree
    assert op in listops.OPERATORS
    assert 2 <= len(children) <= 4
    assert all(isinstance(c, int) and 0 <= c <= 9 for c in children)
  # The root is an operator with probability 0.25 (sd of the fraction ~0.003 here).
  assert abs(operators / draws - 0.25) < 0.015
  # Nodes at max_depth are always values.
  assert all(isinstance(generate_tree(rng, 3, 3, 10), int) for _ in range(100))


def test_arg_counts_cover_range():
  examples = listops.generate(200, min_length=1, max_length=100, max_depth=2, max_args=5,
                              seed=1, workers=1, progress=False)
  counts = {len(listops.tokenize(s)) - 2 for s, _ in examples}
  assert counts == {2, 3, 4, 5}


def test_early_stop_matches_full_tree():
  # The generator gives up on trees once they exceed the window; it must draw exactly what
  # generate_tree draws up to that point, so accepted trees are unaffected.
  for seed in range(300):
    tree = generate_tree(random.Random(seed), 1, 8, 10)
    grown = listops._grow(random.Random(seed), 1, 8, 10, 60)
    if listops.tree_length(tree) <= 60:
      assert grown == (tree, listops.tree_length(tree))
    else:
      assert grown is None


def test_impossible_window_raises():
  with pytest.raises(UserError, match="no tree"):
    listops.generate(5, min_length=1, max_length=4, max_depth=2, max_args=3,
                     workers=1, progress=False)  # only lengths 1, 4, 5 exist


def test_split_files_round_trip(tmp_path):
  data_dir = tmp_path / "new" / "listops"
  paths = listops.generate_split_files(data_dir, num_train=150, num_val=30, num_test=20,
                                       seed=5, workers=1, progress=False, **SMALL)
  assert set(paths) == {"train", "val", "test"}
  assert sorted(os.listdir(data_dir)) == ["basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]
  expected = listops.generate(200, seed=5, workers=1, progress=False, **SMALL)
  sources = {}
  start = 0
  for split, count in (("train", 150), ("val", 30), ("test", 20)):
    with open(paths[split], encoding="utf-8") as f:
      lines = f.read().splitlines()
    assert lines[0] == "Source\tTarget"
    assert len(lines) == count + 1
    rows = [tuple(line.split("\t")) for line in lines[1:]]
    assert rows == [(s, str(l)) for s, l in expected[start:start + count]]
    sources[split] = {s for s, _ in rows}
    start += count

    max_length = 60  # shorter than some examples: checks truncation and padding
    inputs, labels = listops.read_split(paths[split], max_length)
    assert inputs.dtype == np.int32 and labels.dtype == np.int32
    assert inputs.shape == (count, max_length) and labels.shape == (count,)
    assert labels.tolist() == [int(l) for _, l in rows]
    for row, (source, _) in zip(inputs, rows):
      ids = listops.tokenize(source)[:max_length]
      assert row.tolist() == ids + [0] * (max_length - len(ids))
  assert any(len(listops.tokenize(s)) > 60 for s in sources["train"])
  assert not (sources["train"] & sources["val"] or sources["train"] & sources["test"]
              or sources["val"] & sources["test"])


@pytest.mark.parametrize("content, line, what", [
  ("", 1, "empty"),
  ("Input\tLabel\n( ( [SM 1 ) ] )\t1\n", 1, "header"),
  ("Source\tTarget\n( ( ( [SM 1 ) 2 ) ] )\t3\n1\t2\t3\n", 3, "columns"),
  ("Source\tTarget\n( ( ( [SM 1 ) 2 ) ] )\t3\n4\n", 3, "columns"),
  ("Source\tTarget\n( ( ( [SM 1 ) 2 ) ] )\t12\n", 2, "label"),
  ("Source\tTarget\n( ( ( [SM 1 ) 2 ) ] )\tthree\n", 2, "label"),
])
def test_malformed_files(tmp_path, content, line, what):
  path = tmp_path / "bad.tsv"
  path.write_text(content, encoding="utf-8")
  with pytest.raises(UserError) as info:
    listops.read_split(path, 16)
  message = str(info.value)
  assert str(path) in message and f"line {line}" in message and what in message


def test_missing_file(tmp_path):
  path = tmp_path / "nope.tsv"
  with pytest.raises(UserError, match="nope.tsv"):
    listops.read_split(path, 16)


def test_header_only_file(tmp_path):
  path = tmp_path / "empty_split.tsv"
  listops.write_tsv(path, [])
  inputs, labels = listops.read_split(path, 8)
  assert inputs.shape == (0, 8) and labels.shape == (0,)
