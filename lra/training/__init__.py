"""Training: the one generic trainer, the optimiser, checkpoints and metric writers."""
