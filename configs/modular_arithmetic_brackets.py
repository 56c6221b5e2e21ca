"""Modular arithmetic with brackets (beyond LRA; Deletang et al.'s context-free task). Grazzi
et al.'s layout and recipe by default (mod_arithmetic_with_brackets_mamba.yaml);
--config.data.layout=deletang for Deletang's.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('modular_arithmetic_brackets', arg)
