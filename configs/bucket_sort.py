"""Bucket sort (beyond LRA; Deletang et al.'s context-sensitive task): the string sorted.
The settings, their sources and the cpu preset: configs/formal.py; the data:
lra/data/formal/ and docs/data.md.
"""
from lra.configs import formal


def get_config(arg=None):
  return formal.get_config('bucket_sort', arg)
