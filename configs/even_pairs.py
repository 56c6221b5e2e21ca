"""Even pairs (beyond LRA; Deletang et al.'s regular task): is the count of '01' and '10' odd?
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('even_pairs', arg)
