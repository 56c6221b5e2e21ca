"""DeltaNet's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

DeltaNet (Schlag et al. 2021; Yang et al. 2024) reports no Long Range Arena results and
released no LRA setup.
- Block: fla's DeltaNetBlock, the delta-rule layer then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's DeltaNet defaults (SiLU and l2-normalised q and k, short convolutions of
  kernel 4, beta = sigmoid per head, no output gate), 4 heads (the layer's default; K = V =
  D / 4).
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8; the MLP 3.6 to
  5 D.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (40, 200), "text": (136, 520), "retrieval": (96, 344),
          "image": (264, 1080), "pathfinder": (120, 520), "pathx": (96, 400)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(conv_kernel=4, use_beta=True, use_gate=False, allow_neg_eigval=False))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 188_770, "text": 1_348_502, "retrieval": 789_770, "image": 5_137_990,
              "pathfinder": 1_113_542, "pathx": 697_202}
