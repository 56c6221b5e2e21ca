"""GLA (Yang et al. 2023): the layer against a reference written from the paper's recurrence
(tests/naive.py: a plain step loop over the gated state, with the low-rank gate
alpha = sigmoid(.)^(1/16), per-head RMS norm and swish gate; outputs and gradients of
parameters and input), causal and bidirectional (the average of the forward loop and the loop
over the reversed sequence, or their gated combination); fla's initialisation; its default
settings and the head widths' one-line errors. What the family shares (chunked equals
recurrent, the heads, the state count) is tests/test_recurrent_family.py's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.mixers.gla import GLA  # (registers "gla")
from lra.rules import SettingError
from tests import helpers, naive

WIDTH, HEADS, LENGTH, RANK = 8, 2, 13, 3  # K = 4 / 2 = 2, V = 8 / 2 = 4 per head


def _inputs(seed):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(2, LENGTH, WIDTH)), jnp.float32)
  mask = helpers.trailing_mask([LENGTH, 6], LENGTH)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32) * mask[..., None]
  return x, mask, cotangent


def _params(mixer, mask):
  """fla's N(0, 0.02) init plus N(0, 0.5) noise: outputs of order 1, gates from strong to
  weak decay, a non-trivial norm."""
  return lambda x: helpers.perturb(mixer.init(jax.random.PRNGKey(0), x, jnp.asarray(mask),
                                              deterministic=True), scale=0.5)


# Both passes averaged `-m slow`: the gated combination runs both passes too (and one pass is
# the first row).
@pytest.mark.parametrize("bidirectional,combine", [
    (False, "mean"), pytest.param(True, "mean", marks=pytest.mark.slow), (True, "gated")])
def test_layer_matches_a_step_loop(bidirectional, combine):
  """Outputs and gradients (parameters and input) of the chunked layer equal the loop; a row
  with trailing padding included; a gate normalizer of 2 makes the decays strong."""
  x, mask, cotangent = _inputs(1)
  mixer = GLA(num_heads=HEADS, chunk_size=4, gate_low_rank_dim=RANK, gate_logit_normalizer=2,
              bidirectional=bidirectional, combine=combine)
  reference = lambda p, x: naive.gla(p["params"], x, jnp.asarray(mask), bidirectional, 2.0,
                                    combine)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, _params(mixer, mask), reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
  assert np.abs(np.asarray(ref)).max() > 0.1
  assert np.abs(np.asarray(ref_grads[1])).max() > 0.01  # input gradients that matter


def test_fla_initialisation_and_head_sizes():
  width = 64
  mixer = GLA(num_heads=4)
  p = jax.jit(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, 3, width)),
                                 jnp.ones((1, 3), bool), deterministic=True))()["params"]
  shapes = {k: v["kernel"].shape for k, v in p.items() if "kernel" in v}
  assert shapes == {"q_proj": (64, 4, 8), "k_proj": (64, 4, 8), "v_proj": (64, 4, 16),
                    "g_proj": (64, 4, 16), "gk_proj_down": (64, 16), "gk_proj_up": (16, 4, 8)}
  for kernel in [v["kernel"] for v in p.values() if "kernel" in v] + \
      [p["output"]["o_proj"]["kernel"]]:
    assert abs(np.std(kernel) - 0.02) < 0.003 and abs(np.mean(kernel)) < 0.003
  np.testing.assert_array_equal(p["gk_proj_up"]["bias"], np.zeros((4, 8)))
  np.testing.assert_array_equal(p["output"]["norm"]["scale"], np.ones(16))
  assert mixer.head_sizes(width) == (4, 8, 16)


def test_defaults_and_head_width_errors():
  """fla's defaults; a width whose expand_k or expand_v channels do not split into the heads is
  one line (the settings' own rules: tests/test_models.py)."""
  assert registry.default_settings("gla") == dict(
      expand_k=0.5, expand_v=1.0, gate_low_rank_dim=16, gate_logit_normalizer=16,
      allow_neg_eigval=False, form="chunked", chunk_size=64, bidirectional=False,
      combine="mean")
  x, mask = jnp.zeros((1, 3, WIDTH)), jnp.ones((1, 3), bool)
  for bad, match in ((dict(expand_k=0.75), "expand_k=0.75 .* int\\(width 8 \\* expand_k\\) = 6 "
                                           "channels must be a positive multiple of "
                                           "config.model.num_heads=4"),
                     (dict(expand_k=0.25), "expand_k=0.25 .* = 2 channels"),
                     (dict(expand_v=1.25), "expand_v=1.25 .* = 10 channels")):
    mixer = GLA(**{"num_heads": 4, **bad})
    with pytest.raises(SettingError, match=match) as error:
      mixer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    assert "\n" not in str(error.value)
