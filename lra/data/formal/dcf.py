"""The deterministic context-free tasks of Deletang et al. 2023 (tasks/dcf/*.py of
google-deepmind/neural_networks_chomsky_hierarchy, read at commit 2b8eb4b): modular arithmetic
with brackets (a class task), reverse string and stack manipulation (sequence tasks).

`draw(rng, count, n)` gives count strings of task length n in the source's ids; `answer(x)`
the source's output for them: (y, scored), y count x outputs, scored the number of leading
output positions their accuracy counts per string (None: all). Brackets is drawn with its
value (`brackets_sample`): the recursive grammar makes the value as it makes the string, and
`brackets_answer` evaluates a string again, for the comparison with theirs.
"""
from __future__ import annotations

import numpy as np

from lra.data.formal.regular import MINUS, MODULUS, PLUS, TIMES

# Brackets' ids (their alphabet_to_int): numbers 0..4, '+' 5, '-' 6, '*' 7, '(' 8, ')' 9,
# 'x' 10 (never drawn); their input size is modulus + 6 = 11. Multiplication on (their
# TASK_BUILDERS give mult=True).
OPEN, CLOSE = MODULUS + 3, MODULUS + 4
BRACKETS_INPUTS = MODULUS + 6
# Stack manipulation: 0 and 1 are stack symbols, 2 POP, 3 PUSH 0, 4 PUSH 1; the output is the
# final stack top first, then the end symbol 2, then 0s up to n + 1.
POP, END = 2, 2


def _grow(length: int, draws, out: list) -> int:
  """Appends an expression of exactly `length` symbols to `out` and returns its value mod 5:
  their generate_one_expression_and_result (d, -d, (d), (-d) up to 4 symbols; above, a left
  part of 1..length-4 symbols, a right part of the rest, an operator among + - *, bracketed).
  `draws` yields uniform numbers in [0, 1), one per choice."""
  if length <= 4:
    d = int(next(draws) * MODULUS)
    out.extend(([d], [MINUS, d], [OPEN, d, CLOSE], [OPEN, MINUS, d, CLOSE])[length - 1])
    return d if length in (1, 3) else -d % MODULUS
  left = 1 + int(next(draws) * (length - 4))
  out.append(OPEN)
  a = _grow(left, draws, out)
  where = len(out)
  out.append(PLUS)
  b = _grow(length - left - 3, draws, out)
  op = int(next(draws) * 3)
  out[where] = (PLUS, MINUS, TIMES)[op]
  out.append(CLOSE)
  return (a + b, a - b, a * b)[op] % MODULUS


def brackets_sample(rng: np.random.Generator, count: int, n: int):
  """count expressions of n symbols and their values: (x, y, None)."""
  uniforms = rng.random((count, 2 * n))  # at most two choices per symbol
  x = np.empty((count, n), np.int64)
  y = np.empty((count, 1), np.int64)
  for row in range(count):
    out: list = []
    y[row, 0] = _grow(n, iter(uniforms[row].tolist()), out)
    x[row] = out
  return x, y, None


def _parse(tokens: list, at: int) -> tuple[int, int]:
  """(value, next place) of the expression starting at `at` (the grammar of _grow)."""
  first = tokens[at]
  if first < MODULUS:
    return first, at + 1
  if first == MINUS:
    value, at = _parse(tokens, at + 1)
    return -value % MODULUS, at
  a, at = _parse(tokens, at + 1)  # an opening bracket
  if tokens[at] == CLOSE:
    return a, at + 1
  op = tokens[at]
  b, at = _parse(tokens, at + 1)
  value = {PLUS: a + b, MINUS: a - b, TIMES: a * b}[op]
  return value % MODULUS, at + 1


def brackets_answer(x: np.ndarray):
  return np.array([[_parse(row, 0)[0]] for row in x.tolist()], np.int64), None


def reverse_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  return rng.integers(0, 2, size=(count, n))


def reverse_answer(x: np.ndarray):
  return x[:, ::-1].copy(), None


def stack_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  """A stack of 1..n-1 symbols (bottom first), then actions POP / PUSH 0 / PUSH 1 uniform;
  n = 1: one stack symbol (their _sample_expression_and_result)."""
  if n == 1:
    return rng.integers(0, 2, size=(count, 1))
  stack_length = rng.integers(1, n, size=count)
  symbols = rng.integers(0, 2, size=(count, n))
  actions = rng.integers(2, 5, size=(count, n))
  return np.where(np.arange(n)[None, :] < stack_length[:, None], symbols, actions)


def stack_answer(x: np.ndarray):
  """Runs the actions (a POP on an empty stack does nothing); the final stack top first, the
  end symbol, 0s to n + 1 places; their accuracy counts up to the end symbol."""
  count, n = x.shape
  rows = np.arange(count)
  stack = np.zeros((count, n + 1), np.int64)
  top = np.zeros(count, np.int64)  # the stack's size
  for t in range(n):
    a = x[:, t]
    push = a != POP
    stack[rows[push], top[push]] = np.where(a[push] < 2, a[push], a[push] - 3)
    top = np.where(push, top + 1, np.maximum(top - 1, 0))
  places = np.arange(n + 1)[None, :]
  below = np.clip(top[:, None] - 1 - places, 0, None)
  y = np.where(places < top[:, None], np.take_along_axis(stack, below, axis=1), 0)
  y[rows, top] = END
  return y, top + 1
