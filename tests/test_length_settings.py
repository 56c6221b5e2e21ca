"""Settings that follow each task's sequence (configs/table.py): Hyena's l_max is the task's
longest input on every task and preset, and Based gets two layers where the task has one (its
kinds cycle by layer: one layer would be a convolution alone)."""
import pytest

from lra import models
from lra.configs import image, listops, mqar, pathfinder, pathx, retrieval, text
from lra.data import tasks
from lra.rules import SettingError

# (task config, option, the longest input the task gives the model)
LENGTHS = [(listops, "", 2000), (listops, ",cpu", 100), (text, "", 4000), (retrieval, "", 4000),
           (image, "", 1024), (pathfinder, "", 1024), (pathx, "", 16384), (mqar, "", 256),
           (mqar, ",cpu", 64)]


@pytest.mark.parametrize("module,option,length", LENGTHS,
                         ids=[m.__name__.rsplit(".", 1)[1] + o for m, o, _ in LENGTHS])
def test_hyena_filter_spans_the_task(module, option, length):
  c = module.get_config("hyena" + option)
  assert not c.model.use_cls
  assert c.model.attention.l_max == length


@pytest.mark.parametrize("module", [image, pathfinder, pathx])
def test_based_gets_its_conv_and_linear_layers_on_one_layer_tasks(module):
  assert module.get_config("performer").model.num_layers == 1  # the task's own depth
  assert module.get_config("based").model.num_layers == 2
  assert module.get_config("based,cpu").model.num_layers == 2
  assert listops.get_config("based").model.num_layers == 4  # deeper tasks keep theirs


def test_a_longer_input_than_l_max_is_refused_when_built():
  c = mqar.get_config("hyena,cpu")
  with pytest.raises(SettingError, match="l_max=64 .* at least the longest sequence, 128"):
    models.build(c.model.to_dict(), vocab_size=tasks.FACTS["mqar"].vocab_size,
                 num_classes=10, max_len=128, pair=False)
