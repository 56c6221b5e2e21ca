"""What the recurrent family shares, tested once for all its members (as fla parametrises its
tests over its layers): the mixers subclassing models/blocks/recurrent.py's RecurrentMixer
(Mamba-2, Mamba-3, RetNet, GLA, HGRN2, DeltaNet, Gated DeltaNet, DeltaProduct, RWKV-7, mLSTM,
and any added under it, with no list to edit). For each: the chunked form computes the recurrent form's
function (outputs and the gradients of every parameter and of the input, one pass (both
`-m slow`), chunks of 4 over 13 positions, each mixer's hardest gates); a padded row's real
outputs equal its truncated row's in both forms; one pass reads causally and two read the
future; the state it declares is the core's (counted where the core runs); the heads and the
combination are checked in one line.
Each mixer's own reference (tests/naive.py) and its authors' numbers are in its own file."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models import registry
from lra.models.blocks import recurrent
from lra.models.blocks.recurrent import RecurrentMixer
from lra.rules import SettingError
from lra.testing import finite
from tests import helpers
from tests.helpers import run_once

FAMILY = [n for n in registry.names() if issubclass(registry.get(n), RecurrentMixer)]
WIDTH, HEADS, QKV, LENGTH = 8, 2, 8, 13  # 13: no multiple of the chunk, 4
# Small heads with more than one of each kind (Mamba-2: 8 heads in 2 groups; Mamba-3 the same,
# N = 5: two angles and a channel that does not turn; GLA: K = 2; HGRN2: K = 3, V = 4; mLSTM:
# blocks of 2); the rest as tests/helpers.py's tiny settings.
SETTINGS = {"mamba2": dict(d_state=3, head_dim=2, groups=2, conv_kernel=3, expand=2),
            "mamba3": dict(d_state=5, head_dim=2, groups=2, expand=2, rope_fraction=1.0),
            "gla": dict(gate_low_rank_dim=3), "hgrn2": dict(expand_ratio=3, lower_bound="fixed"),
            "mlstm": dict(qkv_blocksize=2)}


def _mixer(name: str, **settings):
  """The mixer as the encoder builds it (heads 2, layer 2 of 4), chunks of 4."""
  settings = {**helpers.tiny_settings(name), **SETTINGS.get(name, {}), "chunk_size": 4,
              **settings}
  return registry.make(name, settings, num_heads=HEADS, qkv_dim=QKV, layer_index=2,
                       num_layers=4)


def _hard_gates(name: str, variables):
  """Each mixer's initial parameters plus N(0, 0.3) noise, with the gates its chunked form finds
  hardest: the delta rule's beta pushed to 0 or 1 (b_proj scaled up); Gated DeltaNet's and
  Comba's decay e^-48 a step in one head and weak in the other; KDA's from weak to e^-48 a step
  over each head's key channels; Mamba-2's dt near 1 with decays from e^-0.3 to e^-2 (at init,
  dt near 0.01 would make the recurrence nearly a sum); Mamba-3's dt near 1 with its
  projections (trapezoid, angles, A) scaled up; RWKV-7's decays near their strongest, e^-0.61
  a step, and its in-context learning rate near 1."""
  p = helpers.perturb(variables, seed=1, scale=0.3)["params"]
  if "b_proj" in p:
    p["b_proj"]["kernel"] = 30 * p["b_proj"]["kernel"]
  if name in ("gated_deltanet", "comba"):
    p["A_log"] = jnp.log(jnp.asarray([16.0, 0.01]))
    p["dt_bias"] = jnp.asarray([3.0, -3.0])
  if name == "rwkv7":
    for lora in ("w_lora", "a_lora"):
      p[lora]["up"]["bias"] = p[lora]["up"]["bias"] + 4.0
  if name == "kda":
    p["A_log"] = jnp.log(jnp.asarray([16.0, 1.0]))
    p["dt_bias"] = jnp.tile(jnp.linspace(-6.0, 3.0, p["dt_bias"].shape[0] // 2), 2)
  if name == "mamba2":
    heads = p["dt_bias"].shape[0]
    p["dt_bias"] = jnp.full((heads,), 0.5)
    p["A_log"] = jnp.log(jnp.linspace(0.3, 2.0, heads))
  if name == "mamba3":  # dt near 1: decays e^-1 and turns of up to pi a step
    p["dt_bias"] = jnp.full(p["dt_bias"].shape, 0.5)
    p["in_proj"]["kernel"] = 3 * p["in_proj"]["kernel"]
  return {"params": p}


def _inputs(seed: int):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(2, LENGTH, WIDTH)), jnp.float32)
  mask = jnp.asarray(helpers.trailing_mask([LENGTH, 6], LENGTH))
  cotangent = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  return x, mask, cotangent


# One pass for every member by default; both passes `-m slow` (twice the program: the reverse
# pass is the core's, whose own test checks it in both forms with padding, and the two passes
# are combined by RecurrentMixer's code, the same for every member). Members whose gates take
# the core's chunked form down a path another default test takes (helpers.SAME_CORE_KIND;
# Mamba-3's own steps are the same in either form and checked against its reference in the
# chunked one, tests/test_mamba3.py) `-m slow`.
@pytest.mark.parametrize("bidirectional", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", helpers.slow_if_same_kind(FAMILY))
def test_chunked_equals_recurrent_and_padding_equals_truncation(name, bidirectional):
  """The chunked form's outputs and gradients (of every parameter and of the input) equal the
  recurrent form's, and its row 1 (6 real tokens, then padding) gives the outputs of those 6
  tokens alone (bidirectional: the backward pass starts in the padding; the core's own test
  checks both forms' padding, tests/test_matrix_recurrence.py)."""
  x, mask, cotangent = _inputs(2)
  recurrent, chunked = (_mixer(name, form=form, bidirectional=bidirectional)
                        for form in ("recurrent", "chunked"))

  def program(x):
    variables = _hard_gates(name, chunked.init(jax.random.PRNGKey(0), x, mask,
                                               deterministic=True))
    results = []
    for mixer in (recurrent, chunked):  # outputs, and the gradients of <outputs, cotangent>
      out, pullback = jax.vjp(lambda v, x: mixer.apply(v, x, mask, deterministic=True),
                              variables, x)
      results.append((out, pullback(cotangent)))
    short = chunked.apply(variables, x[1:, :6], mask[1:, :6], deterministic=True)
    return results, short

  ((want, want_grads), (got, got_grads)), short = run_once(program, x)
  assert np.abs(np.asarray(want)).max() > 0.1
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  wants = jax.tree_util.tree_leaves(want_grads)
  for g, w in zip(jax.tree_util.tree_leaves(got_grads), wants):
    assert finite(g)
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()))
  assert np.abs(np.asarray(want_grads[1])).max() > 1e-2  # input gradients that matter
  np.testing.assert_allclose(got[1, :6], short[0], rtol=1e-5, atol=1e-5)


