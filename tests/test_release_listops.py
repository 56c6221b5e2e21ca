"""A cut of the rows to max_len is said when the task loads and
recorded in Task.data (so in results.json), whatever the data's source (ListOps release files
given by hand, generated ListOps, prepared Text and Retrieval); unknown ListOps tokens are
counted, and refused where they are not rare; a data cache that is a folder is refused with
the fix (remove it). The release files are written here in the release's exact format: CRLF
line ends, the header `Source\\tTarget`."""
import io
import os
import random
import tarfile

import numpy as np
import pytest

from lra.data import command, listops, record, retrieval, tasks, text
from lra.errors import UserError
from tests.tiny import tiny_config

MAX_LEN = 40  # tiny_config's


def _tree(rng: random.Random, length: int) -> tuple[str, int]:
  """A release-format expression of exactly `length` tokens (>= 4, even): SM over values."""
  values = [rng.randrange(10) for _ in range(length - 2)]
  return listops.tree_to_string(("[SM", tuple(values))), sum(values) % 10


def _release(folder, lengths: dict[str, list[int]], edit=None) -> None:
  """basic_{train,val,test}.tsv as the LRA release writes them (CRLF, `Source\\tTarget`);
  `edit(split, lines)` may change the lines (header first) before they are written."""
  os.makedirs(folder, exist_ok=True)
  rng = random.Random(0)
  for split, name in listops.FILES.items():
    lines = [listops.HEADER] + [f"{source}\t{label}" for source, label in
                                (_tree(rng, n) for n in lengths[split])]
    if edit:
      edit(split, lines)
    with open(os.path.join(folder, name), "wb") as f:
      f.write(("\r\n".join(lines) + "\r\n").encode("utf-8"))


LENGTHS = {"train": [10, 60, 30, 100, 8, 40], "val": [12, 42], "test": [20, 24]}


def _one_line(fn, *args):
  with pytest.raises(UserError) as error:
    fn(*args)
  message = str(error.value)
  assert "\n" not in message, message
  return message


def test_release_files_cut_to_max_len_are_said_and_recorded(tmp_path, capsys):
  _release(tmp_path, LENGTHS)
  task = tasks.load(tiny_config(str(tmp_path)))  # max_len 40: 60, 100 and 42 are cut
  cut = task.data["cut"]
  assert task.data["record"] is None  # files given by hand
  assert (cut["from"], cut["to"]) == (100, MAX_LEN)
  assert (cut["examples"], cut["examples_cut"]) == (10, 3)
  assert cut["share"] == pytest.approx(0.3)
  assert cut["splits"]["train"] == {"examples": 6, "examples_cut": 2,
                                    "share": pytest.approx(2 / 6), "longest": 100}
  assert cut["splits"]["val"]["examples_cut"] == 1 and cut["splits"]["test"]["examples_cut"] == 0
  said = [line for line in capsys.readouterr().out.splitlines() if "max_len" in line]
  assert len(said) == 1, said
  assert "3 of 10 examples (30.0%)" in said[0] and "max_len=40" in said[0], said[0]
  assert "100 tokens" in said[0]
  # The CRLF lines are read as the release means them: the labels and the tokens.
  first = task.splits["train"]["inputs"][0]
  assert np.count_nonzero(first) == 10 and first[0] == listops.VOCAB.index("[SM") + 1
  assert task.splits["train"]["inputs"].shape == (6, MAX_LEN)
  config = tiny_config(str(tmp_path))
  config.data.max_len = 100  # long enough: nothing cut, nothing said
  assert tasks.load(config).data["cut"] is None
  assert "max_len" not in capsys.readouterr().out


def test_generated_listops_cut_counts_the_examples(tmp_path):
  config = tiny_config(str(tmp_path))
  config.data.update(num_train=40, num_val=8, num_test=8, min_length=5, max_length=30,
                     max_depth=3, max_args=4, seed=0, workers=1, max_len=12)
  config.data.generate_if_missing = True
  cut = tasks.load(config).data["cut"]
  lengths = {split: [len(listops.tokenize(line.split("\t")[0])) for line in
                     open(tmp_path / name, encoding="utf-8").read().splitlines()[1:]]
             for split, name in listops.FILES.items()}
  for split, found in lengths.items():
    assert cut["splits"][split]["examples_cut"] == sum(n > 12 for n in found)
    assert cut["splits"][split]["longest"] == max(found)
  assert cut["from"] == max(max(v) for v in lengths.values()) and cut["to"] == 12


def _with_unknown(lines_to_edit: dict[int, tuple[str, str]]):
  def edit(split, lines):
    if split == "train":
      for number, (old, new) in lines_to_edit.items():  # number: the file's line number
        lines[number - 1] = lines[number - 1].replace(old, new, 1)
  return edit


