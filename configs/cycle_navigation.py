"""Cycle navigation (beyond LRA; Deletang et al.'s regular task): the final place on a 5-cycle.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('cycle_navigation', arg)
