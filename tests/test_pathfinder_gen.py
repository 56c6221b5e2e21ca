"""Tests for the Pathfinder generator (no JAX needed)."""

import os

import numpy as np
import pytest
from PIL import Image

from lra.data import pathfinder, pathfinder_gen, record
from lra.data.pathfinder_gen import stamps


@pytest.fixture(scope="module")
def hard32():
  params = pathfinder_gen.params_for(32, "hard")
  return params, [pathfinder_gen.sample(params, 5, k) for k in range(60)]


def test_params_table_and_errors():
  p = pathfinder_gen.params_for(32, "hard")
  assert (p.level_folder, p.contour_length, p.distractor_length, p.num_distractors) == \
      ("curv_contour_length_14", 14, 4, 5)
  assert (p.paddle_length, p.paddle_thickness, p.margins, p.antialias_scale) == (2, 0.5, (1,), 2)
  assert p.snake_contrast * p.paddle_contrast == 1.5
  path_x = pathfinder_gen.params_for(128, "hard")
  assert (path_x.margins, path_x.num_distractors, path_x.seed_distance) == ((2, 3), 8, 20)
  assert pathfinder_gen.params_for(128, "easy").num_distractors == 35 // 2
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
  assert 0.4 <= np.mean(labels) <= 0.6  # 4 standard deviations of a fair coin


def check_geometry(params, image, label, geometry):
  snakes, markers = geometry["snakes"], geometry["markers"]
  first, second = geometry["marker_snakes"]
  margin = geometry["margin"]
  assert geometry["label"] == label and margin in params.margins
  assert all(len(s) == params.contour_length for s in snakes)
  # The first marker sits on the first pixel of a target, the second on a far end.
  np.testing.assert_array_equal(markers[0], snakes[first][0])
  np.testing.assert_array_equal(markers[1], snakes[second][-1])
  assert (first == second) == (label == 1)
  # Targets start seed_distance apart (rounded to pixels).
  assert abs(np.linalg.norm(snakes[0][0] - snakes[1][0]) - params.seed_distance) <= 1
  # Consecutive far ends: length + margin to length + 2 margin apart (turns under 90
  # degrees), give or take the rounding to pixels. The seed paddle is drawn forwards from the
  # origin tip, so the first far end is up to twice length + margin from it.
  step = params.paddle_length + margin
  for s in snakes:
    steps = np.linalg.norm(np.diff(s, axis=0), axis=1)
    assert np.all(steps[1:] >= step - 2) and np.all(steps[1:] <= step + margin + 2), steps
    assert steps[0] <= 2 * step + 2, steps
  # Every paddle end and marker is inked; the background is dark.
  for s in snakes:
    assert np.all(image[s[:, 0], s[:, 1]] > 0)
  assert image.max() == 255 and (image == 0).mean() > 0.5
  assert geometry["distractors"] <= params.num_distractors


def test_geometry_32(hard32):
  params, samples = hard32
  assert {label for _, label, _ in samples} == {0, 1}
  for image, label, geometry in samples:
    check_geometry(params, image, label, geometry)


@pytest.mark.parametrize("size,level", [(64, "easy"), (128, "hard")])
def test_geometry_larger(size, level):
  params = pathfinder_gen.params_for(size, level)
  for k in range(3):
    image, label, geometry = pathfinder_gen.sample(params, 1, k)
    assert image.dtype == np.uint8 and image.shape == (size, size)
    check_geometry(params, image, label, geometry)


def test_paddle_window():
  """A paddle: antialiased ink along its segment, inside its mask."""
  for degrees in range(-180, 180, 15):
    orientation = degrees * np.pi / 180
    ink, mask = stamps.paddle(orientation, 5, 1.5, 2, 2)
    half = stamps.half_size(5, 1.5, 2)
    assert ink.shape == mask.shape == (2 * half + 1,) * 2 and ink.max() > 128
    assert np.all(mask[ink > 0] > 0)  # the mask covers the ink (it is the ink grown)
    assert (mask > 0).sum() > (ink > 0).sum()
    rows, cols = np.nonzero(ink > 32)  # the clearly inked pixels lie along the segment
    direction = np.array([np.sin(orientation), np.cos(orientation)])
    along = (np.stack([rows, cols], 1) - half) @ direction
    across = np.abs((np.stack([rows, cols], 1) - half) @ [direction[1], -direction[0]])
    assert along.min() >= -2 and along.max() <= 5 + 2 and across.max() <= 2.5, degrees
    assert 0 < (ink > 0).mean() < 1


def test_seed_directions_without_any_seed():
  """seed_offsets is None exactly when some pixel's offsets all fall outside the image."""
  usable = 0
  for degrees in range(-180, 180):
    orientation = degrees * np.pi / 180
    offsets = stamps.seed_offsets(orientation, 2, 0.5, 1, 2, 32)
    ink, mask = stamps.paddle(orientation, 2, 0.5, 1, 2)
    full = np.argwhere(mask == 255) - stamps.half_size(2, 0.5, 1) + 1  # from the window centre
    inside = [(p, q) for p in range(32) for q in (0, 31)] + [(q, p) for p in range(32)
                                                            for q in (0, 31)]
    reachable = all(any(0 <= p + dy < 32 and 0 <= q + dx < 32 for dy, dx in full)
                    for p, q in inside)
    assert (offsets is not None) == (len(full) > 0 and reachable), degrees
    usable += offsets is not None
  assert usable == 30  # the first target's seed can only take these directions at 32 pixels


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
    assert fields == [f"imgs/{folder}", f"sample_{i}.png", str(i), str(label), "1.0", "14", "4",
                      "2", "0.5", "1", "1"]
    with Image.open(os.path.join(one, fields[0], fields[1])) as png:
      assert png.mode == "L"
      np.testing.assert_array_equal(np.asarray(png), image)
  items = pathfinder.read_metadata(one)  # the project's reader takes the files as they are
  assert len(items) == n and items[-1][0].endswith(os.path.join("imgs", "2", "sample_4.png"))

  two = pathfinder_gen.generate_release(tmp_path / "two", size=size, level=level, num_images=n,
                                        seed=7, workers=2, images_per_folder=per_folder,
                                        progress=False)
  for root, _, files in os.walk(one):
    for name in set(files) - {record.CHECKED}:  # the hash stamps hold each folder's inodes
      path = os.path.join(root, name)
      with open(path, "rb") as a, open(os.path.join(two, os.path.relpath(path, one)), "rb") as b:
        assert a.read() == b.read(), path
  assert not any(name.startswith(".tmp-") for _, _, files in os.walk(two) for name in files)
