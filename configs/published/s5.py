"""S5's published LRA hyperparameters.

Source: the official lindermanlab/S5 repository, bin/run_experiments/run_lra_{listops,imdb,aan,
cifar,pathfinder,pathx}.sh (commit d133f4d), the commands behind the paper's LRA table
(62.15 / 89.31 / 91.40 / 88.00 / 95.33 / 98.58), with run_train.py's defaults for what they
leave out: pre-norm, batch norm, conjugate symmetry, ZOH, dt in [0.001, 0.1], activation
half_glu1, linear warmup (`warmup_end` epochs) then cosine decay to 0, Adam(W) with optax's
defaults (b2 0.999, eps 1e-8), no gradient clipping, mean pooling over real tokens, no position
embeddings. All six runs are bidirectional. learning_rate = lr_factor * ssm_lr_base.

The recipe around the layer, as the official code has it (s5/seq_model.py, s5/layers.py,
s5/train_helpers.py, s5/dataloading.py; what each line below sets):
- No norm after the stack (final_norm=False), a linear decoder after the mean pool
  (head="linear"), and Retrieval's decoder Dense(H)-GELU-Dense on [u, v, u-v, u*v]
  (head="gelu_mlp" with mlp_dim = H; our "uvpd" features are the same four, reordered).
  Both documents of a pair pass the stack as one batch, so BatchNorm's statistics are over
  both (models/encoder.py DualClassifier does this for every model).
- The image tasks encode the normalised intensity with a Dense(1 -> H) (input_encoder
  "linear"): Image (p/255 - 122.6/255) / (61/255), Pathfinder and Path-X (p/255 - 0.5) / 0.5
  (configs/published S5_PIXELS). No dropout between the encoder and the first layer
  (input_dropout=False).
- BatchNorm momentum 0.95 (run_train.py's default); Pathfinder and Path-X pass 0.9.
- Optimizer groups per task (train_helpers.create_train_state; ssm = Adam at ssm_lr without
  weight decay, regular = AdamW at lr with decay; the "norm" key of their lists is a dict, not
  a leaf, so norms train as regular, as here):
  ListOps and Image (opt_config BfastandCdecay): Lambda and log_dt in ssm, B regular;
  Text and Retrieval (standard, dt_global=True): Lambda and B in ssm, log_dt regular;
  Pathfinder (standard): Lambda, B and log_dt in ssm (the mixer's OPTIMIZER_GROUP);
  Path-X (BandCdecay): Lambda and log_dt in ssm, B at ssm_lr WITH weight decay.
  Everything else (C, D, the GLU, encoder, decoder, norms, biases) is regular.

Deviations (ours):
- Padding is masked: the official code runs the scans and BatchNorm over the padding of
  ListOps, Text and Retrieval (only its mean pool skips it). --config.model.pad_like_authors
  =True reproduces that function; the published ListOps, Text and Retrieval figures were
  obtained with it.
- Tokens enter through our embedding table, N(0, 1) and no bias (S5 one-hot encodes them
  into a Dense, lecun normal over its vocabulary plus a bias: the same function family).
  S5 also appends an EOS token and cuts at l_max 2048 (ListOps) and 4096 (Text); we cut at
  2,000 and 4,000 without EOS (Retrieval: 4,000 both).
- Schedule: S5 sets each step's rate after the step, so its first step runs at the peak
  rate, warmup reaches peak at step W (k/W), and its cosine starts at count W of a period of
  T - W (so it begins at cos(pi W / (T - W)) and holds lr_min for the last W steps); ours is
  optax's warmup from 0 then a cosine of period T - W from step W. The largest gap is under
  1% of peak on every task (ListOps: cos(pi 1920/74880) = 0.997 at the switch).
- Epochs -> steps with our train-split sizes (Text: 22,500 after our 10% held out; S5 trains
  on all 25,000 and selects on the test set). Warmup is one epoch of our split where the run
  has warmup_end=1, none for Text (warmup_end=0).
- The layer's last dropout is the encoder's residual dropout (same rate, not tied over L).
"""

from lra.configs.published import S5_PIXELS, pixel_encoder

SIZE_SETTINGS = ("state_size", "blocks")  # kept small by the `cpu` option (blocks divides P)

