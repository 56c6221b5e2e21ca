"""Padding, measured (`eval.py padding`, lra.reporting.padding): a mixer's real outputs and the
input gradients of its real positions stay within float32 noise when its rows are padded on the
right by 1 and 17 positions of junk, and on the left too where it takes left padding; the
mixers that move are exactly those declared with a reason, so a new mixer that leaks fails
here. The default run measures one mixer of each kind; `-m slow` every registered mixer and
variant (about 2.5 CPU-minutes)."""
import json

import flax.linen as nn
import jax.numpy as jnp
import pytest

from lra.commands import padding_measure
from lra.models import registry
from lra.models.common import HeadsMixer
from lra.reporting import padding as table
from tests import test_mixer_contract
from tests.reporting import one_error_line, run_eval

REAL = table.REAL  # the table's 24 real tokens: at fewer, BigBird's random and global blocks
                   # cover every real key whatever the padding, and it does not move
PADS = (0, 1, 17)
# Cheap to compile, one of each kind: dense softmax attention, a causal short convolution,
# FNet (declared length-dependent) and the recurrent core in its chunked form with gated
# decays (GLA: the left padding that leaked into fla's decays and normaliser).
FAST = ("transformer", "based (conv layer)", "fnet", "gla")


def _check(label: str) -> None:
  row = padding_measure.measure(label, real=REAL, pads=PADS)
  assert "refused" not in row, row["refused"]
  declared = [side for side in ("right", "left") if table.expected(row["mixer"], side)]
  assert table.moved(row) == declared, (
      f"{label} moves with padding on {table.moved(row) or 'no side'}, declared "
      f"{declared or 'none'}:\n{table.markdown([row], REAL, PADS)}")


@pytest.mark.parametrize("label", FAST)
def test_padding_moves_exactly_the_declared_mixers(label):
  _check(label)


@pytest.mark.slow  # every mixer and variant, one compile each: about 2.5 CPU-minutes
@pytest.mark.parametrize("label", padding_measure.rows_to_measure())
def test_every_mixer_moves_with_padding_exactly_where_declared(label):
  _check(label)


def test_the_declarations_name_registered_mixers_and_agree_with_the_contract():
  """Every mixer named has a row; the contract's length-dependent mixers (no truncation check)
  are length-dependent here too, and none is declared both ways."""
  named = {*table.SETTINGS, *table.NEEDED, *table.LENGTH_DEPENDENT, *table.NO_LEFT,
           *(v[0] for v in table.VARIANTS.values())}
  assert named <= set(registry.names())
  assert test_mixer_contract.LENGTH_DEPENDENT <= set(table.LENGTH_DEPENDENT)
  assert not set(table.LENGTH_DEPENDENT) & set(table.NO_LEFT)


class RunningMean(HeadsMixer):
  """A causal running mean that zeroes padded inputs but counts every position in its
  normaliser: right padding is harmless, left padding leaks (as reported of linear attention's
  normaliser with left padding)."""
  ATTENTION_DROPOUT = False

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
    x_BxLxD = jnp.where(mask_BxL[..., None], x_BxLxD, 0.0)
    count_1xLx1 = jnp.arange(1, x_BxLxD.shape[1] + 1, dtype=jnp.float32)[None, :, None]
    return nn.Dense(x_BxLxD.shape[-1])(jnp.cumsum(x_BxLxD, axis=1) / count_1xLx1)


def test_a_mixer_that_counts_left_padding_is_reported_as_leaking():
  row = padding_measure.measure("running_mean", real=REAL, pads=(1,), mixer=RunningMean)
  assert max(row["right"][1].values()) <= table.TOLERANCE
  assert min(row["left"][1].values()) > 0.01
  assert row["verdict"] == "LEAKS (left)" and table.leaks(row) == ["left"]
  assert "| running_mean | " in table.markdown([row], REAL, (1,))


def test_the_command_writes_the_table_and_its_json(capsys, tmp_path):
  """eval.py padding --models=fnet: the table printed and written, its JSON enough to lay the
  table out again (no JAX); a name that is no model is one line."""
  code, out, _ = run_eval(capsys, "padding", "--models=fnet", "--real=5", f"--out={tmp_path}")
  assert code == 0
  written = (tmp_path / "padding.md").read_text()
  assert "| fnet | 0 / 0 |" in written and "length-dependent [1]" in written
  assert "- [1] fnet: the DFT runs over all L positions" in written and written in out + "\n"
  stored = json.loads((tmp_path / "padding.json").read_text())
  assert [r["row"] for r in stored["rows"]] == ["fnet"] and stored["real"] == 5
  assert table.markdown(stored["rows"], real=5) + "\n" == written
  code, _, err = run_eval(capsys, "padding", "--models=fnet,no_such_mixer")
  assert code == 1 and "no_such_mixer" in one_error_line(err)
