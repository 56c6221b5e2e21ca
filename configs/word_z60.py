"""The Z_60 word problem (beyond LRA; Merrill et al. 2024): the running sum mod 60.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('word_z60', arg)
