"""Path-256: Pathfinder at 256x256, 65,536 pixel tokens (beyond LRA's six tasks).

The task of S4 (Gu et al., ICLR 2022; state-spaces/s4, src/dataloaders/lra.py: PathFinder at
`resolution: 256` reads the LRA release's pathfinder256/curv_contour_length_14) and of SPT
(Amos et al., ICLR 2024, "PathX-256"; IdoAmos/not-from-scratch, configs/experiment/lra/
transformer-lra-pathx256.yaml): the hard level (contour length 14) of the release's
pathfinder256, 200,000 images, 80/10/10. Our generator makes it with the settings of LRA's
Pathfinder256 TFDS builder (lra/data/pathfinder_gen/params.py says which); or read the release:
`python -m lra.data path256 --release_dir=PATH/lra_release`.
Usage: --config=configs/path256.py:MODEL[,cpu][,paper]
  default: the original repository's base config for it (lra_benchmarks/image/configs/
           pathfinder256/base_pathfinder256_config.py): 2 layers, emb 32, qkv 32, mlp 32,
           4 heads, CLS pooling, learned positions, dropout 0.1, batch 32, lr 1e-3 linear
           warmup (1 epoch, 5,000 steps) + cosine, 100 epochs (500,000 steps), no weight
           decay, no gradient clipping; the Transformer attends exactly in O(L) memory
           (implementation "auto", configs/table.py). An accelerator's job: one epoch is
           10.5G pixel tokens.
           With `s4d` (and the other models of configs/published) the model's published Path-X
           recipe, as S4's and SPT's code train Path-256 (configs/published ENTRY_OF). For S4D
           that is S4's: 6 layers, width 256, BatchNorm, pre-norm, dropout 0, state 64,
           bidirectional, dt in [1e-4, 0.1], AdamW lr 5e-4, weight decay 0.05, batch 16,
           50 epochs (500,000 steps), warmup 10,000, cosine (configs/published/s4d.py). The
           S4 paper's own text was not at hand: these come from its repository's Path-X
           config, which its loader runs at resolution 256.
  paper:   as for Pathfinder (LRA's appendix: 4 layers, 8 heads, FFN 128, qkv 128, lr 0.01).
  cpu:     10 generated images (8/1/1), a tiny model, batch 1, 2 steps: a smoke run of seconds
           with a mixer linear in the length (`linear_transformer,cpu`, `s4d,cpu`, `local,cpu`);
           the Transformer's exact attention over 65,536 tokens takes minutes per step on a
           CPU.
"""
from lra import config_sources as sources
from lra.configs import base
from lra.configs.pathfinder import pathfinder_config

TRAIN_IMAGES = 160000  # 80% of 200,000: an epoch


def get_config(arg=None):
  model, options = base.parse_arg(arg)
  c = pathfinder_config(model, options, 256)
  c.batch_size = c.eval_batch_size = 32
  steps_per_epoch = TRAIN_IMAGES // c.batch_size  # 5,000
  c.num_train_steps, c.warmup_steps = 100 * steps_per_epoch, steps_per_epoch
  c.grad_clip_norm = 0.0
  c.eval_every = c.checkpoint_every = steps_per_epoch  # the original's eval_frequency
  sources.note(c, sources.task_config("configs/path256.py"))
  if "cpu" in options:
    c.data.data_dir, c.data.num_images = "data/pathfinder256_cpu", 10
    base.shrink(c, steps=2, batch=1)
    sources.note(c, sources.preset("cpu", "configs/path256.py"))
  return base.finish(c, options)
