"""Mamba-2's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

Mamba-2 (Dao & Gu 2024) reports no Long Range Arena results and released no LRA setup.
- Block: Mamba's residual block, the mixer alone (feedforward=False): the official Mamba2
  language models have no MLP (d_intermediate 0), the layer's in_proj carrying the expansion.
- Mixer: the official defaults (state-spaces/mamba Mamba2: d_state 128, expand 2,
  conv_kernel 4, one group of B and C, dt in [0.001, 0.1]) but the head width: head_dim 0,
  the largest divisor of E = 2 D up to the official 64 (models/mixers/mamba2.py), as the official
  64 would allow only widths in steps of 32, too coarse for parity, and any width (the
  `cpu` option's narrow models, `eval.py speed --emb_dim`) then splits. A head's width only
  sets how many channels share one decay (Mamba-1 gives each channel its own); the state,
  E x d_state numbers per direction, does not depend on it. Path-X starts dt at
  [0.0001, 0.1], as S5's Path-X run and our Mamba's do.
- Widths (WIDTHS; counts in PARAMETERS): multiples of 8 but ListOps and Path-X, where none is
  within 5% of S5's count (ListOps 42, Path-X 116).
- Optimiser: A_log, D and dt_bias (the official _no_weight_decay) without weight decay, at
  the global rate.
Deviations: those of recurrent.py; head_dim as above; the bidirectional form is the family's
shared-parameter average, not Hydra's (models/mixers/mamba2.py says how they differ).
"""
from lra.configs.published import recurrent

SIZE_SETTINGS = ("d_state", "expand")  # kept small by the `cpu` option (head_dim 0 is taken)

WIDTHS = {"listops": 42, "text": 168, "retrieval": 120, "image": 352, "pathfinder": 152,
          "pathx": 116}


HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, mixer=dict(d_state=128, expand=2, conv_kernel=4, groups=1, head_dim=0),
    task_mixer=dict(pathx=dict(dt_min=0.0001)))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 187_580, "text": 1_345_910, "retrieval": 812_474, "image": 5_066_832,
              "pathfinder": 1_094_018, "pathx": 683_570}
