"""mLSTM's LRA settings -- OUR CHOICE at S5's size, not published: read
configs/published/recurrent.py first (what the recurrent tables at S5's size share).

xLSTM (Beck et al. 2024) reports no Long Range Arena results for its mLSTM and released no
LRA setup.
- Block: xLSTM's mLSTM block, the layer alone (feedforward=False): its up-projection
  (proj_factor 2) is the block's expansion, and xLSTM's mLSTM blocks have no MLP.
- Mixer: xLSTM's mLSTMLayer defaults (proj_factor 2, conv_kernel 4, qkv_blocksize 4), 4 heads
  (its default; K = 2 D / 4).
- Widths (WIDTHS; counts in PARAMETERS): multiples of 8 but Path-X (132: 128 is 5.2% below
  S5's count, 136 6.4% above).
Deviations: those of recurrent.py.
"""
from lra.configs.published import recurrent

WIDTHS = {"listops": 56, "text": 184, "retrieval": 128, "image": 368, "pathfinder": 168,
          "pathx": 132}

HYPERPARAMETERS = recurrent.hyperparameters(
    WIDTHS, num_heads=4, mixer=dict(proj_factor=2, conv_kernel=4, qkv_blocksize=4))

# The whole classifier's parameter count per task (recurrent.S5_PARAMETERS: S5's).
PARAMETERS = {"listops": 191_650, "text": 1_364_042, "retrieval": 756_530, "image": 5_074_778,
              "pathfinder": 1_105_826, "pathx": 697_802}
