"""The state-space parameter group: its own learning rate, no weight decay, global clipping."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lra import models
import lra.models.mixers.s4d  # noqa: F401  (registers "s4d")
from lra.configs import listops
from lra.training import optim
from lra.models.mixers.s4d import S4D


def _config(model="s4d", **kw):
  c = listops.get_config(f"{model},cpu")
  c.schedule, c.learning_rate, c.ssm_learning_rate = "constant", 0.01, 0.002
  c.weight_decay, c.grad_clip_norm, c.adam_b1, c.adam_b2, c.adam_eps = 0.1, 0.0, 0.9, 0.999, 1e-8
  c.ssm_params = c.ssm_decay_params = c.no_decay_params = ""  # the mixer's group alone
  for key, value in kw.items():
    c[key] = value
  return c


def _tree(seed):
  """A variables dict with SSM leaves (named as S4D's) and ordinary ones, nested."""
  rng = np.random.default_rng(seed)
  leaf = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  mixer = {"log_dt": leaf(3), "log_A_re": leaf(3, 2), "A_im": leaf(3, 2), "B": leaf(3, 2, 2),
           "C": leaf(1, 3, 2, 2), "D": leaf(3), "output_linear": {"kernel": leaf(3, 6)}}
  return {"params": {"encoder": {"block_0": {"mixer": mixer}}, "head": {"kernel": leaf(3, 2)}}}


def _step(config, params, grads, steps=1):
  tx = optim.optimizer(config)
  state = tx.init(params)
  for _ in range(steps):
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
  return params


def _flat(tree, as_array=True):
  return {jax.tree_util.keystr(k): np.asarray(v, np.float64) if as_array else v
          for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_labels_of_a_real_s4d_model():
  model = models.build(dict(name="s4d", emb_dim=8, num_heads=1, qkv_dim=8, mlp_dim=8,
                            num_layers=2, attention=dict(state_size=4)),
                       vocab_size=10, num_classes=2, max_len=6, pair=False)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int32))
  labels = _flat(optim.param_labels(params, S4D.OPTIMIZER_GROUP), as_array=False)
  ssm = sorted(k for k, v in labels.items() if v == optim.SSM)
  assert len(ssm) == 8 and all("['mixer']" in k for k in ssm)
  assert {k.rsplit("'", 2)[-2] for k in ssm} == {"log_dt", "log_A_re", "A_im", "B"}
  assert all(labels[k] == optim.OTHER for k in labels if k not in ssm)
  assert optim.ssm_group(_config()) == S4D.OPTIMIZER_GROUP
  assert optim.ssm_group(_config("transformer")) == ()
  # Collections other than "params" (BatchNorm's running averages) are not trained.
  stats = {"params": {"B": jnp.ones(2)}, "batch_stats": {"mean": jnp.ones(2), "B": jnp.ones(2)}}
  assert _flat(optim.param_labels(stats, ("B",)), as_array=False) == {
      "['batch_stats']['B']": "frozen", "['batch_stats']['mean']": "frozen",
      "['params']['B']": "ssm"}
  updated = _step(_config(), stats, jax.tree_util.tree_map(jnp.ones_like, stats))
  np.testing.assert_array_equal(updated["batch_stats"]["mean"], 1.0)
  assert np.all(np.asarray(updated["params"]["B"]) < 1.0)


def test_one_step_against_a_hand_computation():
  """Adam's first step is lr * g / (|g| + eps) (+ lr * wd * p for AdamW); a large eps keeps
  the gradient's size in it, so the global clipping shows too."""
  params, grads = _tree(0), _tree(1)
  config = _config(adam_eps=1.0, grad_clip_norm=0.5)
  p, g = _flat(params), _flat(grads)
  scale = min(1.0, 0.5 / np.sqrt(sum(np.sum(v ** 2) for v in g.values())))
  assert scale < 0.2  # clipping is active, over all leaves together
  new = _flat(_step(config, params, grads))
  for key in p:
    gc = g[key] * scale
    adam = gc / (np.abs(gc) + 1.0)
    if key.rsplit("'", 2)[-2] in S4D.OPTIMIZER_GROUP:
      expected = p[key] - 0.002 * adam  # its own learning rate, no weight decay
    else:
      expected = p[key] - 0.01 * (adam + 0.1 * p[key])
    np.testing.assert_allclose(new[key], expected, rtol=1e-5, atol=1e-7, err_msg=key)

  # ssm_learning_rate = 0: the group follows learning_rate, still without weight decay.
  new = _flat(_step(_config(ssm_learning_rate=0.0), params, grads))
  key = "['params']['encoder']['block_0']['mixer']['log_dt']"
  np.testing.assert_allclose(new[key], p[key] - 0.01 * g[key] / (np.abs(g[key]) + 1e-8),
                             rtol=1e-5)


def test_the_group_schedule_has_the_same_shape():
  """Constant gradients: Adam steps by lr_t * sign(g), so the sum of the schedule shows."""
  params = _tree(0)
  grads = jax.tree_util.tree_map(lambda p: jnp.where(p > 0, 1.0, -1.0), _tree(1))
  config = _config(schedule="cosine", warmup_steps=2, num_train_steps=10, weight_decay=0.0)
  steps = 5
  shape = [t / 2 if t < 2 else 0.5 * (1 + np.cos(np.pi * (t - 2) / 8)) for t in range(steps)]
  p, g = _flat(params), _flat(grads)
  new = _flat(_step(config, params, grads, steps))
  for key in p:
    peak = 0.002 if key.rsplit("'", 2)[-2] in S4D.OPTIMIZER_GROUP else 0.01
    np.testing.assert_allclose(new[key], p[key] - peak * sum(shape) * g[key], rtol=1e-5,
                               err_msg=key)


def test_models_without_a_group_are_unchanged():
  """A transformer trains every leaf (a leaf named B included) with the one AdamW."""
  params, grads = _tree(0), _tree(1)
  config = _config("transformer", grad_clip_norm=0.5)
  reference = optax.chain(optax.clip_by_global_norm(0.5),
                          optax.adamw(0.01, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1))
  state = reference.init(params)
  updates, _ = reference.update(grads, state, params)
  expected = _flat(optax.apply_updates(params, updates))
  new = _flat(_step(config, params, grads))
  assert new.keys() == expected.keys()
  for key in new:
    np.testing.assert_allclose(new[key], expected[key], rtol=1e-6, err_msg=key)
