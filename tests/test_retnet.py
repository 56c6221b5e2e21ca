"""RetNet (Sun et al. 2023): the layer against a reference written from the paper's parallel
form (tests/naive.py: (q k^T * D) v with the decay matrix D, rotary positions, per-head RMS
norm and swish gate; outputs and gradients of parameters and input), causal and bidirectional
(the average of the forward run and the run over the reversed sequence); fla's
initialisation; its default settings and the head widths' one-line errors. What the family
shares is tests/test_recurrent_family.py's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.retnet import RetNet  # (registers "retnet")
from lra.rules import SettingError
from tests import helpers, naive

WIDTH, HEADS, LENGTH = 8, 2, 13  # K = 8 / 2 = 4, V = 16 / 2 = 8 per head (expand 1 and 2)


def _inputs(seed):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(2, LENGTH, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([LENGTH, 6], LENGTH)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32) * mask[..., None]
  return x, mask, cotangent


def _params(mixer, mask):
  """fla's N(0, 0.02) init plus N(0, 0.3) noise: outputs of order 1, a non-trivial norm."""
  return lambda x: helpers.perturb(mixer.init(jax.random.PRNGKey(0), x, jnp.asarray(mask),
                                              deterministic=True), scale=0.3)


# Both passes by default (the forward one among them); one pass alone `-m slow`.
@pytest.mark.parametrize("bidirectional", [pytest.param(False, marks=pytest.mark.slow), True])
def test_layer_matches_the_parallel_form(bidirectional):
  """Outputs and gradients (parameters and input) of the chunked layer equal the paper's
  parallel form; a row with trailing padding included."""
  x, mask, cotangent = _inputs(1)
  mixer = RetNet(num_heads=HEADS, chunk_size=4, bidirectional=bidirectional)
  reference = lambda p, x: naive.retnet(p["params"], x, jnp.asarray(mask), bidirectional)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, _params(mixer, mask), reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
  assert np.abs(np.asarray(ref)).max() > 0.1
  assert np.abs(np.asarray(ref_grads[1])).max() > 0.01  # input gradients that matter


def test_fla_initialisation_and_head_sizes():
  width = 64
  mixer = RetNet(num_heads=4)
  p = jax.jit(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 3, width)),
                                 jnp.ones((1, 3), bool), deterministic=True))()["params"]
  shapes = {k: v["kernel"].shape for k, v in p.items() if "kernel" in v}
  assert shapes == {"q_proj": (64, 4, 16), "k_proj": (64, 4, 16), "v_proj": (64, 4, 32),
                    "g_proj": (64, 4, 32)}
  for kernel in [v["kernel"] for v in p.values() if "kernel" in v] + \
      [p["output"]["o_proj"]["kernel"]]:
    assert abs(np.std(kernel) - 0.02) < 0.002 and abs(np.mean(kernel)) < 0.002
  np.testing.assert_array_equal(p["output"]["norm"]["scale"], np.ones(32))
  assert mixer.head_sizes(width) == (4, 16, 32)


def test_defaults_and_head_width_errors():
  """fla's defaults; a width whose channels do not split into the heads, or an odd key width
  (the rotation turns pairs), is one line (the settings' own rules: tests/test_models.py)."""
  assert registry.default_settings("retnet") == dict(
      expand_k=1.0, expand_v=2.0, form="chunked", chunk_size=64, bidirectional=False,
      combine="mean")
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  for bad, match in ((dict(expand_k=0.75), "expand_k=0.75 .* int\\(width 8 \\* expand_k\\) = 6 "
                                           "channels must be a positive multiple of "
                                           "config.model.num_heads=4"),
                     (dict(expand_v=0.25), "expand_v=0.25 .* = 2 channels"),
                     (dict(expand_k=0.5), "expand_k=0.5 .* even key width .* = 1\\)")):
    mixer = RetNet(**{"num_heads": 4, **bad})
    with pytest.raises(SettingError, match=match) as error:
      mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    assert "\n" not in str(error.value)
