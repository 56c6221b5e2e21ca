"""Tests for the Pathfinder generator (no JAX needed)."""

import os

import numpy as np
import pytest
from PIL import Image

from lra.data import pathfinder, pathfinder_gen


@pytest.fixture(scope="module")
def hard32():
  params = pathfinder_gen.params_for(32, "hard")
  return params, [pathfinder_gen.sample(params, 5, k) for k in range(120)]


def bar_points(pivots: np.ndarray, length: float, n: int = 25) -> np.ndarray:
  """Points along each paddle's centreline (the segment of `length` ending on its pivot)."""
  a, b = pivots[:-1], pivots[1:]
  u = (b - a) / np.linalg.norm(b - a, axis=1, keepdims=True)
  t = np.linspace(0, 1, n)[None, :, None]
  start = b - length * u
  return (start[:, None] + t * (b - start)[:, None]).reshape(-1, 2)


def min_distance(p: np.ndarray, q: np.ndarray) -> float:
  return float(np.min(np.linalg.norm(p[:, None] - q[None], axis=-1)))


def test_params_table_and_errors():
  p = pathfinder_gen.params_for(32, "hard")
  assert (p.level_folder, p.contour_length, p.distractor_length, p.num_distractors) == \
      ("curv_contour_length_14", 14, 4, 5)
  assert pathfinder_gen.params_for(128, "easy").margin == 2
  assert pathfinder_gen.params_for(64, "intermediate").num_distractors == 22 // 3
  for level, (folder, _) in pathfinder_gen.LEVELS.items():
    assert pathfinder.LEVEL_FOLDERS[level] == folder  # the reader agrees on folder names
  with pytest.raises(ValueError, match="32, 64, 128, 256"):
    pathfinder_gen.params_for(48, "hard")
  with pytest.raises(ValueError, match="easy, intermediate, hard"):
    pathfinder_gen.params_for(32, "medium")
  with pytest.raises(ValueError, match="label"):
    pathfinder_gen.generate_image(p, np.random.default_rng(0), 2)


def test_deterministic():
  params = pathfinder_gen.params_for(32, "intermediate")
  for k in range(5):
    a, la, _ = pathfinder_gen.sample(params, 3, k)
    b, lb, _ = pathfinder_gen.sample(params, 3, k)
    np.testing.assert_array_equal(a, b)
    assert la == lb
  assert not np.array_equal(pathfinder_gen.sample(params, 3, 0)[0],
                            pathfinder_gen.sample(params, 4, 0)[0])


def test_label_balance():
  params = pathfinder_gen.params_for(32, "easy")
  labels = [pathfinder_gen.sample(params, 0, k)[1] for k in range(400)]
  assert 0.4 <= np.mean(labels) <= 0.6


def check_geometry(params, label, geometry):
  snakes, markers = geometry["snakes"], geometry["markers"]
  first, second = geometry["marker_snakes"]
  assert geometry["label"] == label
  assert all(len(s) == params.contour_length + 1 for s in snakes)
  # The first marker sits on an origin tip, the second on a far tip.
  np.testing.assert_allclose(markers[0], snakes[first][0])
  np.testing.assert_allclose(markers[1], snakes[second][-1])
  assert (first == second) == (label == 1)
  # Each snake is a connected chain of paddle steps.
  for s in snakes + geometry["distractors"]:
    steps = np.linalg.norm(np.diff(s, axis=0), axis=1)
    assert np.all(np.abs(steps - params.step) < 0.5), steps
  # The targets seed seed_distance apart and never come within the margin of each other.
  assert abs(np.linalg.norm(snakes[0][0] - snakes[1][0]) - params.seed_distance) < 0.5
  pivot_gap = np.min(np.linalg.norm(snakes[0][:, None] - snakes[1][None], axis=-1))
  assert pivot_gap > params.margin
  target_bars = [bar_points(s, params.paddle_length) for s in snakes]
  assert min_distance(*target_bars) > params.margin
  # Distractors keep clear of the targets, so they cannot join the marked tips.
  for d in geometry["distractors"]:
    assert min_distance(bar_points(d, params.paddle_length), np.concatenate(target_bars)) > \
        params.margin


def test_geometry_32(hard32):
  params, samples = hard32
  assert {label for _, label, _ in samples} == {0, 1}
  for _, label, geometry in samples:
    check_geometry(params, label, geometry)


@pytest.mark.parametrize("size", [64, 128])
def test_geometry_larger(size):
  params = pathfinder_gen.params_for(size, "hard")
  for k in range(6):
    _, label, geometry = pathfinder_gen.sample(params, 1, k)
    check_geometry(params, label, geometry)


@pytest.mark.parametrize("size,level", [(32, "hard"), (64, "easy"), (128, "hard")])
def test_images(size, level):
  params = pathfinder_gen.params_for(size, level)
  for k in range(4):
    image, _, geometry = pathfinder_gen.sample(params, 2, k)
    assert image.dtype == np.uint8 and image.shape == (size, size)
    for centre in geometry["markers"]:  # the pixel under a marker's centre is full white
      assert image[int(centre[0]), int(centre[1])] == 255
    for snake in geometry["snakes"]:  # every paddle ends on an inked pixel
      rows, cols = snake[1:].astype(int).T
      assert np.all(image[rows, cols] > 0)
    assert image.max() == 255 and (image == 0).mean() > 0.5  # dark background


def test_release_layout(tmp_path):
  size, level, n, per_folder = 32, "hard", 25, 10
  params = pathfinder_gen.params_for(size, level)
  one = pathfinder_gen.generate_release(tmp_path / "one", size=size, level=level, num_images=n,
                                        seed=7, workers=1, images_per_folder=per_folder,
                                        progress=False)
  assert one == os.path.join(tmp_path / "one", "curv_contour_length_14")
  assert sorted(os.listdir(os.path.join(one, "metadata"))) == ["0.npy", "1.npy", "2.npy"]
  for k in range(n):
    folder, i = divmod(k, per_folder)
    with open(os.path.join(one, "metadata", f"{folder}.npy")) as f:
      fields = f.read().splitlines()[i].split()
    image, label, _ = pathfinder_gen.sample(params, 7, k)
    assert fields[:5] == [f"imgs/{folder}", f"sample_{i}.png", "0", str(label), "14"]
    with Image.open(os.path.join(one, fields[0], fields[1])) as png:
      assert png.mode == "L"
      np.testing.assert_array_equal(np.asarray(png), image)
  items = pathfinder.read_metadata(one)  # the project's reader takes the files as they are
  assert len(items) == n and items[-1][0].endswith(os.path.join("imgs", "2", "sample_4.png"))

  two = pathfinder_gen.generate_release(tmp_path / "two", size=size, level=level, num_images=n,
                                        seed=7, workers=2, images_per_folder=per_folder,
                                        progress=False)
  for root, _, files in os.walk(one):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as a, open(os.path.join(two, os.path.relpath(path, one)), "rb") as b:
        assert a.read() == b.read(), path
  assert not any(name.startswith(".tmp-") for _, _, files in os.walk(two) for name in files)
