"""RetNet's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

RetNet (Sun et al. 2023) reports no Long Range Arena results and released no LRA setup.
- Block: RetNet's, multi-scale retention then an MLP sub-layer (the paper's FFN; fla's RetNet
  config: hidden_ratio r = 2).
- Mixer: fla's MultiScaleRetention defaults (expand_k 1, expand_v 2), 8 heads (fla's RetNet
  config): the decays 1 - 2^(-5-h) then reach 1 - 2^-12, a memory of some 4,000 positions.
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 16, as the rotation
  needs an even key width per head (D / 8). ListOps' step from 32 to 48 moves the count from
  0.54 to 1.20 of S5's, so its MLP comes out at D (ratio 1, not 2); elsewhere 1.6 to 2.7 D.
Deviations: those of recurrent.py; the retention is rotated but not xPos-scaled (fla's, as
models/mixers/retnet.py says).
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (48, 48), "text": (128, 344), "retrieval": (96, 208),
          "image": (272, 480), "pathfinder": (128, 208), "pathx": (96, 216)}

HYPERPARAMETERS = recurrent.hyperparameters(WIDTHS, num_heads=8,
                                            mixer=dict(expand_k=1.0, expand_v=2.0))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 188_122, "text": 1_354_322, "retrieval": 791_618, "image": 5_133_218,
              "pathfinder": 1_111_970, "pathx": 696_098}
