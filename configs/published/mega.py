"""Mega's published LRA hyperparameters (Ma et al., ICLR 2023).

Source: the paper's appendix D.2, Table 8 (depth, d_model, d_FFN, z, v, h, attention function,
norm, pre-norm, batch size, lr, dropout, weight decay, epochs), and the official
facebookresearch/mega repository (commit aeaa4b4): examples/mega/README.lra.md, the commands
behind the paper's LRA table (63.14 / 90.43 / 91.25 / 90.44 / 96.01 / 97.98), and the
architectures mega_lra_{listop,imdb,aan,cifar10,pf32,pf128} of fairseq/models/lra/model.py
for what the commands leave out (max positions, EMA truncation, z and v sizes). The two agree
wherever both give a value (the README's batch x update-freq x GPUs is Table 8's batch; its
max-update x batch / train size is Table 8's epochs). Common to all six: bidirectional EMA of
h = 16 dimensions, the simple relative position bias, SiLU, attention and FFN-hidden dropout 0,
Adam (b1 0.9, b2 0.98, eps 1e-8) with decoupled weight decay on every parameter, global-norm
clipping 1.0, linear warmup then linear decay to 0, mean pooling, no position embeddings, the
FFN hidden width d_FFN = v = 2 d_model. Test accuracy is the best-validation checkpoint's.

Mega-chunk (the paper's section 4.1): the same configs with chunk size 128 on every task but
Path-X, where it is 4096 (CHUNK_SIZES; `python -m lra.commands.leaderboard --models=mega_chunk`).

The paper gives no parameter counts for LRA ("similar number of parameters with S4-v1");
tests/test_published_configs.py prints ours per task and checks each block against the
official modules' count.

The recipe around the layer (fairseq/models/lra/model.py, mega_lra_encoder.py,
fairseq/modules/real_number_embedding.py, fairseq/data/pixel_sequence_dataset.py, the README's
commands): a final norm only after pre-norm stacks (the image tasks; final_norm=True); the
image tasks embed the normalised intensity, (p/255 - mean) / std with 0.48 / 0.24 for Image
and 0.5 / 0.5 for the path tasks, by a RealNumberEmbedding (x w + b, a Dense(1 -> d):
input_encoder "linear", MEGA_PIXELS); dropout on the embedded input (input_dropout=True); the
head Linear(d, 2d)-GELU-Linear(classes) after the mean pool over real tokens (head
"gelu_mlp", mlp_dim = 2d; Retrieval on [u, v]); one Adam with decoupled weight decay on every
parameter (no groups), global-norm clipping 1.0, plain cross entropy (lra_cross_entropy: no
label smoothing), BatchNorm at PyTorch's momentum 0.1 (0.9 here), the best-validation
checkpoint.

Deviations (ours):
- Text and Retrieval use ScaleNorm in the official runs; the encoder has no ScaleNorm, so they
  use LayerNorm here (one gain -> 2 d parameters per norm). BatchNorm (Image, the path tasks;
  Path-X's SyncBatchNorm is the same over one global batch) counts real tokens only.
- The FFN is the encoder's Dense-GELU-Dropout-Dense (the official: SiLU, and no dropout inside:
  act-dropout 0; here dropout_rate, 0.1 on the language tasks).
- The key offset mu_k is left out under softmax (it cancels; models/mixers/mega.py).
- Tokens enter through our embedding, N(0, 1) (the official: N(0, d^-1/2)); the pixel
  encoder's kernel is lecun normal and its bias 0 (the official: w ~ N(0, 1), b ~ N(0, 0.1)).
- The head has no dropout between its layers (the official: dropout before the GELU) and its
  last layer a bias (the official: none); its kernels are lecun normal (the official: xavier
  uniform).
- Warmup starts at 0 (the official: 1e-7), and Path-X warms up linearly (the official: power 2).
- Epochs -> steps with our train-split sizes (Text: 22,500 after our 10% held out, so 22,500
  steps where the official runs 25,000 on all 25,000 reviews and selects on the test set).
"""

