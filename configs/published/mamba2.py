"""Mamba-2's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the six recurrent tables share).

Mamba-2 (Dao & Gu 2024) reports no Long Range Arena results and released no LRA setup.
- Block: Mamba's residual block, the mixer alone (feedforward=False): the official Mamba2
  language models have no MLP (d_intermediate 0), the layer's in_proj carrying the expansion.
- Mixer: the official defaults (state-spaces/mamba Mamba2: d_state 128, expand 2,
  conv_kernel 4, one group of B and C, dt in [0.001, 0.1]) but the head width: head_dim is
  the largest power of two up to the official 64 that divides E = 2 D (head_dim below): 64
  would allow only widths in steps of 32, too coarse for parity, and powers of two also split
  the `cpu` option's narrow models (E 32 to 128), which take the task's head_dim. A head's
  width only sets how many channels share one decay (Mamba-1 gives each channel its own); the
  state, E x d_state numbers per direction, does not depend on it. Path-X starts dt at
  [0.0001, 0.1], as S5's Path-X run and our Mamba's do.
- Widths (WIDTHS; counts in PARAMETERS): multiples of 8 but ListOps and Path-X, where none is
  within 5% of S5's count: there the width within 5% with the widest heads (ListOps 42:
  4-wide heads, Path-X 116: 8-wide; Path-X 114 would be as near with 4-wide ones, twice the
  heads and memory).
- Optimiser: A_log, D and dt_bias (the official _no_weight_decay) without weight decay, at
  the global rate.
Deviations: those of recurrent.py; head_dim as above; the bidirectional form is the family's
shared-parameter average, not Hydra's (models/mamba2.py says how they differ).
"""
from lra.configs.published import recurrent

SIZE_SETTINGS = ("d_state", "expand")  # kept small by the `cpu` option (head_dim is taken)

WIDTHS = {"listops": 42, "text": 168, "retrieval": 120, "image": 352, "pathfinder": 152,
          "pathx": 116}


def head_dim(width: int) -> int:
  """The largest power of two up to 64 that divides the inner width 2 x width."""
  return max(p for p in (1, 2, 4, 8, 16, 32, 64) if 2 * width % p == 0)


HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, mixer=dict(d_state=128, expand=2, conv_kernel=4, groups=1),
    task_mixer={task: dict(head_dim=head_dim(width), **({"dt_min": 0.0001} if task == "pathx"
                                                        else {}))
                for task, width in WIDTHS.items()})

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 194_420, "text": 1_361_300, "retrieval": 820_592, "image": 5_066_832,
              "pathfinder": 1_104_248, "pathx": 701_420}
