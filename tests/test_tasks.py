"""The prepared tasks end to end: release files written here -> data command -> task -> steps."""
import os

import jax
import numpy as np
import pytest
from PIL import Image

from lra.data import command, pathfinder, retrieval, store, tasks
from lra.training import trainer
from lra.errors import UserError


def _tiny(config, steps=2, batch=8):
  """Shrinks any task config to a few seconds of training on one CPU device."""
  m = config.model
  m.emb_dim, m.qkv_dim, m.mlp_dim, m.num_heads, m.num_layers = 16, 16, 32, 2, 1
  config.batch_size = config.eval_batch_size = batch
  config.num_train_steps, config.warmup_steps = steps, 1
  config.log_every = config.eval_every = config.checkpoint_every = steps
  config.progress = False
  return config


def _train(config, workdir):
  return trainer.train_and_evaluate(config, str(workdir), devices=jax.devices()[:1])


# ------------------------------------------------------------------------------ Retrieval


def _aan_line(label, text1, text2):
  return f"{label}\tid1\tid2\t{text1}\t{text2}\n"


def _write_aan(folder, rows_per_split=12):
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(0)
  for name in ("train", "eval", "test"):
    with open(os.path.join(folder, f"new_aan_pairs.{name}.tsv"), "w") as f:
      f.write(_aan_line("1.0", "ab", "x" * 12000))
      for i in range(rows_per_split - 1):
        f.write(_aan_line(f"{i % 2}.0", f"paper {i} " * int(rng.integers(1, 9)), "cited"))


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_retrieval_prepared_pairs_and_training(tmp_path):
  release, prepared = tmp_path / "tsv_data", tmp_path / "retrieval"
  _write_aan(release)
  command.main(["retrieval", f"--release_dir={release}", f"--data_dir={prepared}",
             "--max_len=64"])
  from lra.configs import retrieval
  config = _tiny(retrieval.get_config("transformer"))
  config.data.data_dir, config.data.max_len = str(prepared), 64
  task = tasks.load(config)
  assert task.pair and task.vocab_size == 257
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [12, 12, 12]
  first = task.splits["train"]
  np.testing.assert_array_equal(first["inputs"][np.array([0])][0, :3], [ord("a") + 1,
                                                                        ord("b") + 1, 0])
  assert np.all(first["inputs2"][np.array([0])] == ord("x") + 1)  # cut to max_len
  assert first["labels"][0] == 1
  results = _train(config, tmp_path / "run")
  assert results["test_count"] == 12


def test_retrieval_malformed_line_names_file_and_line(tmp_path):
  _write_aan(tmp_path)
  with open(tmp_path / "new_aan_pairs.eval.tsv", "a") as f:
    f.write("1.0\tonly\tthree\n")
  with pytest.raises(SystemExit):
    command.main(["retrieval", f"--release_dir={tmp_path}", f"--data_dir={tmp_path / 'out'}"])
  with pytest.raises(UserError, match="eval.tsv, line 13: expected 5"):
    list(retrieval.iter_pairs(str(tmp_path / "new_aan_pairs.eval.tsv")))


def test_missing_prepared_data_gives_the_command(tmp_path):
  from lra.configs import retrieval, text
  for module, command in ((retrieval, "python -m lra.data retrieval"),
                          (text, "python -m lra.data text")):
    config = module.get_config("transformer")
    config.data.data_dir = str(tmp_path)
    with pytest.raises(UserError, match=command):
      tasks.load(config)


# ------------------------------------------------------------------- Pathfinder (release)


def _write_release(root, level="curv_baseline", size=32, num=20):
  """A fake lra_release/pathfinder32/<level> with known pixels and labels."""
  level_dir = root / "lra_release" / f"pathfinder{size}" / level
  os.makedirs(level_dir / "imgs" / "0")
  os.makedirs(level_dir / "metadata")
  lines = []
  for i in range(num):
    pixels = np.full((size, size), i, np.uint8)
    pixels[0, 0] = 255
    Image.fromarray(pixels, mode="L").save(level_dir / "imgs" / "0" / f"sample_{i}.png")
    lines.append(f"imgs/0 sample_{i}.png 0 {i % 2} 14 1.5 1\n")
  lines.insert(5, "imgs/0 sample_172.png 0 1 6\n")  # the known empty image: skipped
  (level_dir / "imgs" / "0" / "sample_172.png").write_bytes(b"")
  (level_dir / "metadata" / "0.npy").write_text("".join(lines))
  return level_dir


