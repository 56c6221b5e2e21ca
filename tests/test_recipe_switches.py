"""The encoder switches that reproduce the authors' function around a layer: no final norm, the
linear pixel encoder, the linear and GELU heads, no input dropout, BatchNorm's momentum,
padding let in as the authors' codes run, both documents of a pair in one BatchNorm batch,
and the parameter groups they train with. Each against a reference computed here by hand;
each for every mixer where it is a property of the encoder."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra import models
from lra.configs import listops
from lra.errors import UserError
from lra.models import registry
from lra.rules import SettingError
from lra.training import optim
from tests import helpers

VOCAB, LENGTH = 20, 12


def _build(name="s4d", vocab=VOCAB, pair=False, **overrides):
  return models.build(helpers.tiny_model(name, **overrides), vocab_size=vocab, num_classes=3,
                      max_len=LENGTH, pair=pair)


def _tokens(seed=0, batch=4, vocab=VOCAB):
  return jnp.asarray(helpers.padded_tokens(vocab, LENGTH, seed, batch))


# The switches are the encoder's: one mixer of each kind in the default suite, every mixer
# `-m slow` (each one's compile cost 4-7 s here, a third of this file's time).
_ENCODER_KINDS = helpers.one_of_each_encoder_kind()


@pytest.mark.parametrize("name", [n if n in _ENCODER_KINDS else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in registry.names()])
def test_every_mixer_takes_the_authors_encoder_and_head(name):
  """Linear pixel encoder, no final norm, linear head, no input dropout: builds, runs, and
  has exactly the parameters those mean."""
  prenorm = helpers.tiny_model(name).get("prenorm", True)  # post-norm has no final norm
  # One layer (or the mixer's MIN_LAYERS): the encoder and head are around the blocks.
  model = _build(name, vocab=256, input_encoder="linear", input_mean=127.5, input_std=127.5,
                 head="linear", input_dropout=False, num_layers=1,
                 **({"final_norm": False} if prenorm else {}))
  pixels = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, LENGTH)), jnp.int32)
  mask = jnp.ones((2, LENGTH), bool)
  # One jitted program each: op by op, the bigger mixers cost 4-7 s here.
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), pixels, mask)
  logits = jax.jit(model.apply)(variables, pixels, mask)
  params = variables["params"]
  assert sorted(params) == ["encoder", "head_out"]
  assert params["encoder"]["embed_linear"]["kernel"].shape[0] == 1
  assert "embed" not in params["encoder"] and "final_norm" not in params["encoder"]
  assert logits.shape == (2, 3) and bool(jnp.all(jnp.isfinite(logits)))


def test_linear_encoder_is_a_dense_of_the_normalised_value():
  model = _build("s4d", vocab=256, input_encoder="linear", input_mean=122.6, input_std=61.0,
                 head="linear")
  pixels = jnp.asarray(np.random.default_rng(1).integers(0, 256, (2, LENGTH)), jnp.int32)
  mask = jnp.ones((2, LENGTH), bool)
  variables = model.init(jax.random.PRNGKey(0), pixels, mask)
  dense = variables["params"]["encoder"]["embed_linear"]
  encoder = model.encoder
  # The embedded input, read where the first block's norm takes it (the SSMs add no positions).
  _, state = encoder.apply({"params": variables["params"]["encoder"],
                            "batch_stats": variables.get("batch_stats", {}).get("encoder", {})},
                           pixels, mask, capture_intermediates=lambda m, _: m.name == "embed_linear")
  got = state["intermediates"]["embed_linear"]["__call__"][0]
  value = (np.asarray(pixels, np.float64)[..., None] - 122.6) / 61.0
  want = value * np.asarray(dense["kernel"])[0] + np.asarray(dense["bias"])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_linear_encoder_learns_a_vector_for_the_mask_token():
  """A denoise run's mask token (the id past the vocabulary) is not a pixel value."""
  model = models.build(helpers.tiny_model("s4d", input_encoder="linear", input_std=255.0,
                                          num_layers=1),
                       vocab_size=257, num_classes=2, max_len=LENGTH, pair=False,
                       mask_token=True)
  pixels = np.random.default_rng(2).integers(0, 256, (2, LENGTH))
  masked = pixels.copy()
  masked[:, 3] = 256
  mask = jnp.ones((2, LENGTH), bool)
  variables = model.init(jax.random.PRNGKey(0), jnp.asarray(masked), mask)
  assert variables["params"]["encoder"]["mask_embed"].shape == (helpers.tiny_model(
      "s4d")["emb_dim"],)
  grad = jax.jit(jax.grad(lambda p, x: model.apply({**variables, "params": p}, x, mask).sum()))
  grads = grad(variables["params"], jnp.asarray(masked))
  assert float(jnp.abs(grads["encoder"]["mask_embed"]).sum()) > 0
  unmasked = grad(variables["params"], jnp.asarray(pixels))
  assert float(jnp.abs(unmasked["encoder"]["mask_embed"]).sum()) == 0


