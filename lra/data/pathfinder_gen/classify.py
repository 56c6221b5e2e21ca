"""Classifiers asked to tell two sets of Pathfinder images apart (0.5 = indistinguishable).

- `logistic_accuracy`: L2-regularised logistic regression (L-BFGS) on standardised per-image
  feature vectors (`features`: the statistics of lra.data.pathfinder_gen.stats, the 256-bin
  histogram, 2x2 binary pattern shares), k-fold cross-validated on balanced classes;
- `cnn_accuracy`: a small CNN on raw pixels (flax, optax), trained on 80% and tested on 20%:
  the stronger check, and the only code here importing JAX (inside the function).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from lra.data.pathfinder_gen import stats
from lra.errors import UserError


def _binary_patterns(mask: np.ndarray) -> np.ndarray:
  """Shares of the 16 binary 2x2 patterns of a bool [N, S, S] mask, per image: [N, 16]."""
  code = (mask[:, :-1, :-1] * 1 + mask[:, :-1, 1:] * 2 + mask[:, 1:, :-1] * 4 +
          mask[:, 1:, 1:] * 8).reshape(mask.shape[0], -1)
  offsets = np.arange(mask.shape[0])[:, None] * 16
  counts = np.bincount((code + offsets).reshape(-1), minlength=16 * mask.shape[0])
  return counts.reshape(mask.shape[0], 16) / code.shape[1]


def features(images: np.ndarray, markers: np.ndarray | None = None) -> np.ndarray:
  """Per-image feature vectors [N, F]: the statistics of stats.per_image (labels left out),
  the 256-bin histogram, and 2x2 binary pattern shares of ink (> 0) and of bright (> 128)
  pixels. A statistic an image lacks (NaN) becomes the mean of the images that have it."""
  values = stats.per_image(images, None, markers)
  columns = [values[name] for name in sorted(values)]
  n = images.shape[0]
  flat = images.reshape(n, -1).astype(np.int64)
  hist = np.bincount((flat + 256 * np.arange(n)[:, None]).reshape(-1), minlength=256 * n)
  columns = np.stack(columns, axis=1)
  x = np.concatenate([columns, hist.reshape(n, 256) / flat.shape[1],
                      _binary_patterns(images > 0), _binary_patterns(images > 128)], axis=1)
  col_mean = np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=0)
  return np.where(np.isfinite(x), x, np.nan_to_num(col_mean)[None, :])


def _fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
  """Weights [F + 1] (bias last) minimising mean log-loss + l2/2 |w|^2, by L-BFGS."""
  xb = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
  sign = 2.0 * y - 1.0

  def loss(w):
    margin = sign * (xb @ w)
    value = np.mean(np.logaddexp(0.0, -margin)) + 0.5 * l2 * np.sum(w[:-1] ** 2)
    slope = -sign * 0.5 * (1 - np.tanh(margin / 2))  # d/dz log(1 + e^-(s z)) = -s sigmoid(-s z)
    grad = xb.T @ slope / xb.shape[0]
    grad[:-1] += l2 * w[:-1]
    return value, grad

  result = optimize.minimize(loss, np.zeros(xb.shape[1]), jac=True, method="L-BFGS-B",
                             options={"maxiter": 500})
  return result.x


def balanced_folds(n_a: int, n_b: int, folds: int, seed: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Indices into a and b (m = min(n_a, n_b) of each, chosen at random) and the fold [2m] of
  each chosen example (a first, then b); each fold holds as many of a as of b."""
  rng = np.random.default_rng(seed)
  m = min(n_a, n_b)
  if m < folds:
    raise UserError(f"too few images to tell apart: {m} per side for {folds} folds")
  pick_a, pick_b = rng.permutation(n_a)[:m], rng.permutation(n_b)[:m]
  fold = np.arange(m) % folds
  return pick_a, pick_b, np.concatenate([rng.permutation(fold), rng.permutation(fold)])


def logistic_accuracy(x_a: np.ndarray, x_b: np.ndarray, folds: int = 5, seed: int = 0,
                      l2: float = 0.1) -> float:
  """k-fold cross-validated accuracy of logistic regression telling rows of x_a from x_b, on
  balanced classes (0.5: indistinguishable). Standardised with each training fold's mean/sd."""
  pick_a, pick_b, fold = balanced_folds(len(x_a), len(x_b), folds, seed)
  x = np.concatenate([x_a[pick_a], x_b[pick_b]]).astype(np.float64)
  y = np.concatenate([np.zeros(len(pick_a)), np.ones(len(pick_b))])
  correct = 0
  for k in range(folds):
    train, test = fold != k, fold == k
    mean, sd = x[train].mean(axis=0), x[train].std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    w = _fit_logistic((x[train] - mean) / sd, y[train], l2)
    z = ((x[test] - mean) / sd) @ w[:-1] + w[-1]
    correct += int(np.sum((z > 0) == (y[test] == 1)))
  return correct / len(y)


def cnn_accuracy(images_a: np.ndarray, images_b: np.ndarray, epochs: int = 5,
                 seed: int = 0, batch: int = 64, learning_rate: float = 3e-3,
                 min_steps: int = 200) -> float:
  """Test accuracy of a small CNN on raw pixels (flax, optax) telling images_a from images_b:
  balanced classes, trained on 80% for `epochs` epochs (more for a small sample: at least
  `min_steps` steps), tested on the other 20%. Images over 32 pixels first go through a
  strided convolution over (S // 32)-pixel patches (a CPU run at 128 is otherwise very slow)."""
  import jax
  import jax.numpy as jnp
  import optax
  from flax import linen as nn

  patch = max(1, images_a.shape[1] // 32)  # large images: a learned 4x4 patch layer first

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x_BxSxSx1):
      x = x_BxSxSx1
      if patch > 1:
        x = nn.relu(nn.Conv(16, (patch, patch), strides=(patch, patch))(x))
      for features in (16, 32, 64):
        x = nn.relu(nn.Conv(features, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
      return nn.Dense(1)(jnp.mean(x, axis=(1, 2)))[:, 0]

  pick_a, pick_b, fold = balanced_folds(len(images_a), len(images_b), 5, seed)
  x = np.concatenate([images_a[pick_a], images_b[pick_b]]).astype(np.float32)[..., None] / 255
  y = np.concatenate([np.zeros(len(pick_a)), np.ones(len(pick_b))]).astype(np.float32)
  train, test = np.nonzero(fold != 0)[0], np.nonzero(fold == 0)[0]
  net, tx = Net(), optax.adam(learning_rate)
  params = net.init(jax.random.key(seed), jnp.asarray(x[:1]))
  opt_state = tx.init(params)

  @jax.jit
  def step(params, opt_state, x_b, y_b):
    def loss_fn(p):
      return jnp.mean(optax.sigmoid_binary_cross_entropy(net.apply(p, x_b), y_b))
    grads = jax.grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  predict = jax.jit(lambda p, x_b: net.apply(p, x_b) > 0)
  rng = np.random.default_rng(seed)
  batch = min(batch, len(train))
  for _ in range(max(epochs, -(-min_steps // (len(train) // batch)))):
    order = rng.permutation(train)
    for start in range(0, len(order) - batch + 1, batch):
      idx = order[start:start + batch]
      params, opt_state = step(params, opt_state, jnp.asarray(x[idx]), jnp.asarray(y[idx]))
  hits = [np.asarray(predict(params, jnp.asarray(x[test[s:s + batch]])))
          == (y[test[s:s + batch]] == 1) for s in range(0, len(test), batch)]
  return float(np.mean(np.concatenate(hits)))
