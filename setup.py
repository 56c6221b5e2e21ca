"""lra: a modern JAX/Flax Long Range Arena. Versions pinned to a set that installs and runs
together (checked on Python 3.11, CPU, 2026-11)."""
from setuptools import find_packages, setup

setup(
    name="lra",
    version="0.1.0",
    description="Long Range Arena in JAX/Flax: every efficient-attention variant, six tasks.",
    python_requires=">=3.10",
    packages=find_packages(include=["lra", "lra.*", "models", "models.*", "configs"]),
    py_modules=["train"],
    install_requires=[
        "jax==0.10.2",
        "jaxlib==0.10.2",
        "flax==0.12.8",
        "optax==0.2.8",
        "chex==0.1.92",
        "absl-py==2.5.1",
        "ml_collections==1.1.0",
        "orbax-checkpoint==0.12.8",
        "numpy==2.4.6",
        "tensorflow-datasets==4.9.10",  # reads prepared TFDS data without TensorFlow
        "tensorboardX==2.6.5",          # TensorBoard events without TensorFlow
        "tqdm==4.70.1",
        "pillow==13.0.0",               # Pathfinder PNGs
        "matplotlib==3.11.2",           # eval.py charts
    ],
    extras_require={
        "test": ["pytest==9.2.0", "pytest-xdist==3.8.0"],
        # NVIDIA GPUs: the CUDA plugin of the same JAX version (pick the one for your driver).
        "cuda12": ["jax[cuda12]==0.10.2"],
        "cuda13": ["jax[cuda13]==0.10.2"],
    },
)