def test_pathfinder_release_reader(tmp_path):
  level_dir = _write_release(tmp_path)
  assert pathfinder.find_level_dir(str(tmp_path), 32, "easy") == str(level_dir)
  assert pathfinder.find_level_dir(str(tmp_path / "lra_release"), 32, "easy") == str(level_dir)
  command.main(["pathfinder", f"--release_dir={tmp_path}", "--level=easy",
             f"--data_dir={tmp_path / 'pf'}"])
  prepared = pathfinder.prepared_dir(str(tmp_path / "pf"), "easy")
  sizes = [len(np.load(store.path(prepared, s, "labels"))) for s in tasks.SPLITS]
  assert sizes == [16, 2, 2]  # 80/10/10 of the 20 real images
  train = store.load_split(prepared, "train", ["inputs"], 1024)
  pixels = train["inputs"][np.arange(16)]
  assert pixels.dtype == np.uint8 and pixels.shape == (16, 1024)
  np.testing.assert_array_equal(pixels[:, 1], np.arange(16))  # file order kept
  np.testing.assert_array_equal(train["labels"], np.arange(16) % 2)


def test_pathfinder_malformed_release(tmp_path):
  level_dir = _write_release(tmp_path)
  (level_dir / "imgs" / "0" / "sample_3.png").write_bytes(b"not a png")
  with pytest.raises(UserError, match="sample_3.png: not a readable PNG"):
    pathfinder.prepare(str(level_dir), str(tmp_path / "out"), 32, progress=False)
  (level_dir / "metadata" / "0.npy").write_text("imgs/0 sample_0.png 0 7\n")
  with pytest.raises(UserError, match="0.npy, line 1"):
    pathfinder.read_metadata(str(level_dir))


# ------------------------------------------------------------------------- Text and Image


def test_text_from_raw_tar_heldout_and_original_validation(tmp_path, monkeypatch):
  import tarfile
  from lra.data import text as text_data
  from tests.test_text_image import _add
  monkeypatch.setattr(text_data, "RELEASE_REVIEWS", {"train": 20, "test": 20})  # tiny archive
  tar_path = tmp_path / "aclImdb_v1.tar.gz"
  with tarfile.open(tar_path, "w:gz") as tar:
    for split in ("train", "test"):
      for i in range(20):
        sentiment = ("neg", "pos")[i % 2]
        _add(tar, f"aclImdb/{split}/{sentiment}/{i}_1.txt", f"review {i} {sentiment}".encode())
  command.main(["text", f"--imdb_tar={tar_path}", f"--data_dir={tmp_path / 'text'}"])
  from lra.configs import text
  config = _tiny(text.get_config("transformer,cpu"))
  config.data.data_dir = str(tmp_path / "text")
  task = tasks.load(config)
  sizes = [len(task.splits[s]["labels"]) for s in tasks.SPLITS]
  assert sizes == [18, 2, 20] and task.vocab_size == 257 and task.padding
  first = task.splits["test"]["inputs"][np.array([0])][0]  # test/neg/0_1.txt
  np.testing.assert_array_equal(first[:10], np.frombuffer(b"review 0 n", np.uint8) + 1)
  assert first.shape == (512,) and first[-1] == 0
  _train(config, tmp_path / "run")
  config.data.validation = "test"  # the original's choice, kept as an option
  task = tasks.load(config)
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [20, 20, 20]


