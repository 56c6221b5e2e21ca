"""Whether a run left chance: its test accuracy against the test set's majority-class rate, by
an exact one-sided binomial test at the test-set size (no SciPy: the tail is summed in logs)."""
from __future__ import annotations

import math

from lra.reporting.numbers import finite
from lra.rules import is_int

ALPHA = 0.01  # the test's level: a run whose excess over the majority rate is likelier is noise

# The rule as the tables and docs/eval.md state it.
CHANCE_RULE = (
    "At chance: a run whose test accuracy is not above the test set's majority-class rate p "
    "(results.json's test_majority_rate) by more than noise. With n test examples (test_count) "
    "and k = round(test accuracy x n) of them right, the run is at chance unless "
    f"P[X >= k] <= {ALPHA:g} for X ~ Binomial(n, p), i.e. unless a classifier no better than "
    f"always answering the majority class scores k or more with probability {ALPHA:g} or less "
    "(an exact one-sided binomial test at the 1% level). A cell of seeds shows how many of "
    "them are at chance (`2/5 at chance`), a cell of one run `at chance` when it is; a run "
    "whose results.json records no test_majority_rate or test_count is not judged.")


def binomial_tail(k: int, n: int, p: float) -> float:
  """P[X >= k] for X ~ Binomial(n, p), summed in logs from k upwards (exact to float
  rounding; n in the tens of thousands takes milliseconds)."""
  if k <= 0:
    return 1.0
  if k > n:
    return 0.0
  if p <= 0.0:
    return 0.0
  if p >= 1.0:
    return 1.0
  log_p, log_q = math.log(p), math.log1p(-p)
  log_n = math.lgamma(n + 1)
  terms, top = [], -math.inf
  for i in range(k, n + 1):
    term = log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
    terms.append(term)
    top = max(top, term)
    # Past the mode the terms only fall: stop once they no longer change the sum.
    if i > n * p and term < top - 60.0:
      break
  return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def correct_count(accuracy: float, count: int) -> int:
  """The number of test examples right: accuracy x count, rounded."""
  return int(round(accuracy * count))


def at_chance(result: dict) -> bool | None:
  """Whether one run is at chance by CHANCE_RULE; None where its results.json records no
  test_majority_rate or test_count (not judged). n is test_count, the examples: a task scored
  per position (test_positions) is judged on its examples, as positions of one example are
  not independent draws (the wider margin)."""
  count, rate = result.get("test_count"), finite(result.get("test_majority_rate"))
  accuracy = finite(result.get("test_accuracy"))
  if not is_int(count) or count < 1 or rate is None or accuracy is None:
    return None
  return binomial_tail(correct_count(accuracy, count), count, rate) > ALPHA


def margin(count: int, rate: float) -> float:
  """The smallest test accuracy that is not at chance, minus the majority rate: (the least k
  whose tail is <= ALPHA) / count - rate (docs/eval.md quotes it per task)."""
  k = correct_count(rate, count)
  while binomial_tail(k, count, rate) > ALPHA:
    k += 1
  return k / count - rate
