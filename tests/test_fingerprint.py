"""The before-and-after check of a refactoring (tests/fingerprint.py): it holds a mixer's
parameters, logits, loss and gradients, finds a single flipped bit and a missing array, and
names Mamba's form in either spelling."""
import numpy as np

from tests import fingerprint


def test_fingerprint_finds_a_flipped_bit_and_a_missing_array():
  before = fingerprint.fingerprint(["fnet"])
  kinds = {key.split("/")[2].split("[")[0] for key in before}
  assert kinds == {"loss", "logits", "param", "grad"}
  assert fingerprint.differences(before, dict(before)) == []
  after = dict(before)
  key = next(k for k in sorted(after) if k.startswith("fnet/tiny/grad"))
  flipped = after[key].copy()
  flipped.view(np.uint32).flat[0] ^= 1  # the last bit of one float32
  after[key] = flipped
  del after["fnet/tiny/loss"]
  assert fingerprint.differences(before, after) == ["only before: fnet/tiny/loss",
                                                    f"differs: {key} (float32{flipped.shape} "
                                                    f"vs float32{flipped.shape})"]


def test_every_form_of_a_core_is_a_variant():
  assert [v for v, _ in fingerprint.variants("mamba")][:2] == ["tiny", "recurrent_form"]
  assert [v for v, _ in fingerprint.variants("gla")] == ["tiny", "recurrent_form",
                                                        "bidirectional", "gated", "hybrid"]
