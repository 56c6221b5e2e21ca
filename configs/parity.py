"""Parity (beyond LRA): is the count of 1s odd? A class task, Grazzi et al.'s layout by default:
the answer read at the last bit, lengths s = bits + 1 in 3..40 to train and 40..256 to
validate and test. The default is Grazzi et al.'s parity yaml, xlstm/experiments/
parity_mamba_single_layer.yaml of adankow/unlocking_state_tracking (commit dd420c5):
`n_layers: 1`, `d_model: 16`, `batch_size: 256`, `lr: 0.001`, `lr_warmup_steps: 2000`,
`num_steps: 20000`, `min_sequence_length: 3`, `max_sequence_length: 40`, validation and test
`min_sequence_length: 40`, `max_sequence_length: 256`, `count: train: 5120000`.
Deletang's layout and lengths: --config.data.layout=deletang --config.data.train_min_length=1
--config.data.test_min_length=41 --config.data.test_max_length=500.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('parity', arg)
