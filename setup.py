"""lra: a modern JAX/Flax Long Range Arena.

install_requires holds compatible ranges, so `pip install -e .` keeps a JAX that a GPU image or a
Cloud TPU VM already has. Each lower bound is the version tested (checked on Python 3.11, CPU,
2026-11); that exact tested set is constraints.txt, which the README's commands and .ci/run
install with `-c constraints.txt` so a fresh install stays reproducible. Upper bounds only where
a release is known to break this code (none known today)."""
from setuptools import find_packages, setup

setup(
    name="lra",
    version="0.1.0",
    description="Long Range Arena in JAX/Flax: every efficient-attention variant, six tasks.",
    # jax, jaxlib, flax, chex, orbax-checkpoint, numpy, matplotlib and pillow at these versions
    # ship no Python 3.10 wheels (tests/test_packaging.py keeps README, classifiers and CI in step).
    python_requires=">=3.11",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
    ],
    # Every package, with its subpackages, under the one name lra: the repository's models/ and
    # configs/ folders install as lra.models and lra.configs (configs.published holds the
    # state-space papers' tables). package_dir is the one mapping: a wheel and an editable
    # install (`pip install -e .`) both take it; no top-level models, configs or train module
    # reaches site-packages.
    packages=find_packages(include=["lra", "lra.*"]) + [
        f"lra.{name}" for name in find_packages(include=["models", "models.*", "configs",
                                                         "configs.*"])],
    package_dir={"lra.models": "models", "lra.configs": "configs"},
    entry_points={"console_scripts": ["lra-train = lra.commands.train:run",
                                      "lra-eval = lra.commands.eval:main",
                                      "lra-leaderboard = lra.commands.leaderboard:main"]},
    install_requires=[
        "jax>=0.10.2",
        "jaxlib>=0.10.2",
        "flax>=0.12.8",
        "optax>=0.2.8",
        "chex>=0.1.92",
        "absl-py>=2.5.1",
        "ml_collections>=1.1.0",
        "orbax-checkpoint>=0.12.8",
        "numpy>=2.4.6",
        "tensorboardX>=2.6.5",          # TensorBoard events without TensorFlow
        "tqdm>=4.70.1",
        "pillow>=13.0.0",               # Pathfinder PNGs
        "matplotlib>=3.11.2",           # eval.py charts
    ],
    extras_require={
        # setuptools: tests/test_packaging.py builds the wheel offline with this environment's
        # setuptools (bdist_wheel built in from 70.1; Python 3.12+ venvs ship none).
        "test": ["pytest>=9.2.0", "pytest-xdist>=3.8.0", "setuptools>=84.2.1",
                 "tensorflow-datasets>=4.9.10", "wandb>=0.31.0"],
        # Reading Text / Image from a prepared TFDS folder (without TensorFlow); nothing else
        # imports it, so a plain install (or an offline GPU image) does without it.
        "tfds": ["tensorflow-datasets>=4.9.10"],
        # Viewing runs: `tensorboard --logdir runs` (scalars, the config, the HParams tab, and
        # the profile tab for config.profile_steps traces). Writing needs neither: tensorboardX.
        "tensorboard": ["tensorboard>=2.21.0", "tensorboard-plugin-profile>=2.24.2"],
        # The optional Weights & Biases writer (config.writers="jsonl,tensorboard,wandb");
        # also in "test", which checks it offline.
        "wandb": ["wandb>=0.31.0"],
        # Accelerators: jax's own extras with no exact version, because jax[cuda12] /
        # jax[cuda13] / jax[tpu] already require the plugin (or libtpu) built for the jax they
        # come with: beside a machine's JAX they resolve to that JAX's plugin, with
        # -c constraints.txt to the tested jax's. cuda12 or cuda13: the one your driver supports.
        "cuda12": ["jax[cuda12]>=0.10.2"],
        "cuda13": ["jax[cuda13]>=0.10.2"],
        "tpu": ["jax[tpu]>=0.10.2"],
    },
)