_TRAINER = dict(schedule="cosine", adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8,
                grad_clip_norm=0.0)


# The parameter groups of the official opt_config per task (see the docstring).
_B_FAST = dict(ssm_params="Lambda_re,Lambda_im,log_dt")  # BfastandCdecay: B is regular
_DT_GLOBAL = dict(ssm_params="Lambda_re,Lambda_im,B")  # standard with dt_global
_B_DECAY = dict(ssm_params="Lambda_re,Lambda_im,log_dt", ssm_decay_params="B")  # BandCdecay


def _model(task, num_layers, emb_dim, dropout_rate, momentum=0.95, **ssm):
  return dict(num_layers=num_layers, emb_dim=emb_dim, dropout_rate=dropout_rate, norm="batch",
              prenorm=True, feedforward=False, pooling="MEAN", use_cls=False,
              final_norm=False, input_dropout=False, batch_norm_momentum=momentum,
              head="gelu_mlp" if task == "retrieval" else "linear",
              **pixel_encoder(task, S5_PIXELS),
              attention=dict(dict(bidirectional=True, discretization="zoh"), **ssm))


HYPERPARAMETERS = {
    # run_lra_listops.sh: 8 layers, H 128, P 16 in 8 blocks (blocks of 2: one complex pair);
    # opt_config BfastandCdecay.
    "listops": dict(
        model=_model("listops", 8, 128, 0.0, state_size=16, blocks=8, c_init="lecun_normal",
                     activation="half_glu2"),
        batch_size=50, epochs=40, learning_rate=3 * 0.001, ssm_learning_rate=0.001,
        weight_decay=0.04, warmup_steps=96000 // 50, **_B_FAST, **_TRAINER),
    # run_lra_imdb.sh (Text): warmup_end=0, dt_global.
    "text": dict(
        model=_model("text", 6, 256, 0.1, state_size=192, blocks=12, c_init="lecun_normal",
                     activation="half_glu2"),
        batch_size=50, epochs=35, learning_rate=4 * 0.001, ssm_learning_rate=0.001,
        weight_decay=0.07, warmup_steps=0, **_DT_GLOBAL, **_TRAINER),
    # run_lra_aan.sh (Retrieval): dt_global.
    "retrieval": dict(
        model=_model("retrieval", 6, 128, 0.0, state_size=256, blocks=16,
                     c_init="trunc_standard_normal", activation="half_glu1"),
        batch_size=32, epochs=20, learning_rate=2 * 0.001, ssm_learning_rate=0.001,
        weight_decay=0.05, warmup_steps=147086 // 32, **_DT_GLOBAL, **_TRAINER),
    # run_lra_cifar.sh (Image): the only run with clip_eigs; opt_config BfastandCdecay.
    "image": dict(
        model=_model("image", 6, 512, 0.1, state_size=384, blocks=3, c_init="lecun_normal",
                     activation="half_glu1", clip_eigs=True),
        batch_size=50, epochs=250, learning_rate=4.5 * 0.001, ssm_learning_rate=0.001,
        weight_decay=0.07, warmup_steps=45000 // 50, **_B_FAST, **_TRAINER),
    # run_lra_pathfinder.sh: opt_config standard, bn_momentum 0.9.
    "pathfinder": dict(
        model=_model("pathfinder", 6, 192, 0.05, 0.9, state_size=256, blocks=8,
                     c_init="trunc_standard_normal", activation="half_glu1"),
        batch_size=64, epochs=200, learning_rate=5 * 0.0009, ssm_learning_rate=0.0009,
        weight_decay=0.03, warmup_steps=160000 // 64, **_TRAINER),
    # run_lra_pathx.sh: dt_min 0.0001, C drawn in the eigenbasis, BandCdecay, bn_momentum 0.9.
    "pathx": dict(
        model=_model("pathx", 6, 128, 0.0, 0.9, state_size=256, blocks=16,
                     c_init="complex_normal", activation="half_glu1", dt_min=0.0001),
        batch_size=32, epochs=75, learning_rate=3 * 0.0006, ssm_learning_rate=0.0006,
        weight_decay=0.06, warmup_steps=160000 // 32, **_B_DECAY, **_TRAINER),
}
