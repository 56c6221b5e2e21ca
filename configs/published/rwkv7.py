"""RWKV-7's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

RWKV-7 (Peng et al. 2025) reports no Long Range Arena results and released no LRA setup.
- Block: fla's RWKV7Block, the time mix (the mixer) then the channel mix: RWKV-7's channel mix
  (a token-shifted squared-ReLU feed-forward, hidden_ratio r = 4: key D x 4D, value 4D x D)
  is the encoder's GELU MLP here, r D wide for the same count before the parity step.
- Mixer: fla's RWKV7Attention layer (its LoRA ranks from the width: 32, the gate's 64 from
  D = 112 up; fla's init, o_proj and the LoRAs' down projections 0), 4 heads (K = V = D / 4):
  fla's default is a head width, 64, wider than most LRA models here.
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8; the MLP 3.6 to
  4.3 D (ListOps: 6 D; at 4 D its step from 32 to 40 moves the count from 0.82 to 1.19 of
  S5's).
- Optimiser: every parameter decays (fla's layer marks none _no_weight_decay).
Deviations: those of recurrent.py; the value residual is not carried between layers (every
layer is fla's layer 0: models/mixers/rwkv7.py); no separate norm before the first block (fla's
pre_norm of layer 0); the token embedding N(0, 0.02) as the family's (fla's RWKV-7 model draws
it uniform in +-1e-4).
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (32, 192), "text": (128, 464), "retrieval": (88, 336),
          "image": (256, 1016), "pathfinder": (112, 464), "pathx": (88, 376)}

HYPERPARAMETERS = recurrent.hyperparameters(WIDTHS, num_heads=4, mixer=dict(zero_init=True))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 187_306, "text": 1_352_546, "retrieval": 795_642, "image": 5_124_570,
              "pathfinder": 1_112_258, "pathx": 696_578}
