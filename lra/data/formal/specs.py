"""The formal-language tasks by name: what each samples, its vocabulary and classes, its kind of
output, the layouts it can be laid out in, and its data settings' defaults (read by
lra/data/settings.py). How a task becomes rows of tokens and labels is lra/data/formal/rows.py.

Kinds: "class" (one answer after the string), "sequence" (an output string after the input
string), "tagging" (a label at every input position: the word problems).
Layouts (how the string and its answer are laid out, and what the length axis counts):
- "deletang": Deletang et al.'s (experiments/utils.py make_model_with_empty_targets): the n
  input symbols, then one output slot per output symbol (1 for a class task), the answer
  read at the slots; the length is n. Lengths 1..40 to train, 41..500 to test (their paper).
- "grazzi": Grazzi et al.'s (adankow/unlocking_state_tracking, read at commit dd420c5,
  xlstm/experiments/data/formal_language/tasks/*.py with the data set's shift of 1, and the
  yamls' lengths 3..40 to train, 40..256 to validate and test): their length s counts the
  answer token. Parity: s - 1 bits, the answer read at the last bit. Modular arithmetic: an
  odd s = 2k - 1 (k uniform in (lo+1)//2..(hi+1)//2), an expression of s - 2 symbols and '=',
  the answer read at '='. With brackets: s uniform, raised to 5, an expression of s - 3
  symbols and '=', the answer read at '='. Their '=' is the output slot here.
- "merrill": the word problems: n elements, a label at each.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from lra.data.formal import cs, dcf, groups, regular


@dataclasses.dataclass(frozen=True)
class Spec:
  sample: Callable  # (rng, count, n) -> (x, y, scored), in the source's ids
  inputs: int       # the source's input symbols 0..inputs-1 (their input_size)
  classes: int      # the source's output symbols 0..classes-1 (their output_size)
  kind: str         # "class", "sequence" or "tagging"
  layouts: tuple[str, ...]  # the first is the default
  source: str       # where it is read

  @property
  def vocab_size(self) -> int:
    """Token 0 pads; symbol i is token i + 1; an output slot (class and sequence tasks) is
    token inputs + 1 (Deletang's empty output token, their id input_size)."""
    return self.inputs + (1 if self.kind == "tagging" else 2)


def _composed(draw, answer):
  def sample(rng, count, n):
    x = draw(rng, count, n)
    return (x, *answer(x))
  return sample


_DELETANG = "neural_networks_chomsky_hierarchy tasks/"


def _deletang(draw, answer, inputs, classes, kind, file, grazzi=False):
  return Spec(_composed(draw, answer) if answer else draw, inputs, classes, kind,
              ("grazzi", "deletang") if grazzi else ("deletang",), _DELETANG + file)


def _word(group: str) -> Spec:
  return Spec(_composed(functools.partial(groups.draw, group),
                        functools.partial(groups.answer, group)),
              groups.order(group), groups.order(group), "tagging", ("merrill",),
              "word-problem src/generate_data.py")


SPECS: dict[str, Spec] = {
    "parity": _deletang(regular.parity_draw, regular.parity_answer, 2, 2, "class",
                        "regular/parity_check.py", grazzi=True),
    "even_pairs": _deletang(regular.parity_draw, regular.even_pairs_answer, 2, 2, "class",
                            "regular/even_pairs.py"),
    "cycle_navigation": _deletang(regular.cycle_draw, regular.cycle_answer, 3, regular.CYCLE,
                                  "class", "regular/cycle_navigation.py"),
    "modular_arithmetic": _deletang(regular.arithmetic_draw, regular.arithmetic_answer,
                                    regular.ARITHMETIC_INPUTS, regular.MODULUS, "class",
                                    "regular/modular_arithmetic.py", grazzi=True),
    "modular_arithmetic_brackets": _deletang(dcf.brackets_sample, None, dcf.BRACKETS_INPUTS,
                                             regular.MODULUS, "class",
                                             "dcf/modular_arithmetic_brackets.py", grazzi=True),
    "reverse_string": _deletang(dcf.reverse_draw, dcf.reverse_answer, 2, 2, "sequence",
                                "dcf/reverse_string.py"),
    "stack_manipulation": _deletang(dcf.stack_draw, dcf.stack_answer, 5, 3, "sequence",
                                    "dcf/stack_manipulation.py"),
    "duplicate_string": _deletang(cs.bits_draw, cs.duplicate_answer, 2, 2, "sequence",
                                  "cs/duplicate_string.py"),
    "odds_first": _deletang(cs.bits_draw, cs.odds_first_answer, 2, 2, "sequence",
                            "cs/odds_first.py"),
    "binary_addition": _deletang(cs.addition_draw, cs.addition_answer, 3, 3, "sequence",
                                 "cs/binary_addition.py"),
    "bucket_sort": _deletang(cs.buckets_draw, cs.bucket_sort_answer, cs.BUCKETS, cs.BUCKETS,
                             "sequence", "cs/bucket_sort.py"),
    "word_s3": _word("S3"),
    "word_z60": _word("Z60"),
    "word_a5": _word("A5"),
    "word_s5": _word("S5"),
}

# Each layout's lengths (train_min_length, train_max_length, test_min_length,
# test_max_length): Deletang's paper, Grazzi's yamls; the word problems' (ours: Merrill et al.
# train and test at one length k, with all shorter ones in training) train like Grazzi's.
LENGTHS = {"deletang": (1, 40, 41, 500), "grazzi": (3, 40, 40, 256), "merrill": (2, 40, 41, 256)}
# Examples: Grazzi's parity yaml draws 5,120,000 (20,000 steps of 256, each example once);
# the other tasks a fixed 1,000,000 (their sources draw fresh strings at every step: 128M
# for Deletang's 1,000,000 steps of 128, too many to store). Validation and test: 8,192 each
# (Grazzi's yamls).
NUM_TRAIN = {"parity": 5_120_000}


def defaults(task: str) -> dict:
  """The task's data settings in their order (lra/data/settings.py declares them)."""
  spec = SPECS[task]
  layout = spec.layouts[0]
  lengths = dict(zip(("train_min_length", "train_max_length", "test_min_length",
                      "test_max_length"), LENGTHS[layout]))
  chosen = {"layout": layout} if len(spec.layouts) > 1 else {}
  return {**chosen, **lengths, "num_train": NUM_TRAIN.get(task, 1_000_000), "num_val": 8192,
          "num_test": 8192}


@dataclasses.dataclass(frozen=True)
class Axis:
  """How a layout draws lengths: the values drawn uniformly (`values(lo, hi)`), the task
  length n each gives the sampler, the length recorded (the layout's length axis), and
  whether the answer has output slots after the string."""
  values: Callable
  n: Callable
  length: Callable
  slots: bool


def _span(lo, hi):
  return list(range(lo, hi + 1))


def _odd(lo, hi):  # Grazzi's modular arithmetic: s = 2k - 1
  return [2 * k - 1 for k in range((lo + 1) // 2, (hi + 1) // 2 + 1)]


_SAME = Axis(_span, lambda v: v, lambda v: v, True)
GRAZZI = {
    "parity": Axis(_span, lambda s: s - 1, lambda s: s, False),
    "modular_arithmetic": Axis(_odd, lambda s: s - 2, lambda s: s, True),
    "modular_arithmetic_brackets": Axis(_span, lambda s: max(s, 5) - 3, lambda s: max(s, 5),
                                        True),
}
LEAST = {"parity": 2, "modular_arithmetic": 3}  # Grazzi's s: at least one symbol


def axis(task: str, layout: str) -> Axis:
  return GRAZZI[task] if layout == "grazzi" else _SAME
