"""results/ as committed: no absolute path of the machine that made a result, tables that
eval.py draws again from the committed records, and the writers that keep paths relative
(lra.paths.relative, lra.reporting.published, lra.reporting.results)."""
import importlib
import json
import os
import pathlib
import re
import shutil

import pytest

from lra import paths
from lra.reporting import published, results

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
# An absolute path in text: "/" after a space, quote, backtick, bracket or "=" (not the "/"
# of "steps/s", "64 / 1,485" or a URL), then at least two folder names.
_IN_TEXT = re.compile(r"(?:^|[\s`'\"(\[=,])(/[\w.+-]+(?:/[\w.+=,-]+)+)")


def _strings(obj):
  if isinstance(obj, dict):
    for key, value in obj.items():
      yield str(key)
      yield from _strings(value)
  elif isinstance(obj, list):
    for value in obj:
      yield from _strings(value)
  elif isinstance(obj, str):
    yield obj


def _absolute_paths(file: pathlib.Path) -> list[str]:
  text = file.read_text()
  if file.suffix in (".json", ".jsonl"):
    lines = [text] if file.suffix == ".json" else text.splitlines()
    return [s for line in lines for s in _strings(json.loads(line))
            if s.startswith("/") or re.match(r"[A-Za-z]:\\", s)]
  return [m.group(1) for m in _IN_TEXT.finditer(text)]


def test_no_committed_results_file_holds_an_absolute_path():
  files = [f for f in sorted(RESULTS.rglob("*")) if f.is_file() and f.suffix != ".png"]
  assert len(files) > 100  # the walk found the committed tree
  found = {str(f.relative_to(ROOT)): hits for f in files if (hits := _absolute_paths(f))}
  assert not found, f"absolute paths in committed results (make them relative with " \
                    f"lra.reporting.published.portable): {found}"


def test_the_absolute_path_check_finds_them_in_json_and_in_text(tmp_path):
  (tmp_path / "r.json").write_text(json.dumps({"a": [{"tested_checkpoint": "/w/run/best/3"}]}))
  (tmp_path / "t.md").write_text("| GLA | 64 / 1,485 | 2 steps/s | `/tmp/t2/runs/x` |\n")
  (tmp_path / "ok.md").write_text("| GLA | 64 / 1,485 | see https://github.com/a/b |\n")
  assert _absolute_paths(tmp_path / "r.json") == ["/w/run/best/3"]
  assert _absolute_paths(tmp_path / "t.md") == ["/tmp/t2/runs/x"]
  assert _absolute_paths(tmp_path / "ok.md") == []


def _redraw(tmp_path, folder: str, command: str, names: tuple[str, ...]) -> None:
  """eval.py `command` on a copy of results/`folder`, into another folder: the committed
  files `names` come back byte for byte."""
  copy = tmp_path / folder
  shutil.copytree(RESULTS / folder, copy)
  out = tmp_path / "out"
  importlib.import_module("eval").main([command, str(copy), f"--out={out}"])
  for name in names:
    assert (out / name).read_text() == (RESULTS / folder / name).read_text(), (
        f"results/{folder}/{name} is not what `python eval.py {command} results/{folder}` "
        f"draws now; if the table changed on purpose, redraw it with `python eval.py {command} "
        f"results/{folder} --out=results/{folder}`")


def test_the_committed_recall_chart_is_drawn_again_from_its_folder(tmp_path):
  _redraw(tmp_path, "figure2_cpu", "recall", ("recall.md", "recall.json"))
  assert (tmp_path / "out" / "recall.png").stat().st_size > 0


def test_the_committed_accuracy_table_is_drawn_again_from_its_folder(tmp_path):
  _redraw(tmp_path, "spt_quick_listops", "accuracy",
          ("accuracy.md", "accuracy.csv", "accuracy.json"))


@pytest.mark.parametrize("folder", ["parity_cpu", "parity_fig1", "arithmetic_cpu",
                                    "word_s3_householders"])
def test_the_committed_length_chart_is_drawn_again_from_its_folder(tmp_path, folder):
  _redraw(tmp_path, folder, "length", ("length.md", "length.json"))
  assert (tmp_path / "out" / "length.png").stat().st_size > 0


