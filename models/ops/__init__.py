"""The computations (fla's ops): pure functions of arrays, no parameters, each tested against a
plain reference: the recurrent family's core (matrix_recurrence), its signed decays (signed)
and DeltaProduct's steps on it (delta_product), Mamba's selective scan, the diagonal recurrence
of the state space models, exact softmax attention by chunks, blocked attention, the short
causal and the FFT convolutions, and Based's Taylor linear attention."""