def test_heads_are_their_formulas():
  tokens = _tokens()
  for head in ("linear", "gelu_mlp", "mlp"):
    model = _build("transformer", head=head)
    variables = model.init(jax.random.PRNGKey(0), tokens)
    p = variables["params"]
    pooled = np.asarray(model.encoder.apply({"params": p["encoder"]}, tokens))
    dense = lambda name, x: x @ np.asarray(p[name]["kernel"]) + np.asarray(p[name]["bias"])
    if head == "linear":
      want = dense("head_out", pooled)
      assert sorted(p) == ["encoder", "head_out"]
    elif head == "gelu_mlp":
      want = dense("head_out", np.asarray(jax.nn.gelu(dense("head_hidden", pooled))))
    else:
      want = dense("head_out", np.maximum(dense("head_hidden", pooled), 0))
    np.testing.assert_allclose(model.apply(variables, tokens), want, rtol=1e-5, atol=1e-5)


def test_no_final_norm_drops_it_and_changes_the_function():
  tokens = _tokens()
  mean = dict(pooling="MEAN", use_cls=False)
  with_norm, without = _build("transformer", **mean), _build("transformer", final_norm=False,
                                                               **mean)
  variables = with_norm.init(jax.random.PRNGKey(0), tokens)
  assert "final_norm" in variables["params"]["encoder"]
  params = dict(variables["params"]["encoder"])
  del params["final_norm"]
  pooled = without.encoder.apply({"params": params}, tokens)
  # The mean-free, unit-variance final LayerNorm (scale 1, bias 0 at init) is what differs.
  normed = with_norm.encoder.apply({"params": variables["params"]["encoder"]}, tokens)
  tokens_out = without.encoder.apply({"params": params}, tokens, tokens=True)
  assert not np.allclose(pooled, normed)
  real = np.asarray(tokens) != 0
  ln = np.asarray(helpers.layer_norm(variables["params"]["encoder"]["final_norm"],
                                     jnp.asarray(tokens_out)))
  np.testing.assert_allclose(normed, (ln * real[..., None]).sum(1) / real.sum(1)[:, None],
                             rtol=1e-4, atol=1e-4)


def test_input_dropout_false_drops_nothing_before_the_blocks():
  """What the first block's norm receives: the embedded input, dropped only if input_dropout."""
  tokens = _tokens()
  capture = lambda m, _: m.name == "BatchNorm_0"

  def first_norm_input(net, variables, key):
    _, state = net.apply(variables, tokens, deterministic=False, rngs={"dropout": key},
                         mutable=["batch_stats", "intermediates"],
                         capture_intermediates=capture)
    return state["intermediates"]["encoder"]["block_0"]["BatchNorm_0"]["__call__"][0]

  for flag in (False, True):
    net = _build("s4d", norm="batch", dropout_rate=0.5, input_dropout=flag, num_layers=1)
    variables = net.init(jax.random.PRNGKey(0), tokens)
    a, b = (first_norm_input(net, variables, jax.random.PRNGKey(k)) for k in (1, 2))
    assert np.allclose(a, b) != flag


def test_batch_norm_momentum_sets_the_running_average():
  """new = m old + (1 - m) batch: one training pass from the initial mean 0."""
  tokens = _tokens()
  for momentum in (0.9, 0.95):
    model = _build("s4d", norm="batch", batch_norm_momentum=momentum, num_layers=1,
                   dropout_rate=0.0, use_cls=False, pooling="MEAN")
    variables = model.init(jax.random.PRNGKey(0), tokens)
    _, state = model.apply(variables, tokens, deterministic=False,
                           rngs={"dropout": jax.random.PRNGKey(1)}, mutable=["batch_stats"])
    embed = np.asarray(variables["params"]["encoder"]["embed"]["embedding"])[np.asarray(tokens)]
    real = np.asarray(tokens) != 0
    batch_mean = embed[real].mean(0)  # over the real tokens (no positions for the SSMs)
    got = state["batch_stats"]["encoder"]["block_0"]["BatchNorm_0"]["mean"]
    np.testing.assert_allclose(got, (1 - momentum) * batch_mean, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["s4d", "s5", "transformer"])