from lra.configs.published import MEGA_PIXELS, pixel_encoder

# Kept at the mixer's defaults by the `cpu` option, as dropout_rate is.
SIZE_SETTINGS = ("z_dim", "v_dim", "ema_dim", "max_positions", "truncation", "ema_dropout",
                 "hidden_dropout")

# Mega-chunk's chunk sizes (paper section 4.1).
CHUNK_SIZES = {"listops": 128, "text": 128, "retrieval": 128, "image": 128, "pathfinder": 128,
               "pathx": 4096}

_TRAINER = dict(schedule="linear", adam_b1=0.9, adam_b2=0.98, adam_eps=1e-8,
                grad_clip_norm=1.0)


def _model(task, num_layers, emb_dim, z_dim, dropout_rate, attention_fn, norm, prenorm,
           max_positions, truncation=1024, **encoder):
  """Table 8's row: d_FFN = v = 2 d_model, h = 16; the official max positions and EMA
  truncation; its one dropout on the embeddings, the EMA output, H^ and the FFN output."""
  return dict(num_layers=num_layers, emb_dim=emb_dim, mlp_dim=2 * emb_dim,
              dropout_rate=dropout_rate, attention_dropout_rate=0.0, norm=norm,
              prenorm=prenorm, feedforward=True, pooling="MEAN", use_cls=False,
              head="gelu_mlp", **pixel_encoder(task, MEGA_PIXELS), **encoder,
              attention=dict(z_dim=z_dim, v_dim=2 * emb_dim, ema_dim=16,
                             attention_fn=attention_fn, max_positions=max_positions,
                             truncation=truncation, bidirectional=True,
                             ema_dropout=dropout_rate, hidden_dropout=0.0))


HYPERPARAMETERS = {
    # mega_lra_listop: post-norm LayerNorm; 90,000 updates of 64 (60 epochs), warmup 3,000.
    "listops": dict(model=_model("listops", 6, 80, 64, 0.1, "softmax", "layer", False, 2002),
                    batch_size=64, epochs=60, learning_rate=0.001, weight_decay=0.01,
                    warmup_steps=3000, **_TRAINER),
    # mega_lra_imdb: ScaleNorm (LayerNorm here); 25,000 updates of 25 x 2.
    "text": dict(model=_model("text", 4, 128, 64, 0.1, "softmax", "layer", False, 4002),
                 batch_size=50, epochs=50, learning_rate=0.004, weight_decay=0.01,
                 warmup_steps=10000, **_TRAINER),
    # mega_lra_aan: ScaleNorm (LayerNorm here); 91,960 updates of 8 x 8; [u, v] features.
    "retrieval": dict(model=_model("retrieval", 6, 128, 64, 0.1, "softmax", "layer", False, 4002,
                                   pair_features="uv"),
                      batch_size=64, epochs=40, learning_rate=0.003, weight_decay=0.04,
                      warmup_steps=10000, **_TRAINER),
    # mega_lra_cifar10: pre-norm BatchNorm, Laplace; 180,000 updates of 50.
    "image": dict(model=_model("image", 8, 160, 96, 0.0, "laplace", "batch", True, 1024),
                  batch_size=50, epochs=200, learning_rate=0.01, weight_decay=0.02,
                  warmup_steps=9000, **_TRAINER),
    # mega_lra_pf32: 250,000 updates of 128.
    "pathfinder": dict(model=_model("pathfinder", 6, 128, 64, 0.0, "laplace", "batch", True, 1024),
                       batch_size=128, epochs=200, learning_rate=0.01, weight_decay=0.01,
                       warmup_steps=50000, **_TRAINER),
    # mega_lra_pf128: SyncBatchNorm over 8 GPUs; 125,000 updates of 2 x 8 x 8; EMA kernel
    # truncated at 4,096 lags.
    "pathx": dict(model=_model("pathx", 4, 64, 32, 0.0, "laplace", "batch", True, 16384, 4096),
                  batch_size=128, epochs=100, learning_rate=0.01, weight_decay=0.01,
                  warmup_steps=25000, **_TRAINER),
}
