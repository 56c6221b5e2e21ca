"""Comba's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

Comba (Hu et al. 2025) reports no Long Range Arena results and released no LRA setup.
- Block: fla's CombaBlock, the layer then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's Comba layer defaults (the output correction with correction_factor 1, the
  inner decay, the sigmoid output gate, short convolutions of kernel 4, expand_v 2), 4 heads
  as our Gated DeltaNet (K = D / 4, V = 2 K): fla's default is a head width, 256 with 6 heads.
  fla suggests correction_factor 0.02 may suit small models; its default is kept.
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): Gated DeltaNet's (the layer has 2 H
  parameters more, decay and D), the MLP 2.8 to 4.8 D.
- Optimiser: A_log, dt_bias and D (fla's _no_weight_decay) without weight decay, at the global
  rate; decay decays, as in fla.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (40, 112), "text": (120, 424), "retrieval": (80, 352),
          "image": (232, 896), "pathfinder": (104, 456), "pathx": (80, 384)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(conv_kernel=4, use_gate=True, expand_v=2, allow_neg_eigval=False,
               use_output_correction=True, use_inner_decay=True, correction_factor=1.0))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 185_714, "text": 1_356_962, "retrieval": 795_906, "image": 5_127_810,
              "pathfinder": 1_110_122, "pathx": 692_882}
