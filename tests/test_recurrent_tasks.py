"""Every mixer of the recurrent family trains on every LRA task's `cpu` config: the config as
`configs/TASK.py:MODEL,cpu` makes it (the published table's architecture and mixer settings,
the small model), the project's train step and optimiser (parameter groups included), three
steps on one random batch of the task's vocabulary, classes and pairing at a short length:
the loss is finite and falls. The mixers are those subclassing RecurrentMixer (no list to
edit); MQAR's config is built for every mixer in tests/test_mqar.py and trained by its grid
(docs/results.md)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import models
from lra.configs import task_config
from lra.data import tasks
from lra.models import registry
from lra.models.blocks.recurrent import RecurrentMixer
from lra.training import optim, steps, trainer
from lra.testing import cheap_compiles

FAMILY = [n for n in registry.names() if issubclass(registry.get(n), RecurrentMixer)]
BATCH, LENGTH = 4, 16


@pytest.fixture(autouse=True, scope="module")
def _cheap_compiles():
  """42 small programs, each run four times: XLA's expensive passes cost more than they save."""
  with cheap_compiles():  # lra.testing's, as the contract compiles
    yield


def _state(config, net, facts):
  tokens = jnp.ones((1, LENGTH), jnp.int32)
  variables = net.init(jax.random.PRNGKey(0), *((tokens, tokens) if facts.pair else (tokens,)))
  return trainer.TrainState.create(apply_fn=net.apply, params={"params": variables["params"]},
                                   tx=optim.optimizer(config),
                                   batch_stats=variables.get("batch_stats", {}))


def _batch(facts, rng):
  token = lambda: rng.integers(1, facts.vocab_size, size=(BATCH, LENGTH)).astype(np.int32)
  batch = {"inputs": token(), "labels": rng.integers(0, facts.num_classes, BATCH)}
  if facts.pair:
    batch["inputs2"] = token()
  return batch


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILY)
def test_trains_on_every_tasks_cpu_config(name):
  mesh = trainer.make_mesh(jax.devices()[:1])
  for task in tasks.NAMES:
    config = task_config(task).get_config(f"{name},cpu")
    config.learning_rate = 3e-3  # three steps must move the loss (warmup aside)
    config.warmup_steps = 1
    facts = tasks.FACTS[task]
    net = models.build(config.model.to_dict(), vocab_size=facts.vocab_size,
                       num_classes=facts.num_classes, max_len=LENGTH, pair=facts.pair)
    train, _, _ = steps.make_steps(net, facts.pair, mesh)
    state, batch = _state(config, net, facts), _batch(facts, np.random.default_rng(0))
    losses = []
    for _ in range(4):
      state, metrics = train(state, batch, jax.random.PRNGKey(1))
      losses.append(float(metrics["loss_sum"]) / float(metrics["count"]))
    assert np.all(np.isfinite(losses)), (task, losses)
    assert losses[-1] < losses[0], (task, losses)
