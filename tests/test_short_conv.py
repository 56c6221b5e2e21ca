"""config.model.short_conv: a depthwise causal convolution before ANY mixer (the Based recipe,
Zoology's ablation switch): the block equals x + mixer(conv(norm(x))) written out, padded
content stays invisible, and 0 adds nothing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.models import encoder
from lra.models.settings import EncoderConfig
from lra.rules import SettingError
from tests.helpers import layer_norm, padded_inputs, padded_tokens, perturb, run_once, tiny_model

DIM, LENGTH, KERNEL = 8, 9, 3


def _conv_reference(h_BxLxD, mask_BxL, w_KxD, b_D):
  """y[t] = b + sum_j w[j] h[t - (K - 1) + j] over real positions, zeros before the start."""
  h = np.where(mask_BxL[..., None], np.asarray(h_BxLxD, np.float64), 0.0)
  y = np.broadcast_to(np.asarray(b_D, np.float64), h.shape).copy()
  kernel = w_KxD.shape[0]
  for t in range(h.shape[1]):
    for j in range(kernel):
      source = t - (kernel - 1) + j
      if source >= 0:
        y[:, t] += np.asarray(w_KxD[j], np.float64) * h[:, source]
  return y


def test_the_block_convolves_the_mixer_input():
  x, mask, rng = padded_inputs(LENGTH, DIM)
  config = EncoderConfig(emb_dim=DIM, num_heads=2, qkv_dim=DIM, mlp_dim=DIM, num_layers=1,
                         dropout_rate=0.0, attention_dropout_rate=0.0, feedforward=False,
                         short_conv=KERNEL)
  block = encoder.Block(0, "transformer", {}, None, config)
  mixer = encoder.make_mixer("transformer", {}, config, layer_index=0, shared=None)
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

  def run(x):
    params = perturb(block.init(jax.random.PRNGKey(0), x, mask, deterministic=True))
    got, pull = jax.vjp(lambda x: block.apply(params, x, mask, deterministic=True), x)
    return params, got, pull(cotangent)[0]

  params, got, grad = run_once(run, x)
  p = params["params"]
  assert p["short_conv"]["weight"].shape == (KERNEL, DIM)
  conv = lambda x: jnp.asarray(_conv_reference(layer_norm(p["LayerNorm_0"], x), mask,
                                               p["short_conv"]["weight"],
                                               p["short_conv"]["bias"]), jnp.float32)
  h = conv(x)
  want = x + mixer.apply({"params": p["mixer"]}, h, mask, deterministic=True)
  real = mask.astype(bool)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=1e-4,
                             atol=1e-5)
  # The gradient through the convolution: finite differences on one real input channel.
  eps, (b, t, d) = 1e-2, (0, 2, 5)
  bump = jnp.zeros_like(x).at[b, t, d].set(eps)
  out = lambda x: x + mixer.apply({"params": p["mixer"]}, conv(x), mask, deterministic=True)
  numeric = np.sum((np.asarray(out(x + bump)) - np.asarray(out(x - bump))) *
                   np.asarray(cotangent)) / (2 * eps)
  assert float(grad[b, t, d]) == pytest.approx(numeric, rel=2e-2, abs=2e-3)


# The convolution is the encoder's, before any mixer: Mega (the costliest to compile) `-m slow`.
@pytest.mark.parametrize("name", ["transformer", "s5",
                                  pytest.param("mega", marks=pytest.mark.slow)])
def test_any_mixer_takes_it_and_padding_stays_invisible(name):
  """A model with short_conv gets one conv per block; noise in padded tokens changes nothing."""
  settings = tiny_model(name, short_conv=4, dropout_rate=0.0, attention_dropout_rate=0.0)
  model = models.build(settings, vocab_size=20, num_classes=3, max_len=12, pair=False)
  tokens = padded_tokens(20, 12)
  noisy = jnp.where(tokens == 0, 5, tokens)
  mask = tokens != 0

  def run(tokens, noisy):
    params = model.init(jax.random.PRNGKey(0), tokens, mask)
    return (params, model.apply(params, tokens, mask),
            model.apply(params, noisy, mask))

  params, clean_out, noisy_out = run_once(run, tokens, noisy)
  blocks = [k for k in params["params"]["encoder"] if k.startswith("block_")]
  assert blocks and all("short_conv" in params["params"]["encoder"][k] for k in blocks)
  np.testing.assert_allclose(clean_out, noisy_out, rtol=1e-5, atol=1e-5)


def test_zero_adds_nothing_and_a_negative_kernel_is_refused():
  model = lambda **kw: models.build(tiny_model("transformer", **kw), vocab_size=20,
                                    num_classes=3, max_len=12, pair=False)
  tokens = padded_tokens(20, 12)
  params = run_once(lambda t: model(short_conv=0).init(jax.random.PRNGKey(0), t), tokens)
  assert not any("short_conv" in str(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(params)[0])
  with pytest.raises(SettingError, match="short_conv"):
    model(short_conv=-1)
