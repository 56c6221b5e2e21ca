"""Mamba's LRA settings -- OUR CHOICE, not published: read this first.

Mamba (Gu & Dao 2023) reports no Long Range Arena results and released no LRA configuration.
The settings below put a bidirectional Mamba at parameter parity with S5's published LRA
models (configs/published/s5.py) and give it S5's training budget, so that the two can be
compared on equal terms; nothing here is tuned.

Choices:
- Block: Mamba's own residual block, pre-norm x + Mamba(norm(x)) without an MLP sub-block
  (feedforward=False), layer norm (the official blocks use RMSNorm or LayerNorm; the encoder
  has LayerNorm), mean pooling over real tokens, no CLS token, no position embeddings.
- Mixer: the official defaults (state_size 16, expand 2, conv_kernel 4, dt_rank "auto" =
  ceil(D / 16), dt in [0.001, 0.1]), bidirectional as every S5 LRA run is (the Vision Mamba
  scheme, models/mixers/mamba.py). Path-X starts dt at [0.0001, 0.1], as S5's Path-X run does.
- Sizes: S5's depth per task; the width is the multiple of 8 whose whole classifier
  (embedding, blocks, final norm, head; mlp_dim = emb_dim as for S5) has the parameter count
  nearest to S5's published model's (ListOps: the nearest even width, as no multiple of 8 is
  within 5%). Counted with models.build for each task's vocabulary and classes, both with
  their authors' heads and encoders (tests/test_published_configs.py checks the counts stay
  within 5% of S5's):

  | task | S5 layers x H (P) | S5 params | Mamba layers x D | Mamba params | ratio |
  |---|---|---|---|---|---|
  | ListOps | 8 x 128 (16) | 187,978 | 8 x 46 | 193,440 | 1.029 |
  | Text | 6 x 256 (192) | 1,352,130 | 6 x 168 | 1,372,394 | 1.015 |
  | Retrieval | 6 x 128 (256) | 792,322 | 6 x 120 | 813,362 | 1.027 |
  | Image | 6 x 512 (384) | 5,133,706 | 6 x 344 | 5,086,394 | 0.991 |
  | Pathfinder | 6 x 192 (256) | 1,113,602 | 6 x 152 | 1,108,082 | 0.995 |
  | Path-X | 6 x 128 (256) | 694,018 | 6 x 120 | 725,042 | 1.045 |

  Mamba at S5's width would be several times larger (about 6 D^2 parameters per layer against
  S5's D^2 + 3 P D), hence narrower models at the same depth.
- Around the blocks, the peers' model (mamba_ssm MixerModel, Vim): a final norm (norm_f;
  LayerNorm here, RMSNorm there), no dropout on the embedded input, a linear head
  (head="linear"; Retrieval: S5's Dense-GELU-Dense on the four features, head="gelu_mlp").
  Pixels: S5's linear encoder of normalised intensities (S5_PIXELS), as this is S5's budget
  (Vim embeds patches, which LRA's pixel sequences do not have). The mixer starts as the
  peers do: out_proj divided by sqrt(num_layers), the backward dt_bias at 0
  (models/mixers/mamba.py).
- Training: S5's per task (batch size, epochs, learning rate, weight decay, warmup, cosine
  schedule, Adam b2 0.999 and eps 1e-8, no clipping, dropout). The OPTIMIZER_GROUP (A_log, D,
  dt_bias) gets no weight decay, as the official code marks them (Vim's timm optimizer
  ignores the mark: it exempts 1-D parameters, so decays A_log but not D), and the global
  learning rate (ssm_learning_rate = learning_rate: Mamba has no separate rate for them). The
  mixer has no inner dropout; the task's dropout is the encoder's residual dropout.
"""
from lra.configs.published import S5_PIXELS, pixel_encoder, s5

SIZE_SETTINGS = ("state_size", "expand", "dt_rank")  # kept small by the `cpu` option

# S5's per-task training, with the SSM group at the global learning rate.
_TRAINING = ("batch_size", "epochs", "learning_rate", "weight_decay", "warmup_steps",
             "schedule", "adam_b1", "adam_b2", "adam_eps", "grad_clip_norm")


def _entry(task, num_layers, emb_dim, **mixer):
  published = s5.HYPERPARAMETERS[task]
  model = dict(num_layers=num_layers, emb_dim=emb_dim,
               dropout_rate=published["model"]["dropout_rate"], norm="layer", prenorm=True,
               feedforward=False, pooling="MEAN", use_cls=False, input_dropout=False,
               head="gelu_mlp" if task == "retrieval" else "linear",
               **pixel_encoder(task, S5_PIXELS),
               attention=dict(state_size=16, expand=2, conv_kernel=4, dt_rank="auto",
                              bidirectional=True, **mixer))
  training = {key: published[key] for key in _TRAINING}
  return dict(model=model, ssm_learning_rate=published["learning_rate"], **training)


HYPERPARAMETERS = {
    "listops": _entry("listops", 8, 46),
    "text": _entry("text", 6, 168),
    "retrieval": _entry("retrieval", 6, 120),
    "image": _entry("image", 6, 344),
    "pathfinder": _entry("pathfinder", 6, 152),
    "pathx": _entry("pathx", 6, 120, dt_min=0.0001),
}

# The whole classifier's parameter count (models.build, the task's vocabulary and classes)
# of S5's published model and of the Mamba model above, per task.
PARAMETERS = {"listops": (187_978, 193_440), "text": (1_352_130, 1_372_394),
              "retrieval": (792_322, 813_362), "image": (5_133_706, 5_086_394),
              "pathfinder": (1_113_602, 1_108_082), "pathx": (694_018, 725_042)}
