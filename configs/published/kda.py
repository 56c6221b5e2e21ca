"""KDA's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

KDA, Kimi Delta Attention (Kimi Team 2025, Kimi Linear), reports no Long Range Arena results
and released no LRA setup.
- Block: fla's KDABlock, the layer then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's KimiDeltaAttention layer defaults (expand_v 1, the sigmoid output gate, short
  convolutions of kernel 4, beta in (0, 1), no bounded gate), 4 heads as our Gated DeltaNet
  (K = V = D / 4): fla's default is a head width, 128 with 16 heads.
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8; the MLP 3.7 to
  4.4 D. V = K makes the layer narrower than Gated DeltaNet's at one D (v_proj D^2, the
  low-rank f_proj and g_proj 2 D^2 / 4 each), so D is 0 to 24 wider than its.
- Optimiser: A_log and dt_bias (fla's _no_weight_decay) without weight decay, at the global
  rate.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (40, 176), "text": (128, 528), "retrieval": (88, 368),
          "image": (256, 1016), "pathfinder": (120, 456), "pathx": (96, 352)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(conv_kernel=4, use_gate=True, expand_v=1, allow_neg_eigval=False))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 186_690, "text": 1_356_986, "retrieval": 788_870, "image": 5_132_658,
              "pathfinder": 1_108_862, "pathx": 698_090}