def test_relative_paths_local_and_remote(tmp_path):
  run = tmp_path / "runs" / "listops" / "a"
  assert paths.relative(run / "best" / "30", run) == "best/30"
  assert paths.relative(tmp_path / "runs" / "b_pretrain", run) == "../../b_pretrain"
  assert paths.relative("gs://bucket/runs/a/best/3", "gs://bucket/runs") == "a/best/3"
  assert paths.relative("gs://other/a", "gs://bucket/runs") == "gs://other/a"  # stays whole


def test_a_published_record_holds_only_relative_paths(monkeypatch, tmp_path):
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path / "home"))
  run = tmp_path / "runs" / "listops" / "s4d_spt"
  record = {"task": "listops", "model": "s4d", "tested_checkpoint": f"{run}/best/800",
            "config": {"init_from": str(run.parent / "s4d_pretrain"), "seed": 0,
                       "data": {"data_dir": str(tmp_path / "home" / "data" / "listops"),
                                "max_len": 100}},
            "init": {"workdir": str(run.parent / "s4d_pretrain"), "step": 800},
            "mixer_module": {"name": "mine", "file": str(tmp_path / "mine.py")}}
  out = published.portable(record, run)
  assert out["tested_checkpoint"] == "best/800"
  assert out["config"] == {"init_from": "../s4d_pretrain", "seed": 0,
                           "data": {"data_dir": "data/listops", "max_len": 100}}
  assert out["init"] == {"workdir": "../s4d_pretrain", "step": 800}
  assert out["mixer_module"]["file"] == "../../../mine.py"
  assert list(out) == list(record) and list(out["config"]) == list(record["config"])
  assert published.portable(out, run) == out  # relative values are left as they are
  assert not [s for s in _strings(out) if s.startswith("/")]


def test_runs_and_published_records_are_named_relative_to_the_folder_read(tmp_path):
  """A folder of run directories and one of published records (any name, a table's JSON
  beside them) read alike; "workdir" is the name relative to the folder named, "path" the
  file read."""
  record = {"task": "listops", "model": "transformer", "test_accuracy": 0.5,
            "best_val_accuracy": 0.5, "num_train_steps": 10, "config": {"seed": 0}}
  (tmp_path / "runs" / "listops" / "a").mkdir(parents=True)
  (tmp_path / "runs" / "listops" / "a" / "results.json").write_text(json.dumps(record))
  (tmp_path / "pub" / "transformer").mkdir(parents=True)
  (tmp_path / "pub" / "transformer" / "lr=0.1.json").write_text(json.dumps(record))
  (tmp_path / "pub" / "table.json").write_text(json.dumps([{"model": "transformer"}]))
  (tmp_path / "pub" / "recall.json").write_text(json.dumps({"points": []}))
  warnings: list[str] = []
  found = results.read_results([str(tmp_path / "runs")], warnings)
  assert [r["workdir"] for r in found] == ["listops/a"] and not warnings
  assert found[0]["path"] == str(tmp_path / "runs" / "listops" / "a" / "results.json")
  found = results.read_results([str(tmp_path / "pub")], warnings)
  assert [r["workdir"] for r in found] == ["transformer/lr=0.1"] and not warnings
  assert published.place(found[0]) == str(tmp_path / "pub" / "transformer" / "lr=0.1.json")
  both = results.read_results([str(tmp_path / "runs"), str(tmp_path / "pub")], warnings)
  assert [r["workdir"] for r in both] == ["runs/listops/a", "pub/transformer/lr=0.1"]
  alone = results.read_results([str(tmp_path / "runs" / "listops" / "a")], warnings)
  assert [r["workdir"] for r in alone] == ["a"] and not warnings  # a run named: its name
  assert results.read_results([str(tmp_path / "pub" / "table.json")], warnings) == []
  assert warnings == [f"{tmp_path / 'pub' / 'table.json'}: not a JSON object; skipped"]


@pytest.mark.parametrize("folder", sorted(p.name for p in RESULTS.iterdir() if p.is_dir()))
def test_every_results_folder_says_what_it_holds(folder):
  """Each folder's README.md: what it holds, the command that made it, the machine, the date."""
  text = (RESULTS / folder / "README.md").read_text()
  assert text.startswith(f"# results/{folder}\n"), text[:80]
  for field in ("Command", "Machine", "Date"):
    assert re.search(rf"^{field}: \S", text, re.M), f"results/{folder}/README.md: no {field}"
  assert len(text.splitlines()) <= 15