def test_a_few_unknown_tokens_are_counted_and_said(tmp_path, capsys):
  # 30 train lines of 60 tokens: 1,800 tokens, one unknown (0.06%, rare).
  _release(tmp_path, {**LENGTHS, "train": [60] * 30}, _with_unknown({5: ("[SM", "[MAXX")}))
  config = tiny_config(str(tmp_path))
  config.data.max_len = 60
  task = tasks.load(config)
  unknown = task.data["unknown_tokens"]
  assert unknown == {"train": {"count": 1, "tokens": 1800, "file": "basic_train.tsv",
                               "first_line": 5, "first_token": "[MAXX"}}
  assert task.splits["train"]["inputs"][3, 0] == listops.OOV_ID
  out = capsys.readouterr().out
  assert "1 unknown token" in out and "basic_train.tsv, line 5" in out and "[MAXX" in out


def test_unknown_tokens_that_are_not_rare_are_refused_naming_the_line(tmp_path):
  # Two unknown tokens in 6 lines (0.8% of 248 tokens): another vocabulary, or damage.
  _release(tmp_path, LENGTHS, _with_unknown({3: ("[SM", "[MAXX"), 6: ("[SM", "[MINN")}))
  message = _one_line(tasks.load, tiny_config(str(tmp_path)))
  train = tmp_path / "basic_train.tsv"
  assert message.startswith(f"{train}, line 3: unknown token '[MAXX'"), message
  assert "2 unknown tokens" in message and "python -m lra.data listops" in message


def test_a_line_of_mostly_unknown_tokens_is_refused(tmp_path):
  lines = {"train": [60] * 40, "val": [12], "test": [12]}

  def edit(split, rows):
    if split == "train":
      rows[7] = "( ( [MIN a ) b c d e ) ] )\t3"
  _release(tmp_path, lines, edit)
  message = _one_line(listops.read_split, tmp_path / "basic_train.tsv", 60)
  assert message.startswith(f"{tmp_path / 'basic_train.tsv'}, line 8: unknown token 'a'"), \
      message


def _imdb_tar(path, lengths):
  with tarfile.open(path, "w:gz") as tar:
    for split in ("train", "test"):
      for i, n in enumerate(lengths):
        data = (f"review {i} " * 40)[:n].encode()
        info = tarfile.TarInfo(f"aclImdb/{split}/{('neg', 'pos')[i % 2]}/{i}_1.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_text_cut_counts_the_prepared_rows(tmp_path, monkeypatch, capsys):
  lengths = [20, 50, 70, 10, 33, 64, 12, 40, 30, 25]  # bytes; prepared at 64
  monkeypatch.setattr(text, "RELEASE_REVIEWS", {"train": 10, "test": 10})
  _imdb_tar(tmp_path / "aclImdb_v1.tar.gz", lengths)
  command.main(["text", f"--imdb_tar={tmp_path / 'aclImdb_v1.tar.gz'}",
                f"--data_dir={tmp_path / 'text'}", "--max_len=64"])
  from lra.configs import text as text_config
  config = text_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.max_len = str(tmp_path / "text"), 32
  config.data.validation = "test"
  capsys.readouterr()
  cut = tasks.load(config).data["cut"]
  # Longer than 32: 50, 70 (64 once prepared), 33, 64, 40.
  assert cut["splits"]["train"] == {"examples": 10, "examples_cut": 5, "share": 0.5,
                                    "longest": 64}
  assert (cut["from"], cut["to"], cut["examples_cut"], cut["examples"]) == (64, 32, 15, 30)
  assert "15 of 30 examples (50.0%)" in capsys.readouterr().out
  config.data.max_len = 64
  assert tasks.load(config).data["cut"] is None


def test_retrieval_cut_counts_pairs_with_a_cut_document(tmp_path):
  release = tmp_path / "tsv_data"
  release.mkdir()
  docs = [("a" * 5, "b" * 30), ("c" * 12, "d" * 3), ("e" * 2, "f" * 4), ("g" * 9, "h" * 10)]
  for name in retrieval.SPLIT_FILES.values():
    (release / name).write_text("".join(f"{i % 2}.0\tx\ty\t{one}\t{two}\n"
                                        for i, (one, two) in enumerate(docs)))
  retrieval.prepare(str(release), str(tmp_path / "out"), max_len=16, progress=False)
  from lra.configs import retrieval as retrieval_config
  config = retrieval_config.get_config("transformer,cpu")
  config.data.data_dir, config.data.max_len = str(tmp_path / "out"), 10
  cut = tasks.load(config).data["cut"]
  assert cut["splits"]["val"] == {"examples": 4, "examples_cut": 2, "share": 0.5,
                                  "longest": 16}  # 30 bytes, prepared at 16
  assert (cut["from"], cut["to"], cut["examples_cut"]) == (16, 10, 6)


def test_a_checked_cache_that_is_a_folder_is_refused_with_its_fix(tmp_path):
  config = tiny_config(str(tmp_path))
  config.data.update(num_train=20, num_val=4, num_test=4, min_length=5, max_length=30,
                     max_depth=3, max_args=4, seed=0, workers=1)
  config.data.generate_if_missing = True
  tasks.load(config)
  cache = tmp_path / record.CHECKED
  cache.unlink()
  cache.mkdir()
  message = _one_line(tasks.load, config)
  assert str(cache) in message and "remove" in message and "another path" not in message
  cache.rmdir()  # the fix the message gives
  assert len(tasks.load(config).splits["train"]["labels"]) == 20
