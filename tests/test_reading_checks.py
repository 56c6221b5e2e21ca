"""How a mixer reads, against what the encoder pools: a CLS token in front pooled under a mixer
that reads causally is refused in one line (it sees only itself: every input would get the
same logits); a Based setting that no layer of the model's depth reads is an idle setting."""
import pytest

from lra import models
from lra.configs import listops, mqar
from lra.errors import UserError
from lra.models.mixers.based import Based
from lra.commands.train import check_before_data  # the checks a run makes before its data


def _refusal(model: str, reading: str) -> str:
  return (f"config.model.pooling='CLS' is not valid: 'MEAN' with config.model.use_cls=False "
          f"for model {model!r} with {reading} (it reads causally, so the CLS token in front "
          "sees only itself and every input would get the same logits)")


@pytest.mark.parametrize("model, attention, refused_by", [
    ("transformer", dict(causal=True), "config.model.attention.causal=True"),
    ("based", dict(causal=True), "config.model.attention.causal=True"),
    ("based", dict(layers=("conv",)),
     "config.model.attention.layers=('conv',) at config.model.num_layers=2 (BaseConv layers "
     "only)"),
    ("gla", dict(bidirectional=False), "config.model.attention.bidirectional=False"),
    ("mamba", dict(bidirectional=False), "config.model.attention.bidirectional=False"),
])
def test_a_cls_token_pooled_under_causal_reading_is_refused_in_one_line(model, attention,
                                                                         refused_by):
  config = listops.get_config(f"{model},cpu")
  config.model.use_cls, config.model.pooling = True, "CLS"
  config.model.attention.update(attention)
  with pytest.raises(UserError) as e:
    check_before_data(config)
  assert str(e.value) == _refusal(model, refused_by)
  # The fix the line names passes.
  config.model.use_cls, config.model.pooling = False, "MEAN"
  check_before_data(config)


def test_causal_reading_stays_where_nothing_pools_the_cls_token():
  """MQAR (Zoology's Figure 2 reads causally) has a per-token head; the LRA presets of the
  recurrent mixers read both ways or pool without a CLS token."""
  config = listops.get_config("transformer,cpu")
  config.model.attention.causal = True
  with pytest.raises(UserError):
    check_before_data(config)
  config.model.use_cls, config.model.pooling = True, "CLS"
  config.objective = "denoise"  # the per-token head pools nothing
  check_before_data(config)
  causal = mqar.get_config("transformer,cpu")
  causal.model.attention.causal = True
  causal.model.use_cls, causal.model.pooling = True, "CLS"
  check_before_data(causal)


def _idle(arg: str, **attention) -> list[str]:
  config = listops.get_config(arg)
  config.model.attention.update(attention)
  model = models.build(config.model.to_dict(), vocab_size=20, num_classes=10, max_len=100,
                       pair=False)
  return models.idle_settings(model)


def test_a_based_setting_that_no_layer_of_its_depth_reads_is_idle():
  """The `,cpu` ListOps Based is two layers, conv and linear: a window there does nothing, and
  a window sweep would draw a flat line; at three layers the default kinds have a window layer."""
  assert _idle("based,cpu", window=32) == [
      "config.model.attention.window=32 does nothing: no layer reads it at "
      "config.model.num_layers=2 (layers: conv, linear)"]
  assert _idle("based,cpu") == []  # the defaults say nothing
  config = listops.get_config("based,cpu")
  config.model.num_layers = 3
  config.model.attention.window = 32
  model = models.build(config.model.to_dict(), vocab_size=20, num_classes=10, max_len=100,
                       pair=False)
  assert models.idle_settings(model) == []
  # Per kind: no linear layer, no conv layer; chunk_size only causal.
  only_window = Based(layers=("window",), num_layers=2, feature_dim=8, chunk_size=16,
                      conv_kernel=4, window=4)
  assert [line.split(" does")[0] for line in only_window.idle_at(100)] == [
      "config.model.attention.feature_dim=8", "config.model.attention.conv_kernel=4",
      "config.model.attention.chunk_size=16"]
  assert Based(num_layers=2, chunk_size=16).idle_at(100) == [
      "config.model.attention.chunk_size=16 does nothing: only causal linear attention reads "
      "it (config.model.attention.causal=False)"]
  assert Based(num_layers=2, chunk_size=16, causal=True).idle_at(100) == []


def test_models_build_refuses_it_too_but_not_a_per_token_head():
  config = listops.get_config("transformer,cpu")
  config.model.attention.causal = True
  build = lambda denoise: models.build(config.model.to_dict(), vocab_size=20, num_classes=10,
                                       max_len=100, pair=False, denoise=denoise)
  with pytest.raises(UserError, match="config.model.pooling='CLS' is not valid"):
    build(False)
  build(True)
