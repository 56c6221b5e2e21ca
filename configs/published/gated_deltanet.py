"""Gated DeltaNet's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025) reports no Long Range Arena results and
released no LRA setup.
- Block: fla's GatedDeltaNetBlock, the layer then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's GatedDeltaNet defaults (output gate, short convolutions of kernel 4,
  expand_v 2), 4 heads as our DeltaNet (K = D / 4, V = 2 K): fla's default is a head width,
  256 with 6 heads (H K = 0.75 D at D = 2048), wider than every LRA model here.
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8; the MLP 2.8 to
  4.8 D (ListOps' step from 32 to 40 moves the count from 0.75 to 1.15 of S5's).
- Optimiser: A_log and dt_bias (fla's _no_weight_decay) without weight decay, at the global
  rate.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (40, 112), "text": (120, 424), "retrieval": (80, 352),
          "image": (232, 896), "pathfinder": (104, 456), "pathx": (80, 384)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(conv_kernel=4, use_gate=True, expand_v=2, allow_neg_eigval=False))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 185_650, "text": 1_356_914, "retrieval": 795_858, "image": 5_127_762,
              "pathfinder": 1_110_074, "pathx": 692_834}