def test_pad_like_authors_is_the_unmasked_stack_pooled_over_real_tokens(name):
  """The authors' function: every position through the blocks and norms as real, the mean
  pool over the real ones only; the default (masked) function differs from it."""
  tokens = _tokens(3)
  real = np.asarray(tokens) != 0
  assert not real.all()
  quiet = dict(norm="batch", pooling="MEAN", use_cls=False, dropout_rate=0.0,
               attention_dropout_rate=0.0)
  leaky, masked = _build(name, pad_like_authors=True, **quiet), _build(name, **quiet)
  variables = leaky.init(jax.random.PRNGKey(0), tokens)
  ones = jnp.ones(tokens.shape, bool)
  apply = lambda net, **kw: net.encoder.apply(
      {"params": variables["params"]["encoder"],
       "batch_stats": variables["batch_stats"]["encoder"]}, tokens, deterministic=False,
      mutable=["batch_stats"], **kw)[0]
  every_BxLxD = np.asarray(apply(masked, mask_BxL=ones, tokens=True))
  want = (every_BxLxD * real[..., None]).sum(1) / real.sum(1)[:, None]
  np.testing.assert_allclose(apply(leaky), want, rtol=1e-4, atol=1e-5)
  assert not np.allclose(apply(masked), want, atol=1e-3)


def test_a_pair_shares_one_batch_norm_batch():
  """The running mean after one pass is (1 - m) x the mean over both documents' real tokens
  (one update, both at once), as the S5 and S4 retrieval models batch them."""
  a, b = _tokens(4, batch=3), _tokens(5, batch=3)
  model = _build("s4d", pair=True, norm="batch", num_layers=1, dropout_rate=0.0,
                 use_cls=False, pooling="MEAN")
  variables = model.init(jax.random.PRNGKey(0), a, b)
  _, state = model.apply(variables, a, b, deterministic=False,
                         rngs={"dropout": jax.random.PRNGKey(1)}, mutable=["batch_stats"])
  table = np.asarray(variables["params"]["encoder"]["embed"]["embedding"])
  both = np.concatenate([np.asarray(a), np.asarray(b)])
  want = 0.1 * table[both][both != 0].mean(0)
  got = state["batch_stats"]["encoder"]["block_0"]["BatchNorm_0"]["mean"]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("key,value,needs", [
    ("final_norm", False, "prenorm=True"), ("input_mean", 0.5, "input_encoder='linear'"),
    ("input_std", 2.0, "input_encoder='linear'"), ("batch_norm_momentum", 0.95, "norm='batch'")])
def test_a_switch_that_would_do_nothing_is_refused(key, value, needs):
  overrides = {key: value, "prenorm": key != "final_norm"}
  with pytest.raises(SettingError, match=needs.replace("(", r"\(")):
    _build("transformer", **overrides)


# --- the parameter groups ------------------------------------------------------------------

def _config(**kw):
  c = listops.get_config("s4d,cpu")
  c.schedule, c.learning_rate, c.ssm_learning_rate = "constant", 0.01, 0.002
  c.weight_decay, c.grad_clip_norm, c.adam_b1, c.adam_b2, c.adam_eps = 0.1, 0.0, 0.9, 0.999, 1.0
  c.ssm_params = c.ssm_decay_params = c.no_decay_params = ""  # the mixer's group alone
  for key, value in kw.items():
    c[key] = value
  return c


def test_each_group_has_its_rate_and_decay_by_hand():
  """Adam's first step with eps = 1: lr g / (|g| + 1) + lr wd p (AdamW) per group."""
  rng = np.random.default_rng(0)
  names = ("B", "log_dt", "C", "kernel", "D")
  params = {n: jnp.asarray(rng.normal(size=3), jnp.float32) for n in names}
  grads = {n: jnp.asarray(rng.normal(size=3), jnp.float32) for n in names}
  config = _config(ssm_params="D", ssm_decay_params="B", no_decay_params="log_dt,kernel")
  tx = optim.optimizer(config)
  updates, _ = tx.update(grads, tx.init(params), params)
  new = optax.apply_updates(params, updates)
  rate_decay = {"B": (0.002, 0.1), "D": (0.002, 0.0), "log_dt": (0.01, 0.0),
                "kernel": (0.01, 0.0), "C": (0.01, 0.1)}
  for name, (lr, wd) in rate_decay.items():
    p, g = np.asarray(params[name], np.float64), np.asarray(grads[name], np.float64)
    want = p - lr * g / (np.abs(g) + 1.0) - lr * wd * p
    np.testing.assert_allclose(new[name], want, rtol=1e-5, err_msg=name)


def test_named_groups_override_the_mixer_group():
  config = _config(no_decay_params="log_dt")
  assert optim.groups(config) == {"log_A_re": optim.SSM, "A_im": optim.SSM, "B": optim.SSM,
                                  "log_dt": optim.NO_DECAY}
  assert optim.groups(_config(ssm_params="none")) == {}
  assert optim.groups(_config(ssm_params="B")) == {"B": optim.SSM}


def test_group_mistakes_are_one_line_errors():
  with pytest.raises(UserError, match="'B', which another parameter group"):
    optim.groups(_config(ssm_params="B,log_dt", ssm_decay_params="B"))
  model = _build("s4d")
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), _tokens())
  tx = optim.optimizer(_config(no_decay_params="Bx"))
  with pytest.raises(UserError, match=r"Bx .*match no parameter.*log_dt"):
    tx.init(variables)
