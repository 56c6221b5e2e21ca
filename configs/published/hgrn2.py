"""HGRN2's published LRA hyperparameters (Qin et al. 2024, "HGRN2: Gated Linear RNNs with State
Expansion").

Source: the official OpenNLPLab/HGRN2 repository at commit
b154c396a85b0bf3f190490fddaf240aab791949, run_lra.py: its per-task dicts (keys cifar = Image,
imdb = Text, aan = Retrieval, pathfinderx = Path-X) give the total batch (`batches`, lines 8-15,
split over the GPUs of `gpus` at lines 252-253), d_model (26-33), n_layers (35-42), norm
(44-51), lr (53-60), wd (62-69), dropout (71-78), prenorm (80-87), warmup steps (89-96),
scheduler steps (98-105), the GLU's expand ratio (107-114), the state expansion expand_ratio
(116-123), epochs (125-132), the lower bound (134-141: on everywhere), the model's encoder
(143-150) and gradient clipping (161-168); script_lra_others.sh passes them to OpenNLPLab/lra's
train.py (lines 35-55: trainer.precision=bf16, optimizer.lr and weight_decay, decoder.mode=pool)
and srcipt_lra_image.sh does for Image (lines 36-57: prenorm True, no gradient_clip_val: the
trainer's default 0, RGB CIFAR with augmentation). The model code is OpenNLPLab/lra (branch
release_torch2, which our snapshot lacks, with its hgrn2 experiment files; the release branch at
dd871ef has HGRN1 in the same framework, read for what follows: its pipelines' AdamW, its HGRN1
experiments' cosine_warmup scheduler, the model, encoders and decoders) with
Doraemonzzz/hgru2-pytorch's layer (models/mixers/hgrn2.py, variant "lra").

The recipe, as that code has it (what each line sets):
- Blocks: pre-norm residual sub-layers, the HGRN2 layer then a GLU (SequenceModel builds
  [hgrn2, glu] per layer, each in its own residual block with its own norm), a final norm
  after the stack (prenorm), mean pooling over real tokens (decoder mode pool, use_lengths),
  no CLS token, a linear decoder (Retrieval: Linear(4D, D)-GELU-Linear on [u, v, u*v, u-v],
  head="gelu_mlp"). No dropout on the embedded input (dropinp 0).
- Norm per task: "synbatch" (SyncBatchNorm: statistics over the whole batch, as ours),
  "batch" (Pathfinder, Path-X) or "layer" (Text); BatchNorm momentum PyTorch's 0.1 (ours 0.9).
- The layer: bidirectional (LRA is non-causal), K = V = expand_ratio channels per head
  (num_heads = d_model / expand_ratio, qkv_dim = d_model), the learned lower bounds.
- Positions: the model encoder "position" (sinusoidal, added after the token embedding:
  ListOps, Retrieval, Image, Path-X) or "id" (none: Text, Pathfinder).
- Pixels: a Linear(channels -> D) of normalised intensities: Pathfinder and Path-X
  (p/255 - 0.5) / 0.5; Image as their code normalises grey CIFAR, (p/255 - 122.6/255) /
  (61/255) (S5_PIXELS has both).
- Training: AdamW (torch's b2 0.999, eps 1e-8), weight decay 0 everywhere (so one parameter
  group), a cosine with linear warmup (transformers' get_cosine_schedule_with_warmup, as the
  HGRN1 experiments choose; warmup in steps, as theirs), epochs as given, clipping 1.0 on
  Retrieval and Path-X.
- The `cpu` option takes the architecture (blocks, norms, the layer's variant and lower bounds)
  and keeps its small model: the heads' width (expand_ratio) and the positions (none) too.

Deviations (ours):
- The schedule's length: theirs is a cosine over the scheduler's steps (50,000; Pathfinder and
  Path-X 500,000) while the run stops after its epochs, so it ends partway down the cosine, at
  (of the peak) ListOps 0.18, Text 0.95, Retrieval 0.57, Image 0.05 (past 0 at step 50,000),
  Pathfinder 0.93; Path-X (warmup 150,000 of 125,000 steps) never leaves its warmup, ending at
  0.83. Ours is a cosine over the run's steps to 0, so the same warmup and then a faster decay
  (Path-X: the same ramp exactly; the trainer warns that it never reaches its peak).
- Image and Pathfinder/Path-X use their 2-D layer (hgrn2_2d, a recurrence over the image's
  rows and columns); ours runs the 1-D layer over the flattened pixels. Image is grey and
  unaugmented here (LRA's task); theirs is RGB with random crops and flips.
- The GLU (Linear(D, rD) x SiLU(Linear(D, rD)) -> Linear(rD, D), r the GLU's expand ratio)
  is our Dense(rD)-GELU-Dense MLP: the same hidden width, two thirds of its parameters. On
  Retrieval our head's hidden layer is then 2 D wide (theirs D), as the encoder has one width
  for both.
- "batch" norm (Pathfinder, Path-X) computes statistics per GPU in their DDP runs (16 and 32
  examples); ours over the whole batch.
- Their PositionalEncoder drops 10% of the embedded input (its default dropout 0.1) on the
  "position" tasks; ours has no input dropout there (the encoder ties it to the residual
  rate, 0 on those tasks).
- bf16 mixed precision there, float32 here (--config.model.dtype=bfloat16 for theirs; the
  recurrence runs in float32 either way).
- Padding is masked here; their scans and BatchNorm run over the padding of ListOps, Text and
  Retrieval (only the pool skips it): --config.model.pad_like_authors=True for that function.
- The lower bound of layer l sums rows 1..l of the softmax (fla's), theirs rows 0..l-1: the
  same at initialisation (models/mixers/hgrn2.py). Epochs become steps with our train splits (Text:
  22,500, theirs 25,000); tokens enter our N(0, 1) embedding (theirs nn.Embedding, the same).
"""
from lra.configs.published import S5_PIXELS, pixel_encoder

