"""DeltaProduct's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

DeltaProduct (Siems et al. 2025) reports no Long Range Arena results and released no LRA
setup.
- Block: fla's GatedDeltaProductBlock, the layer then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's GatedDeltaProduct layer defaults (num_householder 2, the forget gate, beta in
  (0, 2), the output gate, short convolutions of kernel 4, expand_v 2), 4 heads as our Gated
  DeltaNet (K = D / 4, V = 2 K).
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8; the MLP 3.2 to
  5 D. Two keys, values and betas a token make the layer wider than Gated DeltaNet's at one
  D (k_proj 2 D^2, v_proj 4 D^2), so D is 8 to 24 narrower than its.
- Optimiser: A_log and dt_bias (fla's _no_weight_decay) without weight decay, at the global
  rate.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (32, 160), "text": (104, 464), "retrieval": (72, 352),
          "image": (208, 888), "pathfinder": (96, 416), "pathx": (80, 256)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(conv_kernel=4, num_householder=2, use_forget_gate=True, allow_neg_eigval=True,
               use_gate=True, expand_v=2))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 185_962, "text": 1_351_298, "retrieval": 789_170, "image": 5_136_954,
              "pathfinder": 1_116_818, "pathx": 692_066}
