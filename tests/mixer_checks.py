"""What the mixer and encoder tests share: one-shot compiles, padded inputs, common checks."""
import jax
import jax.numpy as jnp
import numpy as np


def run_once(fn, *args):
  """Compiles fn once (XLA backend optimisation off: each graph runs once) and runs it."""
  return jax.jit(fn).lower(*args).compile({"xla_backend_optimization_level": 0})(*args)


def padded_inputs(length: int, width: int, seed: int = 0, batch: int = 3):
  """Random BxLxD inputs and a numpy mask: one full row, one with trailing padding (as LRA
  pads), one with a hole; and the generator, for noise."""
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(batch, length, width)), jnp.float32)
  mask = np.ones((batch, length), bool)
  mask[1, 4:] = False
  mask[2, 2] = False
  return x, mask, rng


def padded_tokens(vocab: int, length: int, seed: int = 0, batch: int = 3):
  """Token ids (0 = padding): trailing padding in row 1, a hole in row 2."""
  tokens = np.random.default_rng(seed).integers(1, vocab, size=(batch, length))
  tokens[1, 7:] = 0
  tokens[2, 3] = 0
  return jnp.asarray(tokens, jnp.int32)


def build_and_apply(model, *, vocab_size: int, length: int, num_classes: int):
  """Inits `model` on two rows of tokens (the second padded after 5), applies it once without
  and twice with dropout; checks logits' shape, dtype, finiteness and that dropout is seeded by
  its key. Returns the parameters for the caller's own checks of its mixer's layout."""
  tokens = np.random.default_rng(0).integers(1, vocab_size, size=(2, length))
  tokens[1, 5:] = 0
  tokens = jnp.asarray(tokens)

  def run(tokens):
    params = model.init(jax.random.PRNGKey(0), tokens)
    drop = lambda key: model.apply(params, tokens, deterministic=False, rngs={"dropout": key})
    return params, model.apply(params, tokens), drop(jax.random.PRNGKey(1)), \
        drop(jax.random.PRNGKey(2))

  params, logits, noisy, noisy2 = run_once(run, tokens)
  assert logits.shape == (2, num_classes) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits)) and np.all(np.isfinite(noisy))
  assert not np.allclose(noisy, noisy2)
  return params


def check_padding_inert(mixer, init_params, x, mask, rng, *, short: int):
  """Real outputs of `mixer` ignore the content of padded positions (noise x100 there), row 1
  with trailing padding after `short` equals its truncation, and every parameter gets a finite,
  nonzero gradient while padded inputs get exactly zero. init_params(x) -> the variables."""
  noise = jnp.where(mask[..., None], x, jnp.asarray(rng.normal(size=x.shape) * 100, x.dtype))
  real = lambda y: jnp.where(mask[..., None], y, 0.0)

  def run(x, noise):
    params = init_params(x)
    apply = lambda p, x: real(mixer.apply(p, x, mask, deterministic=True))
    truncated = mixer.apply(params, x[1:2, :short], mask[1:2, :short], deterministic=True)
    grads = jax.grad(lambda p, x: jnp.sum(apply(p, x) ** 2), (0, 1))(params, x)
    return apply(params, x), apply(params, noise), truncated, grads

  out, out_noise, truncated, grads = run_once(run, x, noise)
  assert np.all(np.isfinite(out))
  np.testing.assert_allclose(out_noise, out, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(truncated[0], out[1, :short], rtol=1e-5, atol=1e-6)
  for path, g in jax.tree_util.tree_flatten_with_path(grads[0])[0]:
    assert np.all(np.isfinite(g)) and np.any(g != 0), path
  assert np.all(np.asarray(grads[1])[~np.asarray(mask)] == 0)  # padded inputs do nothing
