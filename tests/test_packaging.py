"""Packaging: the stated Python version, the tested pins, and a wheel that works outside the
checkout (a non-editable install is what a GPU image or a TPU VM may get)."""
import ast
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

from tests import commands
from tests.commands import NONZERO

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("lra", "models", "configs")


def _setup_kwargs() -> dict:
  """The literal keyword arguments of setup() in setup.py, read without running it."""
  tree = ast.parse((ROOT / "setup.py").read_text())
  call = next(node for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
  kwargs = {}
  for kw in call.keywords:
    try:
      kwargs[kw.arg] = ast.literal_eval(kw.value)
    except ValueError:  # find_packages(...): not a literal, not needed here
      pass
  return kwargs


def _version(text: str) -> tuple[int, ...]:
  return tuple(int(part) for part in text.split("."))


def test_python_version_is_stated_once():
  """python_requires, the lowest classifier, the README's first commands and the Python that
  runs these tests (CI's) must agree, or an install fails where the README says it works."""
  kwargs = _setup_kwargs()
  required = re.fullmatch(r">=(\d+\.\d+)", kwargs["python_requires"])
  assert required, f"python_requires={kwargs['python_requires']!r} is not '>=X.Y'"
  minimum = required.group(1)
  classified = [c.rsplit(" :: ", 1)[1] for c in kwargs["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
  assert classified and min(classified, key=_version) == minimum, classified
  heading = next(line for line in (ROOT / "README.md").read_text().splitlines()
                 if line.startswith("## First two commands"))
  assert f"Python {minimum}+" in heading, heading
  assert sys.version_info[:2] >= _version(minimum), (
      f"CI runs Python {sys.version_info[:2]}, below python_requires {minimum}")


def _requirement(spec: str) -> tuple[str, str, str]:
  """'name[extra]>=1.2' -> ('name', '>=', '1.2'), the name normalised as pip does."""
  match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(==|>=)\s*([^,;\s]+)", spec)
  assert match, f"{spec!r}: expected one '>=' lower bound (or '==' pin)"
  name, op, version = match.groups()
  return re.sub(r"[-_.]+", "-", name).lower(), op, version


ACCELERATORS = ("cuda12", "cuda13", "tpu")  # extras that follow the installed jax


def test_lower_bounds_are_the_tested_pins():
  """Each range in setup.py starts at the version that constraints.txt pins (the tested set),
  and constraints.txt pins exactly the install requirements and those of every extra but the
  accelerator ones."""
  kwargs = _setup_kwargs()
  bounds = {}
  extras = [spec for extra, specs in kwargs["extras_require"].items()
            if extra not in ACCELERATORS for spec in specs]
  for spec in kwargs["install_requires"] + extras:
    name, op, version = _requirement(spec)
    assert op == ">=", f"{spec!r} pins a version; setup.py takes ranges (pins: constraints.txt)"
    assert bounds.setdefault(name, version) == version, f"{name}: two lower bounds"
  pins = {}
  for line in (ROOT / "constraints.txt").read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if line:
      name, op, version = _requirement(line)
      assert op == "==", f"constraints.txt: {line!r} is not an exact pin"
      pins[name] = version
  assert pins == bounds
  # The accelerator extras follow the jax that is installed: the same lower bound, no pin.
  for extra in ACCELERATORS:
    (spec,) = kwargs["extras_require"][extra]
    assert _requirement(spec) == ("jax", ">=", bounds["jax"]), spec


_OUTSIDE = textwrap.dedent("""
    import sys
    from lra import configs, models
    from lra.data import tasks
    for name in tasks.NAMES:
      for model in ("transformer", "s4d"):  # s4d reads configs/published
        configs.task_config(name).get_config(model)
    names = models.registry.names()
    import jax, jax.numpy as jnp
    config = configs.task_config("listops").get_config("transformer,cpu")
    net = models.build(config.model.to_dict(), vocab_size=20, num_classes=10, max_len=16,
                       pair=False)
    tokens = jnp.ones((2, 16), jnp.int32)
    logits = net.apply(net.init(jax.random.PRNGKey(0), tokens), tokens)
    assert logits.shape == (2, 10), logits.shape
    # Everything of the project came from the installed wheel, nothing from the checkout.
    outside = sorted(f"{name}: {module.__file__}" for name, module in sys.modules.items()
                     if name.split(".")[0] == "lra"
                     and not module.__file__.startswith(sys.argv[1]))
    assert not outside, outside
    import models  # the folder's own package, beside ours
    assert models.MINE and "lra.models" in sys.modules
    print("wheel ok", len(names))
""")


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
@pytest.mark.commands
def test_wheel_works_outside_the_checkout(tmp_path):
  """Build the wheel offline with this environment's setuptools, install it into a bare folder,
  and from another directory (the checkout not on the path) build every task config, list the
  mixers (the registry reads models/mixers/*.py, so the sources must ship) and run a tiny model."""
  wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
  elsewhere.mkdir()
  # Build from a clean copy: an in-tree build reuses the checkout's build/ folder, which would
  # hide a package missing from setup.py (and would litter the checkout).
  source = tmp_path / "source"
  source.mkdir()
  for path in ROOT.iterdir():
    if path.is_file():
      shutil.copy(path, source)
  for package in PACKAGES:
    shutil.copytree(ROOT / package, source / package,
                    ignore=shutil.ignore_patterns("__pycache__"))
  build = subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
       "--no-index", "--quiet", "-w", str(wheels), str(source)],
      capture_output=True, text=True, cwd=tmp_path)
  assert build.returncode == 0, build.stdout + build.stderr
  (wheel,) = wheels.glob("lra-*.whl")
  shipped = set(zipfile.ZipFile(wheel).namelist())
  sources = {("" if package == "lra" else "lra/") + path.relative_to(ROOT).as_posix()
             for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
  assert sources - shipped == set(), "sources missing from the wheel"
  # One installed namespace: models/ and configs/ only as lra.models and lra.configs.
  top = {name.split("/")[0] for name in shipped if ".dist-info" not in name.split("/")[0]}
  assert top == {"lra"}, top
  install = subprocess.run(
      [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
       "--target", str(target), str(wheel)], capture_output=True, text=True, cwd=tmp_path)
  assert install.returncode == 0, install.stdout + install.stderr
  env = {"PYTHONPATH": str(target)}  # the installed wheel only, not the checkout
  # A researcher's folder with its own models/ package: theirs and ours stay apart.
  (elsewhere / "models").mkdir()
  (elsewhere / "models" / "__init__.py").write_text("MINE = True\n")
  run = commands.run("-c", _OUTSIDE, str(target), cwd=elsewhere, env=env)
  from lra.models import registry  # the checkout's mixers, all of them shipped
  assert f"wheel ok {len(registry.names())}" in run.stdout
  # python -m lra.commands.train from that folder finds configs/ in the package: the config
  # loads (its model name is then refused in one line).
  train = commands.run("-m", "lra.commands.train", "--config=configs/listops.py:nope",
                       "--workdir=w", cwd=elsewhere, env=env, expect=NONZERO)
  assert "'nope' is not a model" in train.stderr, train.stderr
  assert len(train.stderr.strip().splitlines()) == 1, train.stderr
