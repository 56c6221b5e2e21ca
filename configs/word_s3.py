"""The S_3 word problem (beyond LRA; Merrill et al. 2024's task, the smallest group of Siems
et al. 2025's DeltaProduct experiments): running products in S_3, the permutations of 3
elements.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('word_s3', arg)
