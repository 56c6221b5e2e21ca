"""GLA (Yang et al. 2023): the layer against a reference written from the paper's recurrence (a
plain step loop over the gated state, with the low-rank gate alpha = sigmoid(.)^(1/16),
per-head RMS norm and swish gate; outputs and gradients of parameters and input), causal and
bidirectional (the average of the forward loop and the loop over the reversed sequence);
chunked equals recurrent; the gated combination of the two directions; fla's initialisation;
settings and one-line errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.gla import GLA  # (registers "gla")
from lra.rules import SettingError
from tests import helpers

WIDTH, HEADS, LENGTH, RANK = 8, 2, 13, 3  # K = 4 / 2 = 2, V = 8 / 2 = 4 per head


def _lead(a, ndim):
  """a with leading unit axes up to `ndim` (explicit broadcasting)."""
  a = jnp.asarray(a)
  return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def _loop(q, k, v, alpha, mask):
  """S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, one position at a time (a
  lax.scan over the positions); a padded position leaves S alone and reads 0."""
  batch, _, heads, key = q.shape

  def step(S, inputs):
    q_t, k_t, v_t, alpha_t, real_t = inputs
    new = alpha_t[..., None] * S + k_t[..., None] * v_t[:, :, None, :]
    S = jnp.where(real_t[:, None, None, None], new, S)
    return S, jnp.einsum("bhkv,bhk->bhv", S, q_t) * real_t[:, None, None]

  time_first = lambda a: jnp.moveaxis(a, 1, 0)
  S = jnp.zeros((batch, heads, key, v.shape[-1]))
  _, out = jax.lax.scan(step, S, tuple(map(time_first, (q, k, v, alpha, mask))))
  return jnp.moveaxis(out, 0, 1)


def _reference(p, x, mask, bidirectional=False, normalizer=16.0, combine="mean"):
  """The layer from its equations; bidirectional: the mean of the forward loop and the loop
  over the reversed sequence (reversed back), before the norm; combine="gated": each loop
  weighted by 2 sigmoid(q . w_d + b_d) of its own direction d first."""
  x = jnp.where(mask[..., None], x, 0.0)
  proj = lambda name: jnp.einsum("bld,dhk->blhk", x, p[name]["kernel"])
  q, k, v, g = (proj(n) for n in ("q_proj", "k_proj", "v_proj", "g_proj"))
  q = q / np.sqrt(q.shape[-1])
  low = x @ p["gk_proj_down"]["kernel"]
  up = p["gk_proj_up"]
  alpha = jax.nn.sigmoid(jnp.einsum("blr,rhk->blhk", low, up["kernel"]) + _lead(up["bias"], 4))
  alpha = alpha ** (1.0 / normalizer)
  o = _loop(q, k, v, alpha, mask)
  if bidirectional:
    flip = lambda a: a[:, ::-1]
    back = flip(_loop(flip(q), flip(k), flip(v), flip(alpha), flip(mask)))
    if combine == "gated":
      w, b = p["direction_gate"], p["direction_gate_bias"]
      gate = [2 * jax.nn.sigmoid(jnp.einsum("blhk,hk->blh", q, w[d]) + _lead(b[d], 3))[..., None]
              for d in (0, 1)]
      o, back = gate[0] * o, gate[1] * back
    o = 0.5 * (o + back)
  o = o / jnp.sqrt(jnp.mean(o ** 2, axis=-1, keepdims=True) + 1e-5)
  o = o * _lead(p["output"]["norm"]["scale"], 4) * g * jax.nn.sigmoid(g)
  return jnp.einsum("blhv,hvd->bld", o, p["output"]["o_proj"]["kernel"]) * mask[..., None]


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


@pytest.mark.parametrize("bidirectional,combine", [(False, "mean"), (True, "mean"),
                                                   (True, "gated")])
def test_layer_matches_a_step_loop(bidirectional, combine):
  """Outputs and gradients (parameters and input) of the chunked layer equal the loop; a row
  with trailing padding included; a gate normalizer of 2 makes the decays strong."""
  x, mask, cotangent = _inputs(1)
  mixer = GLA(num_heads=HEADS, chunk_size=4, gate_low_rank_dim=RANK, gate_logit_normalizer=2,
              bidirectional=bidirectional, combine=combine)
  reference = lambda p, x: _reference(p["params"], x, jnp.asarray(mask), bidirectional, 2.0,
                                      combine)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixer, _params(mixer, mask), reference, x, mask, cotangent)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
  assert np.abs(np.asarray(ref)).max() > 0.1
  assert np.abs(np.asarray(ref_grads[1])).max() > 0.01  # input gradients that matter


def test_chunked_equals_recurrent():
  """Chunks of 4 over 13 positions (no multiple), both directions, fla's normalizer 16: the
  same outputs and the same gradients as the position-by-position form."""
  x, mask, cotangent = _inputs(2)
  mixers = [GLA(num_heads=HEADS, form=form, chunk_size=4, gate_low_rank_dim=RANK,
                bidirectional=True) for form in ("chunked", "recurrent")]
  make = _params(mixers[0], mask)
  recurrent = lambda p, x: mixers[1].apply(p, x, jnp.asarray(mask), deterministic=True)
  (out, ref), (grads, ref_grads) = helpers.mixer_against_reference(
      mixers[0], make, recurrent, x, mask, cotangent)
  np.testing.assert_allclose(out, np.asarray(ref) * mask[..., None], rtol=1e-5, atol=1e-5)
  for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads)):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_fla_initialisation_and_state_size():
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
  assert mixer.carried_state(width, 64) == 4 * 8 * 16
  assert GLA(num_heads=4, bidirectional=True).carried_state(width, 64) == 2 * 4 * 8 * 16


def test_settings_and_errors():
  assert registry.default_settings("gla") == dict(
      expand_k=0.5, expand_v=1.0, gate_low_rank_dim=16, gate_logit_normalizer=16,
      form="chunked", chunk_size=64, bidirectional=False, combine="mean")
  for bad, match in ((dict(expand_k=0.0), "expand_k=0.0 .* > 0"),
                     (dict(expand_v=-1.0), "expand_v=-1.0 .* > 0"),
                     (dict(gate_low_rank_dim=0), "gate_low_rank_dim=0 .* >= 1"),
                     (dict(gate_logit_normalizer=0), "gate_logit_normalizer=0 .* > 0"),
                     (dict(form="fast"), "form='fast'"),
                     (dict(bidirectional=1), "True or False"),
                     (dict(combine="gated"), "combine='gated' .* unless .*bidirectional=True"),
                     (dict(combine="max", bidirectional=True), "combine='max'"),
                     (dict(num_heads=0), "num_heads=0"),
                     (dict(dropout_rate=0.1), "attention_dropout_rate")):
    with pytest.raises(SettingError, match=match) as error:
      GLA(**bad)
    assert "\n" not in str(error.value)
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


def test_gated_combination_starts_as_the_mean():
  """Zero-initialised direction gates weigh both passes 1/2: the mean's function at init."""
  x, mask, _ = _inputs(3)
  make = lambda combine: GLA(num_heads=HEADS, gate_low_rank_dim=RANK, bidirectional=True,
                             combine=combine)
  p = make("gated").init(jax.random.PRNGKey(0), x, jnp.asarray(mask), deterministic=True)
  assert set(p["params"]) >= {"direction_gate", "direction_gate_bias"}
  mean_params = {"params": {k: v for k, v in p["params"].items() if "direction" not in k}}
  gated = make("gated").apply(p, x, jnp.asarray(mask), deterministic=True)
  mean = make("mean").apply(mean_params, x, jnp.asarray(mask), deterministic=True)
  np.testing.assert_allclose(gated, mean, rtol=1e-6, atol=1e-7)
