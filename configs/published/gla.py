"""GLA's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

GLA (Yang et al. 2023) reports no Long Range Arena results and released no LRA setup.
- Block: fla's GLABlock, gated linear attention then an MLP sub-layer (hidden_ratio r = 4).
- Mixer: fla's GatedLinearAttention defaults (expand_k 0.5, expand_v 1, a rank-16 forget gate,
  gate_logit_normalizer 16), 4 heads (its default).
- Widths (WIDTHS: (D, mlp_dim); counts in PARAMETERS): D a multiple of 8 (4 heads of
  D / 8 key channels); the MLP 3.6 to 4.8 D.
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": (40, 192), "text": (136, 520), "retrieval": (96, 344),
          "image": (264, 1072), "pathfinder": (120, 512), "pathx": (96, 392)}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4,
    mixer=dict(expand_k=0.5, expand_v=1.0, gate_low_rank_dim=16, gate_logit_normalizer=16))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 186_306, "text": 1_355_438, "retrieval": 794_666, "image": 5_126_062,
              "pathfinder": 1_108_094, "pathx": 692_834}
