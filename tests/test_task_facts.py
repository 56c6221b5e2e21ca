"""lra.data.tasks.FACTS, the one table of each task's numbers, agrees with what the readers
make and with every layer that uses it (no JAX, no data)."""
import numpy as np

from lra.data import image, listops, pathfinder, tasks, text


def test_the_table_covers_every_task_and_loader():
  assert tasks.NAMES == ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
  for name, facts in tasks.FACTS.items():
    assert facts.module in ("listops", "text", "retrieval", "image", "pathfinder", "mqar",
                            "formal.loader"), name
    assert facts.num_classes >= 2 and facts.vocab_size >= 2
    assert 0 < facts.test_size and 0 < facts.train_size
  assert [n for n, f in tasks.FACTS.items() if f.pair] == ["retrieval"]


def test_vocabularies_fit_the_tokens_the_readers_make():
  # ListOps: VOCAB's ids 1..len(VOCAB), 0 padding, OOV_ID the last id.
  assert listops.OOV_ID == tasks.FACTS["listops"].vocab_size - 1
  assert max(listops.tokenize(" ".join(listops.VOCAB + ("?",)))) == listops.OOV_ID
  # Text and Retrieval: byte + 1, so byte 255 is the last id.
  ids = text.encode_bytes(bytes(range(256)), 256)
  assert int(ids.max()) == tasks.FACTS["text"].vocab_size - 1
  assert tasks.FACTS["retrieval"].vocab_size == tasks.FACTS["text"].vocab_size
  # Image and Pathfinder: pixel values are the tokens.
  white = image.rgb_to_gray(np.full((1, 3), 255, np.uint8))
  assert int(white.max()) == tasks.FACTS["image"].vocab_size - 1
  assert {tasks.FACTS[n].vocab_size for n in ("pathfinder", "pathx", "path256")} == {256}


def test_task_of_takes_the_table():
  task = tasks.Task.of("retrieval", 8, {}, padding=False)
  assert (task.num_classes, task.vocab_size, task.max_len, task.pair, task.padding) == (
      2, 257, 8, True, False)


def test_pathfinder_full_splits_follow_the_split_fractions():
  bounds = pathfinder.split_bounds(200_000)  # the release's images per level
  assert [split for split, _ in pathfinder.SPLIT_FRACTIONS] == list(bounds)
  for name in ("pathfinder", "pathx", "path256"):
    facts = tasks.FACTS[name]
    assert (facts.train_size, facts.test_size) == (bounds["train"][1] - bounds["train"][0],
                                                   bounds["test"][1] - bounds["test"][0])
  assert pathfinder.split_bounds(10) == {"train": (0, 8), "val": (8, 9), "test": (9, 10)}
