"""Data: the six tasks (readers, generators, loaders), the memory-mapped store, batches and the
data command (`python -m lra.data TASK ...`). Nothing here imports JAX except lra.data.batches,
and nothing imports models."""
