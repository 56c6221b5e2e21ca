"""S4D's published LRA hyperparameters.

Source: the official state-spaces/s4 repository, configs/experiment/lra/s4-lra-{listops,
imdb,aan,cifar,pathfinder,pathx}.yaml as of commit d27bdf9 (the last before 62a14bb renamed
them s4-*.yaml and changed sizes and warmups): the configs its README (models/s4/
experiments.md) gives for the LRA results of the S4D and "How to Train your HiPPO" papers
(the S4D paper trains its diagonal models with S4's LRA settings; its appendix table is not
reproduced here from memory). Those files select S4's kernel; S4D is the same recipe with the
diagonal kernel. Common to all six: bidirectional,
GLU output, state size 64, dt in [0.001, 0.1] (Path-X: [0.0001, 0.1]), AdamW with torch's
defaults (b2 0.999, eps 1e-8), no gradient clipping (the repository's trainer default),
linear warmup + cosine decay, mean pooling, no position embeddings.

The recipe around the layer (src/models/sequence/backbones/model.py, src/tasks/encoders.py
and decoders.py, src/dataloaders, src/utils/optim_groups.py, train.py):
- A norm after the stack when pre-norm (SequenceModel's final norm; final_norm=True), a
  linear decoder after the mean pool (head="linear"); Retrieval's RetrievalHead on
  [u, v, u-v, u*v]: Linear(4H, H)-GELU-Linear (head="gelu_mlp", mlp_dim = H), both documents
  in one batch (the collate concatenates them), so BatchNorm sees both.
- Tokens: nn.Embedding, N(0, 1) (as our table). Pixels: nn.Linear(1, H) of the intensity,
  Image normalised (p/255 - 122.6/255) / (61/255), Pathfinder and Path-X in [0, 1]
  (dataset center=False) (S4_PIXELS). No dropout on the encoded input (dropinp 0).
- BatchNorm momentum 0.1 in PyTorch's sense: 0.9 here (the encoder's default).
- Parameter groups (S4's `register` with lr and wd per tensor): ListOps, Text, Retrieval and
  Image (`lr: {dt: null, A: 0.001, B: 0.001}`): A and B at 0.001 without weight decay, dt at
  the global rate without weight decay; Pathfinder and Path-X (`lr: 0.001` / 0.0005): dt, A
  and B at that rate without decay. C and D are plain parameters (global rate, decay). The
  backbone's biases and norm parameters get no weight decay (add_optimizer_hooks with
  bias_weight_decay and normalization_weight_decay False): no_decay_params "bias,scale".
- Schedule: timm/transformers cosine with warmup, lr 0 at the first step, as optax's here.

Deviations (ours):
- A_init="inv" (S4D-Inv, the row of the LRA reference table); the repository configs say
  `legs` (S4D-LegS for the diagonal kernel), which is not implemented.
- "bias,scale" take every bias and norm scale out of weight decay, the encoder's and the
  head's too; S4 hooks only the backbone, so its embedding, encoder and decoder biases decay.
- A and B per channel everywhere (Image's config ties them across 2 groups, `n_ssm: 2`).
- Pathfinder's config reads the last position (`decoder.mode: last`); we mean-pool, as the
  other tasks do.
- Padding is masked: S4 zeroes the SSM's input at padded positions but its BatchNorm counts
  them (pad_like_authors=True lets padding into the norms and mixers alike).
- Epochs -> steps with our train-split sizes (Text: 22,500 after the 10% held out, where S4
  trains on all 25,000); the repository's scheduler lengths differ slightly from its epoch
  counts (e.g. ListOps 80,000 steps for 40 epochs = 76,800).
- Warmup: ListOps, Text and Image leave the scheduler's default of 1,000 steps; Retrieval and
  Pathfinder 2,500 (1 epoch in their files); Path-X 10,000 (1 epoch, what the Path-X file
  says "the original S4D/HTTYH papers used"; the file itself now uses 5 epochs), with lr 5e-4
  for everything (the file's comment: "The original S4D/HTTYH papers use lr=5e-4").
- Token tasks: S4 appends EOS and cuts at l_max 2048 / 4096 / 4000; we cut at 2,000 / 4,000
  / 4,000 without EOS.
"""
from lra.configs.published import S4_PIXELS, pixel_encoder

_SSM = dict(state_size=64, A_init="inv", dt_min=0.001, dt_max=0.1, bidirectional=True,
            tie_dropout=False)
_TRAINER = dict(schedule="cosine", adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8,
                grad_clip_norm=0.0)


# The parameter groups (see the docstring): `lr: {dt: null, A: 0.001, B: 0.001}` tasks and
# `lr: <float>` tasks; neither decays the backbone's biases and norms.
_DT_GLOBAL = dict(ssm_params="log_A_re,A_im,B", no_decay_params="log_dt,bias,scale")
_ONE_RATE = dict(no_decay_params="bias,scale")  # dt, A, B: the mixer's OPTIMIZER_GROUP


def _model(task, num_layers, emb_dim, dropout_rate, norm, prenorm, **ssm):
  return dict(num_layers=num_layers, emb_dim=emb_dim, dropout_rate=dropout_rate, norm=norm,
              prenorm=prenorm, feedforward=False, pooling="MEAN", use_cls=False,
              input_dropout=False, head="gelu_mlp" if task == "retrieval" else "linear",
              **pixel_encoder(task, S4_PIXELS), attention=dict(_SSM, **ssm))


HYPERPARAMETERS = {
    "listops": dict(model=_model("listops", 8, 128, 0.0, "batch", False), batch_size=50,
                    epochs=40, learning_rate=0.01, ssm_learning_rate=0.001, weight_decay=0.05,
                    warmup_steps=1000, **_DT_GLOBAL, **_TRAINER),
    "text": dict(model=_model("text", 6, 256, 0.0, "batch", True), batch_size=16, epochs=32,
                 learning_rate=0.01, ssm_learning_rate=0.001, weight_decay=0.05,
                 warmup_steps=1000, **_DT_GLOBAL, **_TRAINER),
    "retrieval": dict(model=_model("retrieval", 6, 256, 0.0, "batch", True), batch_size=64,
                      epochs=20, learning_rate=0.01, ssm_learning_rate=0.001,
                      weight_decay=0.05, warmup_steps=2500, **_DT_GLOBAL, **_TRAINER),
    "image": dict(model=_model("image", 6, 512, 0.1, "layer", False, tie_dropout=True),
                  batch_size=50, epochs=200, learning_rate=0.01, ssm_learning_rate=0.001,
                  weight_decay=0.05, warmup_steps=1000, **_DT_GLOBAL, **_TRAINER),
    "pathfinder": dict(model=_model("pathfinder", 6, 256, 0.0, "batch", True), batch_size=64,
                       epochs=200, learning_rate=0.004, ssm_learning_rate=0.001,
                       weight_decay=0.03, warmup_steps=2500, **_ONE_RATE, **_TRAINER),
    "pathx": dict(model=_model("pathx", 6, 256, 0.0, "batch", True, dt_min=0.0001),
                  batch_size=16, epochs=50, learning_rate=0.0005, ssm_learning_rate=0.0005,
                  weight_decay=0.05, warmup_steps=10000, **_ONE_RATE, **_TRAINER),
}