# Mamba-3's trapezoid (the authors' split, models/mixers/mamba3.py) writes position t with
# t + 1's weight and takes that share back from t's own read: its causal outputs move with
# later tokens by float32 rounding of the largest output, no more.
ROUNDING_CAUSAL = ("mamba3",)


# The members of a kind another member runs (their short convolutions and shifts too) `-m
# slow`, but Mamba-3, whose trapezoid reads its own way (ROUNDING_CAUSAL).
@pytest.mark.parametrize("name", helpers.slow_if_same_kind(
    FAMILY, lambda name: "" if name in ROUNDING_CAUSAL else name))
def test_one_pass_reads_causally_and_two_read_the_future(name):
  """Changing the tokens from position 3 on leaves the causal mixer's first three outputs as
  they were (causal_reading names the setting; ROUNDING_CAUSAL to rounding), and changes the
  bidirectional mixer's. In the recurrent form (cheap to compile; the chunked one computes the
  same function, above)."""
  x, _, _ = _inputs(6)
  changed = x.at[:, 3:].add(10 * jax.random.normal(jax.random.PRNGKey(7), x[:, 3:].shape))
  mask = jnp.ones(x.shape[:2], bool)
  mixers = [_mixer(name, bidirectional=b, form="recurrent") for b in (False, True)]
  assert mixers[0].causal_reading() == "config.model.attention.bidirectional=False"
  assert mixers[1].causal_reading() is None

  def program(x, changed):
    variables = _hard_gates(name, mixers[1].init(jax.random.PRNGKey(0), x, mask,
                                                 deterministic=True))
    pair, masks = jnp.concatenate([x, changed]), jnp.concatenate([mask, mask])
    return [jnp.split(m.apply(variables, pair, masks, deterministic=True), 2) for m in mixers]

  (causal, causal2), (both, both2) = run_once(program, x, changed)
  scale = np.abs(np.asarray(causal)).max() if name in ROUNDING_CAUSAL else 1.0
  assert np.abs(np.asarray(causal2[:, :3] - causal[:, :3])).max() < 1e-6 * scale
  assert np.abs(np.asarray(both2[:, :3] - both[:, :3])).max() > 1e-3


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("name", FAMILY)
def test_the_declared_state_is_the_cores(monkeypatch, name, bidirectional):
  """carried_state (RecurrentMixer's count from the mixer's head_sizes) is what the core
  carries, counted where it runs: per pass, the values' heads x K x V (Mamba-2's queries and
  keys, C and B, may be shared by a group), and with an exponential write gate (mLSTM) the
  stabiliser m of each head; Mamba-3 also carries, per pass and head, the previous position's
  rotated B (K) and x (V) for its trapezoid and its angle sums (rope_angles)."""
  seen, real = [], recurrent.recurrence
  mixer = _mixer(name, bidirectional=bidirectional)
  angles = mixer.rope_angles if name == "mamba3" else None

  def spy(q, k, v, mask, **gates):
    heads, key, value = v.shape[2], q.shape[3], v.shape[3]
    seen.append(heads * key * value + (heads if "log_write" in gates else 0)
                + (0 if angles is None else heads * (key + value + angles)))
    return real(q, k, v, mask, **gates)

  monkeypatch.setattr(recurrent, "recurrence", spy)
  jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), jnp.zeros((1, LENGTH, WIDTH)),
                                    jnp.ones((1, LENGTH), bool), deterministic=True))
  assert len(seen) == 1 + bidirectional
  assert mixer.carried_state(WIDTH, LENGTH) == sum(seen)


