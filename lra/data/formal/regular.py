"""The regular tasks of Deletang et al. 2023 ("Neural Networks and the Chomsky Hierarchy",
google-deepmind/neural_networks_chomsky_hierarchy, tasks/regular/*.py, read at commit 2b8eb4b):
parity check, even pairs, cycle navigation and modular arithmetic without brackets. Each is a
class task (one answer per string).

Every task here is two functions, as in the package's other families: `draw(rng, count, n)`,
count strings of task length n in the source's ids (a count x m int array; m = n but for
modular arithmetic, whose even n give n - 1 tokens, as theirs), and `answer(x)`, the source's
output function on those strings: (y, scored), y a count x 1 array of classes and scored None
(every output position is scored). specs.py composes the two into each task's sampler.
"""
from __future__ import annotations

import numpy as np

MODULUS = 5  # modular arithmetic's modulus (their default, "We use 5 in the paper")
CYCLE = 5  # cycle navigation's circle (their _cycle_length)
# Modular arithmetic's ids (theirs: OP_BY_CHARACTER offset by the modulus): numbers 0..4, then
# '+', '-', '*' and the blank '_' (counted in their input size, never drawn).
PLUS, MINUS, TIMES = MODULUS, MODULUS + 1, MODULUS + 2
ARITHMETIC_INPUTS = MODULUS + 4


def _bits(rng: np.random.Generator, count: int, n: int, symbols: int = 2) -> np.ndarray:
  return rng.integers(0, symbols, size=(count, n))


def parity_answer(x: np.ndarray):
  """Class 1 iff the string holds an odd number of 1s."""
  return (x.sum(axis=1) % 2)[:, None], None


def even_pairs_answer(x: np.ndarray):
  """Class 1 iff the count of unequal neighbours ('01' and '10') is odd."""
  return ((x[:, 1:] != x[:, :-1]).sum(axis=1) % 2)[:, None], None


def cycle_answer(x: np.ndarray):
  """Actions 0, 1, 2 move -1, 0, +1 (their `actions - 1`) from position 0 of a 5-cycle."""
  return ((x - 1).sum(axis=1) % CYCLE)[:, None], None


def arithmetic_length(n: int) -> int:
  """Their sample_batch makes an even length odd by taking one off."""
  return n if n % 2 else n - 1


def arithmetic_draw(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  """Numbers uniform in 0..4 at the even places, operators uniform among +, *, - between."""
  m = arithmetic_length(n)
  x = np.empty((count, m), np.int64)
  x[:, ::2] = rng.integers(0, MODULUS, size=(count, m // 2 + 1))
  x[:, 1::2] = PLUS + rng.integers(0, 3, size=(count, m // 2))
  return x


def arithmetic_answer(x: np.ndarray):
  """The expression's value mod 5, multiplication first, a - b read as a + (-b) (their
  _evaluate_expression): the sum of the products of the additive terms."""
  total = np.zeros(len(x), np.int64)
  term = x[:, 0] % MODULUS
  for place in range(1, x.shape[1], 2):
    op, number = x[:, place], x[:, place + 1]
    product = (term * number) % MODULUS
    fresh = np.where(op == MINUS, -number, number) % MODULUS
    total = np.where(op == TIMES, total, (total + term) % MODULUS)
    term = np.where(op == TIMES, product, fresh)
  return ((total + term) % MODULUS)[:, None], None


def parity_draw(rng, count, n):
  return _bits(rng, count, n)


def cycle_draw(rng, count, n):
  return _bits(rng, count, n, 3)
