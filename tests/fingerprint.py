"""Every mixer's numbers, written to one file, so that a refactoring can show it changed none.

    python -m tests.fingerprint --out before.npz     # on the tree before the change
    python -m tests.fingerprint --out after.npz      # on the tree after it
    python -m tests.fingerprint --compare before.npz after.npz

For each registered mixer (tiny settings, tests/helpers.py) and each of its variants (the other
form of its core, bidirectional, the gated combination; a Hybrid stack for GLA), a two-layer
classifier is built from PRNGKey(0) and run on padded tokens with dropout on: the file holds
its parameters, logits, loss and every gradient, by parameter path. `--compare` wants every
array bit-equal (same paths, shapes, dtypes and bytes) and exits 1 naming what differs. Both
files must come from the same machine: XLA's float results differ between CPU families.
"""
from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lra import models, rules
from lra.models import registry
from tests.helpers import padded_tokens, tiny_model

LENGTH, VOCAB, CLASSES = 13, 20, 3
# A variant: (name, settings of config.model.attention it needs, config.model overrides).
_VARIANTS = (("tiny", {}, {}),
             ("recurrent_form", {"form": "recurrent"}, {}),
             ("bidirectional", {"bidirectional": True}, {}),
             ("gated", {"bidirectional": True, "combine": "gated"}, {}))
_OLD_KEYS = {"form": "scan"}  # Mamba's earlier name for its form ("scan") ...
_OLD_VALUES = {"recurrent": "associative"}  # ... and its name for the reference form


def _spelled(name: str, wanted: dict) -> dict | None:
  """`wanted` as mixer `name` spells its settings, or None when it lacks one of them."""
  declared = rules.declared(registry.get(name))
  spelled = {}
  for key, value in wanted.items():
    key = key if key in declared else _OLD_KEYS.get(key, key)
    if key not in declared:
      return None
    rule = declared[key].rule
    if isinstance(rule, rules.Choice) and value not in rule.values:
      value = _OLD_VALUES.get(value, value)
    spelled[key] = value
  return spelled


def variants(name: str):
  """(variant name, config.model dict) of each variant mixer `name` takes."""
  for variant, attention, encoder in _VARIANTS:
    spelled = _spelled(name, attention)
    if spelled is not None:
      yield variant, tiny_model(name, attention=spelled, **encoder)
  if name == "gla":
    yield "hybrid", tiny_model(name, hybrid_conv=3)


def numbers(model: dict) -> dict[str, np.ndarray]:
  """Parameters, logits, loss and gradients of the classifier `model` (config.model)."""
  classifier = models.build(model, vocab_size=VOCAB, num_classes=CLASSES, max_len=LENGTH,
                            pair=False)
  tokens_BxL = padded_tokens(VOCAB, LENGTH, seed=3)
  labels_B = jnp.arange(tokens_BxL.shape[0]) % CLASSES
  params = classifier.init(jax.random.PRNGKey(0), tokens_BxL)

  def loss(p):
    logits = classifier.apply(p, tokens_BxL, deterministic=False,
                              rngs={"dropout": jax.random.PRNGKey(1)})
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels_B).mean(), logits

  (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  found = {"loss": value, "logits": logits}
  for prefix, tree in (("param", params), ("grad", grads)):
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
      found[f"{prefix}{jax.tree_util.keystr(path)}"] = leaf
  return {key: np.asarray(value) for key, value in found.items()}


def fingerprint(names=None) -> dict[str, np.ndarray]:
  """{mixer/variant/what: array} for every mixer (or those in `names`)."""
  found = {}
  for name in names or registry.names():
    for variant, model in variants(name):
      for key, value in numbers(model).items():
        found[f"{name}/{variant}/{key}"] = value
  return found


def differences(before: dict, after: dict) -> list[str]:
  """One line for each array that is missing from one side or not bit-equal."""
  lines = [f"only before: {key}" for key in sorted(set(before) - set(after))]
  lines += [f"only after: {key}" for key in sorted(set(after) - set(before))]
  for key in sorted(set(before) & set(after)):
    a, b = before[key], after[key]
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
      lines.append(f"differs: {key} ({a.dtype}{a.shape} vs {b.dtype}{b.shape})")
  return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="write the fingerprint of this tree here (.npz)")
  parser.add_argument("--mixers", help="comma-separated mixer names (default: all)")
  parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
  args = parser.parse_args(argv)
  if args.compare:
    before, after = (dict(np.load(path)) for path in args.compare)
    lines = differences(before, after)
    print("\n".join(lines) or f"bit-identical: {len(before)} arrays")
    return 1 if lines else 0
  if not args.out:
    parser.error("give --out FILE or --compare BEFORE AFTER")
  found = fingerprint(args.mixers.split(",") if args.mixers else None)
  np.savez(args.out, **found)
  mixers = len({key.split("/")[0] for key in found})
  print(f"{len(found)} arrays of {mixers} mixers written to {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
