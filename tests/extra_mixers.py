"""Mixers registered only for the eval.py tests (imported with `eval.py speed --import`)."""
import flax.linen as nn

from lra.models import registry
from lra.models.common import HeadsMixer


@registry.register("test_identity")
class TokenwiseDense(HeadsMixer):
  """No token mixing at all: a cheap second model for the tables."""

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    return nn.Dense(x_BxLxD.shape[-1], dtype=self.dtype)(x_BxLxD)


@registry.register("test_oom")
class RunsOutOfMemory(HeadsMixer):
  """Fails the way XLA does when a device runs out of memory."""

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.9GiB")