SIZE_SETTINGS = ("expand_ratio",)  # kept small by the `cpu` option (K = V there)

_TRAINER = dict(schedule="cosine", adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8,
                weight_decay=0.0)


def _entry(task, *, batch, layers, width, norm, lr, dropout, warmup, glu, expand, epochs,
           positions, clip):
  """One task's table entry from run_lra.py's values (the docstring's lines)."""
  model = dict(num_layers=layers, emb_dim=width, num_heads=width // expand, qkv_dim=width,
               mlp_dim=glu * width, feedforward=True, dropout_rate=dropout,
               norm=norm, prenorm=True, final_norm=True, batch_norm_momentum=0.9,
               pooling="MEAN", use_cls=False, input_dropout=False, positions=positions,
               head="gelu_mlp" if task == "retrieval" else "linear",
               **pixel_encoder(task, S5_PIXELS),
               attention=dict(variant="lra", expand_ratio=expand, lower_bound="learned",
                              bidirectional=True))
  return dict(model=model, batch_size=batch, epochs=epochs, learning_rate=lr,
              ssm_learning_rate=lr, warmup_steps=warmup, grad_clip_norm=clip, **_TRAINER)


_POSITION, _ID = "sinusoidal", "none"  # their model encoders "position" and "id"

HYPERPARAMETERS = {
    "listops": _entry("listops", batch=128, layers=5, width=64, norm="batch", lr=0.0005,
                      dropout=0.0, warmup=5000, glu=1, expand=4, epochs=50,
                      positions=_POSITION, clip=0.0),
    "text": _entry("text", batch=64, layers=4, width=128, norm="layer", lr=0.005,
                   dropout=0.1, warmup=10000, glu=1, expand=8, epochs=40, positions=_ID,
                   clip=0.0),
    "retrieval": _entry("retrieval", batch=128, layers=2, width=256, norm="batch", lr=0.005,
                        dropout=0.0, warmup=312, glu=2, expand=2, epochs=20,
                        positions=_POSITION, clip=1.0),
    "image": _entry("image", batch=64, layers=6, width=512, norm="batch", lr=0.003,
                    dropout=0.0, warmup=30000, glu=1, expand=2, epochs=75,
                    positions=_POSITION, clip=0.0),
    "pathfinder": _entry("pathfinder", batch=128, layers=6, width=128, norm="batch", lr=0.002,
                         dropout=0.0, warmup=50000, glu=1, expand=2, epochs=100,
                         positions=_ID, clip=0.0),
    "pathx": _entry("pathx", batch=256, layers=6, width=32, norm="batch", lr=0.00075,
                    dropout=0.0, warmup=150000, glu=1, expand=1, epochs=200,
                    positions=_POSITION, clip=1.0),
}
