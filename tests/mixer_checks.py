"""Checks every mixer's test file shares: the mixer built into a classifier, run with dropout."""
import jax
import jax.numpy as jnp
import numpy as np


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

  # One compile with backend optimisation off: the graph runs once.
  params, logits, noisy, noisy2 = jax.jit(run).lower(tokens).compile(
      {"xla_backend_optimization_level": 0})(tokens)
  assert logits.shape == (2, num_classes) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits)) and np.all(np.isfinite(noisy))
  assert not np.allclose(noisy, noisy2)
  return params
