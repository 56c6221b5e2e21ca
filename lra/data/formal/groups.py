"""The group word problems of Merrill, Petty & Sabharwal 2024 ("The Illusion of State in
State-Space Models", jopetty/word-problem, src/generate_data.py, read at commit 8f910f9):
a string of group elements, and at every position the product of the prefix.

Their numbering, from the abstract_algebra package they build the groups with
(jopetty/abstract_algebra, src/abstract_algebra/finite_algebras.py and permutations.py, read
at commit 94226a0):
- Z_n: element i is a^i, the product of i and j is (i + j) mod n.
- S_n: element i is the i-th of itertools.permutations((1, ..., n)) (lexicographic; 0 is the
  identity), a permutation p mapping k to p[k - 1]; the product a * b is the composition
  a(b(k)) (Perm.__mul__: self.mapping[other.mapping[i]]).
- A_n: S_n's commutator subgroup, the even permutations, numbered in S_n's order
  (subalgebra_from_elements sorts them by their index in S_n).
The label at position t is x_1 * x_2 * ... * x_t, multiplied left to right from the identity
(their scan `acc := group_reduce(acc, x)`, acc starting at element 0, the identity).

`draw(rng, count, n)` draws elements uniformly and independently (theirs: random.choices,
then distinct sequences kept); `answer(x)` is the scan.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

GROUPS = ("S3", "Z60", "A5", "S5")


def _permutations(n: int) -> list[tuple[int, ...]]:
  return list(itertools.permutations(range(n)))


def _is_even(p: tuple[int, ...]) -> bool:
  inversions = sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])
  return inversions % 2 == 0


@functools.lru_cache(maxsize=None)
def table(group: str) -> np.ndarray:
  """The group's multiplication table in their numbering: table[a, b] = a * b."""
  if group.startswith("Z"):
    order = int(group[1:])
    return np.add.outer(np.arange(order), np.arange(order)) % order
  kind, n = group[0], int(group[1:])
  perms = _permutations(n)
  if kind == "A":
    perms = [p for p in perms if _is_even(p)]
  index = {p: i for i, p in enumerate(perms)}
  return np.array([[index[tuple(a[b[k]] for k in range(n))] for b in perms] for a in perms])


def order(group: str) -> int:
  return len(table(group))


def draw(group: str, rng: np.random.Generator, count: int, n: int) -> np.ndarray:
  return rng.integers(0, order(group), size=(count, n))


def answer(group: str, x: np.ndarray):
  """Every prefix's product: (count x n labels, None)."""
  products = table(group)
  y = np.empty_like(x)
  y[:, 0] = x[:, 0]
  for t in range(1, x.shape[1]):
    y[:, t] = products[y[:, t - 1], x[:, t]]
  return y, None