def test_image_from_raw_cifar_splits_and_black_pixels(tmp_path, monkeypatch):
  from lra.data import image as image_data
  from tests.test_text_image import _cifar_batch
  monkeypatch.setattr(image_data, "RELEASE_IMAGES", {"train": 20, "test": 6})  # tiny files
  folder = tmp_path / "cifar-10-batches-bin"
  folder.mkdir()
  rng = np.random.default_rng(0)
  for i in range(1, 6):
    (folder / f"data_batch_{i}.bin").write_bytes(_cifar_batch(rng, [i, i + 1, 0, 9])[0])
  test_bytes, test_images = _cifar_batch(rng, [1, 2, 3, 4, 5, 6])
  test_images[0, 0, 0] = 0  # a black pixel
  (folder / "test_batch.bin").write_bytes(
      b"".join(bytes([l]) + im.transpose(2, 0, 1).tobytes()
               for l, im in zip([1, 2, 3, 4, 5, 6], test_images)))
  command.main(["image", f"--cifar={folder}", f"--data_dir={tmp_path / 'image'}"])
  from lra.configs import image
  from lra.data.image import rgb_to_gray
  config = _tiny(image.get_config("transformer,cpu"))
  config.data.data_dir = str(tmp_path / "image")
  task = tasks.load(config)
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [18, 2, 6]
  assert not task.padding  # black pixels are real tokens unless asked otherwise
  pixels = task.splits["test"]["inputs"][np.arange(6)]
  np.testing.assert_array_equal(pixels, rgb_to_gray(test_images).reshape(6, 1024))
  assert pixels[0, 0] == 0
  batch = trainer.add_masks({"inputs": pixels}, task.padding)
  assert batch["mask"].all()
  _train(config, tmp_path / "run")
  config.data.black_is_padding = True  # the original's accidental mask
  assert tasks.load(config).padding


# ------------------------------------------------------------ Pathfinder / Path-X (generated)


def test_generated_pathfinder_trains(tmp_path):
  command.main(["pathfinder", f"--data_dir={tmp_path / 'pf'}", "--num_images=40", "--workers=1"])
  from lra.configs import pathfinder as pathfinder_config
  config = _tiny(pathfinder_config.get_config("transformer,cpu"))
  config.data.data_dir, config.data.generate_if_missing = str(tmp_path / "pf"), False
  config.data.num_images = 40  # as generated (the data record is compared with the config)
  task = tasks.load(config)
  assert [len(task.splits[s]["labels"]) for s in tasks.SPLITS] == [32, 4, 4]
  assert task.max_len == 1024 and not task.padding
  assert _train(config, tmp_path / "run")["test_count"] == 4


def test_missing_pathfinder_gives_the_command(tmp_path):
  from lra.configs import pathx
  config = pathx.get_config("transformer")
  config.data.data_dir, config.data.generate_if_missing = str(tmp_path), False
  with pytest.raises(UserError, match="python -m lra.data pathfinder .*--size=128"):
    tasks.load(config)


@pytest.mark.slow
def test_pathx_cpu_config_generates_and_trains(tmp_path):
  """The CPU smoke config end to end: 16,384 tokens of full attention, batch 1."""
  from lra.configs import pathx
  config = pathx.get_config("transformer,cpu")
  config.data.data_dir, config.progress = str(tmp_path / "px"), False
  results = _train(config, tmp_path / "run")
  assert results["test_count"] == 4 and results["num_train_steps"] == 3


@pytest.mark.slow  # over 10 s on 2 cores: `pytest -m slow` (.ci/run runs it)
def test_path256_cpu_config_trains_through_train_py(tmp_path):
  """Path-256's `,cpu` config end to end: `python -m lra.data path256` writes 10 images of
  65,536 pixels (8/1/1), then train.py runs its 2 steps with a mixer linear in the length:
  about 10 s of CPU time, 13-25 s on the 2-core development machine as loaded as it gets
  (most of it importing JAX and compiling, at XLA's cheapest compile)."""
  import json
  import subprocess
  import sys
  data = tmp_path / "pf256"
  command.main(["path256", f"--data_dir={data}", "--num_images=10", "--workers=1"])
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {**os.environ, "PYTHONPATH": root, "JAX_PLATFORMS": "cpu", "XLA_FLAGS":
         "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"}
  proc = subprocess.run(
      [sys.executable, "train.py", "--config=configs/path256.py:linear_transformer,cpu",
       f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={data}",
       "--config.data.generate_if_missing=False", "--config.compilation_cache_dir=",
       "--config.progress=False"], cwd=root, env=env, capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(tmp_path / "run" / "results.json") as f:
    results = json.load(f)
  assert (results["task"], results["test_count"], results["num_train_steps"]) == (
      "path256", 1, 2)
  assert results["config"]["data"]["size"] == 256
