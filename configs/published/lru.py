"""LRU's LRA hyperparameters (Orvieto et al., ICML 2023) -- partly UNVERIFIED, read this first.

No official LRU code was released (the paper's appendix A gives the layer, not the training
setup), and the paper's appendix hyperparameter table could not be consulted while writing
this file. What is certain and what is not:
- Certain (the paper's text and figure 1): the block is norm -> LRU -> GELU -> GLU -> skip,
  stacked, mean-pooled, linearly decoded; the ring initialisation; Path-X needs eigenvalues
  started at the unit circle, r in [0.999, 0.9999], with a small phase, max_phase = pi/10
  (also what public LRU Path-X runs use: --r_min 0.999 --r_max 0.9999 --max_phase 0.31).
  A smaller learning rate, without weight decay, for the recurrence parameters.
- Sizes (depth 6; width / state: ListOps 128/256, Text 256/192, Retrieval 128/256, Image
  512/384, Pathfinder 192/256, Path-X 128/256), batch sizes, dropout, the other ring radii,
  learning rates, the SSM-rate factors (ssm_learning_rate = factor * learning_rate: 0.5,
  Text 0.1, Image and the path tasks 0.25), warmup (~10% of training) and epochs are taken
  from a public third-party LRU reproduction config set (batch-norm, pre-norm, tied dropout,
  cosine schedule); they are plausible, NOT checked against the paper's table.
- Not known: whether the paper's LRA models are bidirectional. The appendix code is causal;
  so is the unofficial minimal-LRU; bidirectional=False here.
Weight decay 0.05 everywhere (the same reproduction and minimal-LRU's default); Adam with
optax defaults (b2 0.999, eps 1e-8); no clipping. The paper reports (LRU row of the
reference table) 60.2 / 89.4 / 89.9 / 89.0 / 95.1 / 94.2; its sCIFAR is in colour (LRA's
Image is grey).

The recipe around the layer follows minimal-LRU (NicolasZucchet/minimal-LRU, commit bbd71b1;
an unofficial reproduction built on the S5 code): lru/model.py has no norm after the stack
(final_norm=False), a Dense encoder and a linear decoder after the mean pool (head="linear"),
no dropout on the encoded input; its "ssm" group (train_helpers.py: nu_log, theta_log,
gamma_log, B_re, B_im under Adam without weight decay, everything else AdamW) is
ssm_params "nu_log,theta_log,gamma_log,B" here. Pixels enter a Dense(1 -> H), normalised as
S5's loaders do (S5_PIXELS; minimal-LRU's loaders are S5's, not re-checked here).

Deviations (ours): tokens enter our embedding table (minimal-LRU: a Dense on one-hot); its mean
pool and BatchNorm run over padding (pad_like_authors=True for that), ours skip it; minimal-LRU
has no Retrieval model, so Retrieval takes S5's head (head="gelu_mlp" on [u, v, u*v, u-v]);
the layer's last dropout is the encoder's residual dropout.
"""
import math

from lra.configs.published import S5_PIXELS, pixel_encoder

SIZE_SETTINGS = ("state_size",)  # kept small by the `cpu` option

_TRAINER = dict(schedule="cosine", adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8,
                grad_clip_norm=0.0, weight_decay=0.05, ssm_params="nu_log,theta_log,gamma_log,B")


def _model(task, emb_dim, state_size, dropout_rate, r_min, r_max, max_phase=2 * math.pi):
  return dict(num_layers=6, emb_dim=emb_dim, dropout_rate=dropout_rate, norm="batch",
              prenorm=True, feedforward=False, pooling="MEAN", use_cls=False,
              final_norm=False, input_dropout=False,
              head="gelu_mlp" if task == "retrieval" else "linear",
              **pixel_encoder(task, S5_PIXELS),
              attention=dict(state_size=state_size, r_min=r_min, r_max=r_max,
                             max_phase=max_phase, bidirectional=False))


HYPERPARAMETERS = {
    # UNVERIFIED: all but the architecture (see the docstring).
    "listops": dict(model=_model("listops", 128, 256, 0.0, 0.0, 0.9), batch_size=32, epochs=30,
                    learning_rate=0.003, ssm_learning_rate=0.5 * 0.003, warmup_steps=12000,
                    **_TRAINER),
    "text": dict(model=_model("text", 256, 192, 0.1, 0.5, 0.9), batch_size=32, epochs=64,
                 learning_rate=0.004, ssm_learning_rate=0.1 * 0.004, warmup_steps=5000,
                 **_TRAINER),
    "retrieval": dict(model=_model("retrieval", 128, 256, 0.1, 0.5, 0.9), batch_size=64, epochs=40,
                      learning_rate=0.002, ssm_learning_rate=0.5 * 0.002, warmup_steps=5000,
                      **_TRAINER),
    # The paper trains 180 epochs on colour sCIFAR; 200 on grey Image in the reproduction.
    "image": dict(model=_model("image", 512, 384, 0.1, 0.9, 0.999), batch_size=50, epochs=200,
                  learning_rate=0.005, ssm_learning_rate=0.25 * 0.005, warmup_steps=18000,
                  **_TRAINER),
    "pathfinder": dict(model=_model("pathfinder", 192, 256, 0.0, 0.9, 0.999), batch_size=64,
                       epochs=200,
                       learning_rate=0.004, ssm_learning_rate=0.25 * 0.004, warmup_steps=50000,
                       **_TRAINER),
    # Ring [0.999, 0.9999] and max_phase pi/10: the paper's Path-X initialisation.
    "pathx": dict(model=_model("pathx", 128, 256, 0.0, 0.999, 0.9999, math.pi / 10), batch_size=32,
                  epochs=50, learning_rate=0.002, ssm_learning_rate=0.25 * 0.002,
                  warmup_steps=25000, **_TRAINER),
}