def test_the_family_is_the_seven_and_each_declares_its_heads():
  """Zoology's efficiency axis: each member declares its head sizes (the base counts the state
  from them), not inherited; the heads are the encoder's num_heads (Mamba-2's and Mamba-3's:
  head_dim's)."""
  assert set(FAMILY) >= {"mamba2", "retnet", "gla", "hgrn2", "deltanet", "gated_deltanet",
                         "mlstm", "deltaproduct", "rwkv7", "kda", "comba"}
  for name in FAMILY:
    assert registry.get(name).head_sizes is not RecurrentMixer.head_sizes, name
    heads, key, value = _mixer(name).head_sizes(WIDTH)
    assert min(heads, key, value) >= 1 and (heads == HEADS or name in ("mamba2", "mamba3")), \
        name


@pytest.mark.parametrize("name", FAMILY)
def test_heads_and_combination_are_checked_in_one_line(name):
  """num_heads below 1, and a gated combination of one pass, are refused when the mixer is
  built (each setting's own values: tests/test_models.py)."""
  cls = registry.get(name)
  for bad, match in ((dict(num_heads=0), r"^config.model.num_heads=0 is not valid"),
                     (dict(combine="gated"), r"^config.model.attention.combine='gated' .* "
                      r"unless config.model.attention.bidirectional=True")):
    with pytest.raises(SettingError, match=match) as error:
      cls(**bad)
    assert "\n" not in str(error.value)


def test_the_gated_combination_starts_as_the_mean():
  """RecurrentMixer.run's direction gates are zero-initialised: each pass weighs 1/2, the
  mean's function at init (shown on GLA; every member calls the same run)."""
  x, mask, _ = _inputs(3)
  make = lambda combine: _mixer("gla", bidirectional=True, combine=combine)

  def program(x):
    variables = make("gated").init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    mean = {"params": {k: v for k, v in variables["params"].items() if "direction" not in k}}
    return (variables, make("gated").apply(variables, x, mask, deterministic=True),
            make("mean").apply(mean, x, mask, deterministic=True))

  variables, gated, mean = run_once(program, x)
  assert set(variables["params"]) >= {"direction_gate", "direction_gate_bias"}
  np.testing.assert_allclose(gated, mean, rtol=1e-6, atol=1e-7)
