"""The recurrent family's LRA settings at S5's size -- OUR CHOICE, not published: read this first.

Mamba-2, RetNet, GLA, DeltaNet, Gated DeltaNet, DeltaProduct, RWKV-7, KDA, Comba and mLSTM
released no Long Range Arena configuration (HGRN2's authors did: configs/published/hgrn2.py). As for Mamba
(configs/published/mamba.py), each gets a bidirectional model at parameter parity with S5's
published LRA model (configs/published/s5.py) and S5's training budget, so that all are
compared on equal terms; nothing here is tuned. This module is their one builder: each
model's file (mamba2.py, retnet.py, gla.py, deltanet.py, gated_deltanet.py, deltaproduct.py,
rwkv7.py, kda.py, comba.py, mlstm.py) gives its block, heads, mixer settings and widths, and
its own deviations.

Shared choices:
- Sizes: S5's depth per task. The width D is the multiple of 8 (16 where the heads need it)
  whose whole classifier (embedding, blocks, final norm, head, counted with models.build for
  the task's vocabulary and classes) has the parameter count nearest S5's published model's
  (S5_PARAMETERS), its MLP at the authors' ratio r (below); then, in the blocks that have an
  MLP, the MLP's width (a multiple of 8) is the one that brings the count nearest S5's: the
  fine step the width alone lacks (one step of 8 in D moves the count by 10-40% at these
  sizes). Without an MLP, where no multiple of 8 comes within 5%, the nearest width the heads
  allow that does (mamba.py's ListOps rule). Each file's WIDTHS and PARAMETERS hold the result;
  tests/test_recurrent_recipes.py checks that the counts are the real ones, within 5% of S5's.
- Blocks: pre-norm residual (x + f(norm(x))), LayerNorm, a final norm, the mixer
  bidirectional (the family's two passes with shared parameters, averaged:
  models/blocks/recurrent.py). Around the mixer, its authors' block: an MLP sub-layer where
  their models have one (flash-linear-attention's blocks: a SwiGLU of hidden_ratio r, 2/3 r D
  wide, 2 r D^2 parameters; here the encoder's Dense(mlp_dim)-GELU-Dense, r D wide for the
  same count before the parity step above), none where the layer carries its own
  up-projection (Mamba-2, mLSTM: feedforward=False, mlp_dim = D as S5's).
- The token embedding as fla's models initialise it, N(0, 0.02) (`token_embedding`; LRA's
  encoder starts it at N(0, 1), which leaves a mixer initialised at fla's N(0, 0.02) a small
  share of the residual stream).
- Around the blocks, as for Mamba: mean pooling over real tokens, no CLS token, no position
  embeddings (the decays and convolutions encode order), no dropout on the embedded input, a
  linear head (Retrieval: S5's Dense-GELU-Dense on the four features, head="gelu_mlp"), S5's
  linear encoder of normalised pixel intensities (S5_PIXELS). The mixer's own
  initialisation; the task's dropout is the encoder's residual (and MLP) dropout, as these
  mixers have none inside.
- Training: S5's per task (batch size, epochs, learning rate, weight decay, warmup, cosine
  schedule, Adam b2 0.999 and eps 1e-8, no clipping, dropout). A mixer's OPTIMIZER_GROUP
  (Mamba-2: A_log, D, dt_bias; Gated DeltaNet, DeltaProduct and KDA: A_log, dt_bias; Comba:
  A_log, dt_bias, D: the leaves their authors mark _no_weight_decay) gets no weight decay and
  the global learning rate (ssm_learning_rate = learning_rate); every other parameter decays.

Deviations shared by the ten (each file adds its own):
- LayerNorm in the blocks and after them, where the authors' models use RMSNorm.
- The MLP sub-layer is GELU where the authors' is a SwiGLU, and its width is set for parity
  (above), so its ratio to D is near, not at, the authors'. On Retrieval the head's hidden
  layer is mlp_dim wide (S5's: D), as the encoder has one width for both.
- Bidirectional: all ten authors' layers are causal; the two-pass average is ours (each
  mixer's docstring says how it runs).
"""
from lra.configs.published import S5_PIXELS, pixel_encoder, s5

# The whole classifier's parameter count of S5's published model per task (models.build with
# the task's vocabulary and classes; the same as configs/published/mamba.py's first column).
S5_PARAMETERS = {"listops": 187_978, "text": 1_352_130, "retrieval": 792_322,
                 "image": 5_133_706, "pathfinder": 1_113_602, "pathx": 694_018}

FLA_EMBED_INIT = 0.02  # fla's config.initializer_range, its models' embedding std

# S5's per-task training (with the mixer's group at the global learning rate).
_TRAINING = ("batch_size", "epochs", "learning_rate", "weight_decay", "warmup_steps",
             "schedule", "adam_b1", "adam_b2", "adam_eps", "grad_clip_norm")


def model(task: str, emb_dim: int, mlp_dim: int | None, *, num_heads: int | None,
          mixer: dict) -> dict:
  """The encoder settings of one task's model at width `emb_dim` (S5's depth and dropout):
  `num_heads` heads over qkv_dim = emb_dim (None: the mixer sets its own heads), an MLP
  sub-layer mlp_dim wide (None: none), the mixer's settings `mixer`."""
  published = s5.HYPERPARAMETERS[task]["model"]
  heads = {} if num_heads is None else dict(num_heads=num_heads, qkv_dim=emb_dim)
  return dict(num_layers=published["num_layers"], emb_dim=emb_dim, **heads,
              mlp_dim=mlp_dim or emb_dim, feedforward=mlp_dim is not None,
              dropout_rate=published["dropout_rate"], norm="layer", prenorm=True,
              final_norm=True, pooling="MEAN", use_cls=False, input_dropout=False,
              head="gelu_mlp" if task == "retrieval" else "linear",
              **pixel_encoder(task, S5_PIXELS), **token_embedding(task),
              attention=dict(mixer, bidirectional=True))


def token_embedding(task: str) -> dict:
  """fla's embedding init, N(0, initializer_range 0.02) (every fla model's _init_weights, e.g.
  fla/models/gla/modeling_gla.py GLAPreTrainedModel): on a token task ({} on a pixel one)."""
  return {} if task in S5_PIXELS else dict(embed_init=FLA_EMBED_INIT)


def hyperparameters(widths: dict, *, num_heads: int | None = None, mixer: dict | None = None,
                    task_mixer: dict[str, dict] | None = None) -> dict:
  """HYPERPARAMETERS (configs/published/__init__.py) of a recurrent mixer at S5's size and
  training: `widths` {task: emb_dim} for blocks without an MLP, {task: (emb_dim, mlp_dim)}
  for blocks with one; `mixer` the settings of every task, `task_mixer` {task: settings}
  those of one task on top."""
  table = {}
  for task, width in widths.items():
    emb_dim, mlp_dim = width if isinstance(width, tuple) else (width, None)
    settings = dict(mixer or {}, **(task_mixer or {}).get(task, {}))
    published = s5.HYPERPARAMETERS[task]
    table[task] = dict(model=model(task, emb_dim, mlp_dim, num_heads=num_heads,
                                   mixer=settings),
                       ssm_learning_rate=published["learning_rate"],
                       **{key: published[key] for key in _TRAINING})
  return table
