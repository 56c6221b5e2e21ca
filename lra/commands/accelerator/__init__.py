"""The prepared accelerator run: one command on a machine with one GPU, done within 9 minutes.

  python -m lra.commands.accelerator --out=accel_out            # the real run (GPU)
  python -m lra.commands.accelerator --out=accel_out --dry_run  # CPU, tiny sizes, ~2 minutes

Writes into --out (8 files): env.json (device, JAX, CUDA and cuDNN as JAX reports them),
attention.json (dense / chunked / cuDNN attention against each other in bfloat16 with padding
at 2,048 and 2,001 tokens, and the ListOps model through the trainer's step with cuDNN against
dense), speed.md and speed.json (`eval.py speed` at 4K, 3K, 2K, 1K tokens, each length's
Transformer first, batch 32, the Text base size, bfloat16, the ratio to the Transformer beside
the paper's Table 2), training.json (the full-scale ListOps Transformer beside the paper's
36.37, ended by its time limit with a test accuracy whatever the step rate, then further cells
as time allows), summary.md (all of it on one page), log.txt (the run's own log) and tails.txt
(the last lines of every part's output: the reason of any failure).

The first part stops the run within seconds, in one line, when JAX has no device of
--platform (cuda unless --dry_run): no minutes are spent on a CPU fallback. Every part checks
the clock before it starts and gets a share of --budget_s; what does not fit is skipped and
named in summary.md. Work (data, checkpoints, speed rows, the compilation cache) goes to
--work: running the same command again keeps what is done, measures the speed cells still
missing and trains cells ended early further. The parent process never touches the device
(each part runs in its own process, as eval.py speed measures each cell).

It runs from a checkout installed with `pip install -e .` (its train.py, and the dry run's
test mixers in tests/): docs/accelerator.md gives the command for a GPU machine.
"""
