"""Zoology's Figure 2 (Arora et al. 2023: MQAR accuracy against model width, the best of a
learning-rate sweep per point) by the grid command, and a CPU-sized version of it; then the
recall chart (accuracy against the state each model carries) of every point.

  python scripts/zoology_figure2.py --scale=gpu --root=runs/figure2       # the paper's grid
  python scripts/zoology_figure2.py --scale=cpu --root=runs/figure2_cpu   # minutes on 2 cores
  (--models=a,b to choose the models; --print_commands to print the commands and run nothing)

The paper's grid (HazyResearch/zoology d88d6f5,
zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py): (length, pairs) points
(64, 4), (128, 8), (256, 16) at batch 512, 512, 256 (lines 16-31); vocabulary 8,192, 100,000
train and 3,000 test examples (lines 11, 40-41); widths 64, 128, 256, 512 (lines 46-51);
learning rates logspace(-4, -2, 4) (line 53); 64 epochs (line 151); 2 layers, no MLP, one
attention head with learned positions (configs/mqar.py and configs/table.py). Every model reads
causally, as Zoology's language models do: the attention's `causal`, Based's and Hyena's
`causal`, the recurrences' `bidirectional` off (a model with neither setting, e.g. the Linear
Transformer, stays non-causal: the script says so). Zoology's Based here is its Figure 2 pair
(a gated conv layer, then Taylor linear attention with feature_dim 8, lines 100-115); Hyena's
l_max is each point's length (line 66). Its H3, RWKV and BaseConv rows have no mixer here.

GLA and RetNet run as Zoology runs its linear attentions (ZOOLOGY_HYBRID): Zoology's README
(line 50) gives "the BASED recipe" of a short convolution to the pre-Based linear attentions,
RetNet and GLA, and its GLA (zoology/experiments/models_repo.py `add_gla`, lines 297-322,
with the conv_mixer of mqar_example_configs/original_mqar_configs.py lines 49-56) is the
Hybrid [BaseConv of kernel 3, GLA with 2 heads and no short convolution of its own]: layer 0 a
BaseConv layer, layer 1 GLA (here `model.hybrid_conv=3`, and 2 heads). Zoology has no RetNet
config: RetNet gets GLA's Hybrid (its own heads). Both start their embeddings at N(0, 0.02),
as Zoology's models do (from their recipe, configs/table.py). Runs of the two as plain stacks
are the ablation beside them (docs/results.md).

The CPU version is configs/mqar.py's `,cpu` point (64 tokens, 2 pairs, a vocabulary of 128,
50,000 examples, 3,000 steps of batch 64), where attention recalls exactly and the fixed-state
mixers stay near guessing among the values in context (docs/results.md), at widths 32 and 64
and learning rates 1e-3 and 3e-3: four runs a model, from 1-2 minutes (the Transformer) to
15-20 (Mamba's scan) each on 2 cores. Its default models are the Transformer, Based, Hyena,
Mamba and S5; --models adds others (any registered mixer; the recurrent seven of
docs/results.md took 4-18 minutes a run, two runs at a time on 2 cores).

Each point is one grid command into ROOT/L<length>-kv<pairs>, its widths and learning rates as
--sweep axes (the width links emb_dim, qkv_dim and mlp_dim), so an interrupted run resumes and a
finished one is skipped; then `python eval.py recall ROOT --out=ROOT/recall`.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lra.errors import UserError, run_command  # noqa: E402  (after the path above)

# Zoology's Figure 2 models that exist here, then the ones comparisons now add (the GPU grid);
# the CPU version's default keeps the first five.
MODELS = ("transformer", "based", "hyena", "mamba", "s5", "mamba2", "retnet", "gla", "hgrn2",
          "deltanet", "gated_deltanet", "mlstm")
SCALES = {
    "gpu": dict(points=((64, 4, 512), (128, 8, 512), (256, 16, 256)), widths=(64, 128, 256, 512),
                learning_rates=tuple(float(f"{x:.4g}") for x in
                                     (10 ** (-4 + 2 * i / 3) for i in range(4))),
                data=dict(vocab_size=8192, num_train=100_000, num_val=1_000, num_test=3_000),
                epochs=64, preset="base", models=MODELS),
    "cpu": dict(points=((64, 2, 64),), widths=(32, 64), learning_rates=(1e-3, 3e-3),
                data=dict(vocab_size=128, num_train=50_000, num_val=1_000, num_test=1_000),
                steps=3_000, preset="cpu", models=MODELS[:5]),
}


# Zoology's Hybrid for the linear attentions without an input-dependent write strength (see
# the docstring): encoder settings scoped to the model.
ZOOLOGY_HYBRID = {"gla": dict(hybrid_conv=3, num_heads=2), "retnet": dict(hybrid_conv=3)}


def causal_settings(model: str) -> list[str]:
  """The scoped overrides that make `model` read causally (none where it has no such
  setting)."""
  from lra.models import registry
  defaults = registry.default_settings(model)
  if "causal" in defaults:
    return [f"--config.model.attention.causal@{model}=True"]
  if "bidirectional" in defaults:
    return [f"--config.model.attention.bidirectional@{model}=False"]
  return []


def point_command(scale: dict, point: tuple, models: list[str], root: str) -> list[str]:
  """The grid command of one (length, pairs, batch) point."""
  length, pairs, batch = point
  d = scale["data"]
  steps = scale.get("steps") or math.ceil(scale["epochs"] * d["num_train"] / batch)
  name = f"L{length}-kv{pairs}"
  widths = ",".join(f"({w},{w},{w})" for w in scale["widths"])
  command = [sys.executable, "-m", "lra.commands.leaderboard", f"--models={','.join(models)}",
             "--tasks=mqar", f"--preset={scale['preset']}", f"--root={root}/{name}",
             "--sweep", "learning_rate=" + ",".join(str(x) for x in scale["learning_rates"]),
             "--sweep", f"model.emb_dim,model.qkv_dim,model.mlp_dim={widths}",
             f"--config.data.max_len={length}", f"--config.data.num_kv_pairs={pairs}",
             f"--config.data.data_dir=data/mqar_{name}_v{d['vocab_size']}",
             f"--config.batch_size={batch}", f"--config.eval_batch_size={batch}",
             f"--config.num_train_steps={steps}",
             f"--config.eval_every={max(steps // 4, 1)}",
             f"--config.checkpoint_every={max(steps // 4, 1)}"]
  command += [f"--config.data.{key}={value}" for key, value in d.items()]
  if "hyena" in models:
    command.append(f"--config.model.attention.l_max@hyena={length}")
  if "based" in models:
    command.append("--config.model.attention.feature_dim@based=8")
  for model in models:
    command += causal_settings(model)
    command += [f"--config.model.{key}@{model}={value}"
                for key, value in ZOOLOGY_HYBRID.get(model, {}).items()]
  return command


def main(argv: list[str]) -> None:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--scale", choices=sorted(SCALES), required=True)
  p.add_argument("--root", required=True)
  p.add_argument("--models", help="comma separated (default: the scale's models)")
  p.add_argument("--print_commands", action="store_true")
  args = p.parse_args(argv)
  from lra.models import registry
  scale = SCALES[args.scale]
  models = [m for m in (args.models or ",".join(scale["models"])).split(",") if m]
  unknown = [m for m in models if m not in registry.names()]
  if unknown:
    raise UserError(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(registry.names())}")
  non_causal = [m for m in models if not causal_settings(m)]
  if non_causal:
    print(f"note: {', '.join(non_causal)} ha{'s' if len(non_causal) == 1 else 've'} no causal "
          "setting and read(s) both ways")
  commands = [point_command(scale, point, models, args.root) for point in scale["points"]]
  commands.append([sys.executable, "-m", "lra.commands.eval", "recall", args.root,
                   f"--out={args.root}/recall"])
  for command in commands:
    print(" ".join(shlex.quote(c) for c in command), flush=True)
    if not args.print_commands:
      code = subprocess.call(command)
      if code:
        raise UserError(f"the command above stopped with exit code {code}; run the script "
                        "again to resume")


if __name__ == "__main__":
  run_command(main, sys.argv[1:])
