"""The building blocks the mixers share (fla's modules): the short convolution, the norms and
gated output, the masked input and complex helpers, the initialisers, the head projections, and
the base classes of the recurrent family (recurrent, delta_rule) and of the state space mixers
(ssm). A block imports ops and other blocks, never a mixer."""
