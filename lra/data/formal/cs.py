"""The context-sensitive tasks of Deletang et al. 2023 (tasks/cs/*.py of
google-deepmind/neural_networks_chomsky_hierarchy, read at commit 2b8eb4b): duplicate string,
odds first, binary addition and bucket sort, all sequence tasks.

`draw(rng, count, n)` gives count strings of task length n in the source's ids; `answer(x)`
the source's output for them: (y, scored), y count x outputs, scored the number of leading
output positions their accuracy counts per string (None: all).
"""
from __future__ import annotations

import numpy as np

PLUS, END = 2, 2  # binary addition: '+' in the input, the end symbol in the output
BUCKETS = 5  # bucket sort's alphabet ("We use 5 in the paper")


def bits_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  """Binary strings (duplicate string and odds first: their vocab_size 2)."""
  return rng.integers(0, 2, size=(count, n))


def buckets_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  return rng.integers(0, BUCKETS, size=(count, n))


def duplicate_answer(x: np.ndarray):
  return np.concatenate([x, x], axis=1), None


def odds_first_answer(x: np.ndarray):
  """Their code's order: the symbols at odd 0-based places, then those at even places
  (x[1::2] + x[::2]; their docstring's example reads the other way round)."""
  return np.concatenate([x[:, 1::2], x[:, ::2]], axis=1), None


def bucket_sort_answer(x: np.ndarray):
  return np.sort(x, axis=1), None


def addition_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  """Their _sample_expressions_and_results. n <= 2: one number uniform in 0..2^n - 2 in n
  little-endian bits. n >= 3: a first number of 1..n-2 bits, '+', a second of the rest, each
  uniform among the nonzero numbers of its width (leading zeros kept), little-endian."""
  places = np.arange(n)[None, :]
  if n <= 2:
    number = rng.integers(0, 2 ** n - 1, size=count)
    return (number[:, None] >> places) & 1
  first = rng.integers(1, n - 1, size=count)[:, None]  # the first number's width
  x = np.empty((count, n), np.int64)
  todo = np.ones(count, bool)
  while todo.any():  # a number that came out 0 is drawn again, its width kept
    x[todo] = rng.integers(0, 2, size=(int(todo.sum()), n))
    a_zero = np.where(places < first, x, 0).sum(axis=1) == 0
    b_zero = np.where(places > first, x, 0).sum(axis=1) == 0
    todo = a_zero | b_zero
  np.put_along_axis(x, first, PLUS, axis=1)
  return x


def addition_answer(x: np.ndarray):
  """The sum in little-endian bits without leading zeros (0 is '0'), the end symbol, 0s to
  n + 1 places; their accuracy counts up to the end symbol. A string without '+' (n <= 2) is
  a number alone, its answer the number itself."""
  count, n = x.shape
  places = np.arange(n)[None, :]
  plus = np.where((x == PLUS).any(axis=1), (x == PLUS).argmax(axis=1), n)[:, None]
  a = np.where(places < plus, x, 0)
  later = np.minimum(plus + 1 + places, n - 1)
  b = np.where(plus + 1 + places < n, np.take_along_axis(x, later, axis=1), 0)
  total = np.zeros((count, n + 1), np.int64)
  carry = np.zeros(count, np.int64)
  for place in range(n):
    s = a[:, place] + b[:, place] + carry
    total[:, place], carry = s & 1, s >> 1
  total[:, n] = carry
  ones = np.where(total == 1, np.arange(n + 1)[None, :], -1).max(axis=1)
  width = np.maximum(ones + 1, 1)  # bits of the sum ('0' for zero)
  y = np.where(np.arange(n + 1)[None, :] < width[:, None], total, 0)
  y[np.arange(count), width] = END
  return y, width + 1
