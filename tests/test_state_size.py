"""Zoology's state size: every mixer of the registry declares the numbers one layer carries
across positions (Mixer.carried_state) and docs/models.md gives each its row; the declared
number is what the computation really carries, counted apart from the arrays it forms (the
keys and values attention's softmax reads, the state of the SSMs' recurrence, of Mamba's scan,
S4D's modes; the recurrent family's core: tests/test_recurrent_family.py), and Zoology's
formulas at its shapes; the trainer records it in results.json (per layer and total); `eval.py
recall` draws MQAR accuracy against it, a line per model over its widths, each point its
sweep's best-on-validation run."""
from __future__ import annotations

import json
import pathlib
import re
from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from matplotlib.colors import to_hex
from PIL import Image

from lra import models
from lra.configs import mqar as mqar_config
from lra.models import common, registry
from lra.models.blocks import inputs
from lra.models.mixers import mamba
from lra.reporting import charts, recall
from lra.training import run_record, trainer
from tests.reporting import one_error_line, run_eval

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _built_in() -> list[str]:
  return [n for n in registry.names() if registry.in_repository(n)]


def _undeclared(names) -> list[str]:
  return [n for n in names if registry.get(n).carried_state is common.Mixer.carried_state]


def _mqar_net(mixer: str, **model):
  """The MQAR base config's model of `mixer` (as a run builds it; nothing traced)."""
  c = mqar_config.get_config(mixer)
  return models.build({**c.model.to_dict(), **model}, vocab_size=c.data.vocab_size,
                      num_classes=c.data.vocab_size, max_len=c.data.max_len, pair=False,
                      denoise=True)


# ------------------------------------------------------------------------- every mixer


def test_every_mixer_of_the_registry_declares_its_carried_state():
  names = _built_in()
  assert not _undeclared(names)
  for name in names:
    state = run_record.carried_state(_mqar_net(name))
    assert state["per_layer"] and all(isinstance(n, int) and n > 0 for n in state["per_layer"])
    assert state["total"] == sum(state["per_layer"]) and state["length"] == 256, name

  class Newcomer(common.Mixer):  # a mixer added without the hook
    def __call__(self, x_BxLxD, mask_BxL, *, deterministic: bool):
      return x_BxLxD

  with mock.patch.dict(registry._MIXERS, {"newcomer": Newcomer}):
    assert _undeclared(registry.names()) == ["newcomer"]
    assert run_record.carried_state(_mqar_net("transformer", name="newcomer",
                                              attention={})) is None


def _doc_rows() -> dict[str, tuple[str, str]]:
  """{mixer: (per layer, model)} of docs/models.md's state table."""
  doc = (ROOT / "docs" / "models.md").read_text()
  section = doc.split("## The state each mixer carries", 1)[1].split("\n## ", 1)[0]
  return {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
      r"^\| `(\w+)` \| [^`|][^|]*\| ([\d,/ ]+) \| ([\d,]+) \|$", section, re.M)}


def test_docs_give_every_mixer_its_carried_state():
  rows, problems = _doc_rows(), []
  for name in _built_in():
    state = run_record.carried_state(_mqar_net(name))
    layers = state["per_layer"]
    per = f"{layers[0]:,}" if len(set(layers)) == 1 else " / ".join(f"{n:,}" for n in layers)
    want = (per, f"{state['total']:,}")
    if rows.get(name) != want:
      problems.append(f"docs/models.md's state table: write | `{name}` | WHAT IS COUNTED | "
                      f"{want[0]} | {want[1]} |" + (f" (it has {rows[name]})" if name in rows
                                                     else ""))
  assert not problems, "\n".join(problems)


# --------------------------------------------------------------- counted apart, by mixer


def _spy(monkeypatch, module, name: str, count) -> list[int]:
  """Patches module.name to record count(*args) of every call (a traced array's shape)."""
  seen, real = [], getattr(module, name)

  def spy(*args, **kwargs):
    seen.append(count(*args))
    return real(*args, **kwargs)
  monkeypatch.setattr(module, name, spy)
  return seen


def _trace(mixer, width: int, length: int):
  """The mixer's init on one sequence, traced only (shapes); returns its parameter shapes."""
  x_1xLxD = jnp.zeros((1, length, width), jnp.float32)
  mask_1xL = jnp.ones((1, length), bool)
  return jax.eval_shape(lambda: mixer.init(jax.random.PRNGKey(0), x_1xLxD, mask_1xL,
                                           deterministic=True))["params"]


def _per_sequence(*arrays) -> int:
  return sum(a.size // a.shape[0] for a in arrays)


@pytest.mark.parametrize("name, module, function, settings", [
    ("transformer", "transformer", "softmax_attention", {}),
    ("linformer", "linformer", "softmax_attention", {"k": 5}),
    ("local", "local", "attend", {"block_size": 4, "overlap": True}),
    ("local", "local", "attend", {"block_size": 4}),
])
def test_attention_carries_the_keys_and_values_a_query_reads(monkeypatch, name, module,
                                                             function, settings):
  """The keys and values the softmax is given, per query (block): 2 x keys x qkv_dim."""
  import importlib
  target = importlib.import_module(f"lra.models.mixers.{module}")
  # Full attention and Linformer: BxMxHxK keys and values; local: BxNxMxHxK per query block.
  seen = _spy(monkeypatch, target, function, lambda q, k, v, *_: _per_sequence(k, v) // (
      k.shape[1] if k.ndim == 5 else 1))
  mixer = registry.make(name, settings, num_heads=2, qkv_dim=8, length=24)
  _trace(mixer, 8, 24)
  assert seen and mixer.carried_state(8, 24) == sum(seen) > 0


@pytest.mark.parametrize("name, settings", [
    ("s5", {"state_size": 8, "blocks": 2, "bidirectional": True}),
    ("s5", {"state_size": 8, "blocks": 2, "bidirectional": False}),
    ("lru", {"state_size": 6, "bidirectional": True}),
])
def test_an_ssm_carries_its_recurrence_state(monkeypatch, name, settings):
  """Each pass of the diagonal recurrence carries its complex x_k (N): 2 N numbers."""
  seen = _spy(monkeypatch, inputs, "diagonal_recurrence", lambda lam, bu, *_: 2 * lam.size)
  mixer = registry.make(name, settings)
  _trace(mixer, 8, 12)
  assert len(seen) == 1 + settings["bidirectional"]
  assert mixer.carried_state(8, 12) == sum(seen)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_mamba_carries_its_scans_state(monkeypatch, bidirectional):
  """The selective scan's state is E x N (A's shape) per pass."""
  seen = []
  for function in ("selective_scan", "chunked_selective_scan"):
    seen_here = _spy(monkeypatch, mamba, function, lambda u, dt, a, *_: a.size)
    seen.append(seen_here)
  mixer = registry.make("mamba", {"state_size": 4, "expand": 2, "chunk_size": 4,
                                  "bidirectional": bidirectional})
  _trace(mixer, 8, 12)
  counts = seen[0] + seen[1]
  assert len(counts) == 1 + bidirectional
  assert mixer.carried_state(8, 12) == sum(counts) == (1 + bidirectional) * 2 * 8 * 4


def test_s4d_carries_its_modes():
  """One complex mode per (direction, channel, mode) reads out through C: C's numbers."""
  for bidirectional in (False, True):
    mixer = registry.make("s4d", {"state_size": 6, "bidirectional": bidirectional})
    c = _trace(mixer, 8, 12)["C"]  # directions x D x N/2 x (re, im)
    assert mixer.carried_state(8, 12) == c.size == (1 + bidirectional) * 8 * 6


D, L = 64, 256  # a Zoology Figure 2 width and length, one head, qkv_dim = d_model


@pytest.mark.parametrize("name, settings, zoology", [
    # zoology/mixers/attention.py: 2 * self.d_model * sequence_length
    ("transformer", {}, 2 * D * L),
    # zoology/mixers/mamba.py: 2 * self.d_model * self.d_state (expand 2, one direction)
    ("mamba", {"state_size": 16, "bidirectional": False}, 2 * D * 16),
    # zoology/mixers/nystromformer/nystromformer.py: 2 * self.d_model * self.num_landmarks
    ("nystromformer", {"num_landmarks": 32}, 2 * D * 32),
    # zoology/mixers/slide_attn.py: self.inner_attn.block_size * self.d_model * 2
    ("local", {"block_size": 32}, 32 * D * 2),
])
def test_the_count_is_zoologys_at_its_shapes(name, settings, zoology):
  mixer = registry.make(name, settings, num_heads=1, qkv_dim=D, length=L)
  assert mixer.carried_state(D, L) == zoology


def test_attention_grows_with_length_and_a_recurrence_does_not():
  full = registry.make("transformer", {}, num_heads=1, qkv_dim=D)
  s5 = registry.make("s5", {})
  assert full.carried_state(D, 2 * L) == 2 * full.carried_state(D, L)
  assert s5.carried_state(D, 2 * L) == s5.carried_state(D, L)


# --------------------------------------------------------------- results.json, eval.py recall


def _mqar_result(root, name: str, model: str, width: int, state: int, val: float,
                 test: float, *, lr: float = 1e-3, max_len: int = 64, pairs: int = 4,
                 carried: bool = True) -> None:
  run = root / name
  run.mkdir(parents=True)
  result = {"task": "mqar", "model": model, "test_accuracy": test, "best_val_accuracy": val,
            "test_count": 100, "num_train_steps": 10,
            "config": {"learning_rate": lr, "model": {"name": model, "emb_dim": width},
                       "data": {"max_len": max_len, "num_kv_pairs": pairs}}}
  if carried:
    result["carried_state"] = {"per_layer": [state // 2] * 2, "total": state, "width": width,
                               "length": max_len}
  (run / "results.json").write_text(json.dumps(result))


def _recall_runs(root) -> None:
  # The Transformer at width 64: a sweep of two learning rates; validation picks the second.
  _mqar_result(root, "t64_lr1", "transformer", 64, 16384, 0.50, 0.90, lr=1e-3)
  _mqar_result(root, "t64_lr3", "transformer", 64, 16384, 0.80, 0.60, lr=3e-3)
  _mqar_result(root, "t128", "transformer", 128, 32768, 0.99, 0.97)
  _mqar_result(root, "s5_64", "s5", 64, 1024, 0.30, 0.25)
  _mqar_result(root, "s5_128", "s5", 128, 1024 * 2, 0.40, 0.35)
  _mqar_result(root, "old", "mamba", 64, 0, 0.4, 0.4, carried=False)  # before the record


@pytest.fixture
def drawn(monkeypatch):
  found = []
  real = recall.recall_chart
  monkeypatch.setattr(recall, "recall_chart", lambda *a, **k: found.append(real(*a, **k)))
  return found


def test_recall_chart_points_are_each_sweeps_best_on_validation(capsys, tmp_path, drawn):
  _recall_runs(tmp_path / "runs")
  helpers_listops = tmp_path / "runs" / "listops_run"
  helpers_listops.mkdir()
  (helpers_listops / "results.json").write_text(json.dumps(
      {"task": "listops", "model": "transformer", "test_accuracy": 0.4}))  # not a recall run
  out = tmp_path / "out"
  code, stdout, err = run_eval(capsys, "recall", str(tmp_path / "runs"), f"--out={out}")
  assert code == 0, err
  # The run that recorded no state is named, the ListOps run silently not a recall run.
  assert [l for l in err.splitlines() if l.strip()] == [
      f"warning: {tmp_path / 'runs' / 'old' / 'results.json'}: no carried_state (a run from "
      "before results.json recorded it, or a mixer that does not declare "
      "Mixer.carried_state); left out of the recall chart"]
  (chart,) = drawn
  (panel,) = chart["panels"].values()
  # Test accuracy of the best validation run (60, not the sweep's best test figure, 90).
  assert panel == {"transformer": [(16384, 60.0, 64), (32768, 97.0, 128)],
                   "s5": [(1024, 25.0, 64), (2048, 35.0, 128)]}
  assert chart["xscale"] == "log" and chart["legend"] == ["Transformer", "S5"]
  assert chart["colours"] == {m: to_hex(charts.model_style(m)[0]) for m in ("transformer", "s5")}
  assert "best validation accuracy" in chart["notes"][0]
  assert "| Transformer | 64 | 16,384 | 8,192 | 60.0 | 80.0 | 2 | 0.003 |" in stdout
  saved = json.loads((out / "recall.json").read_text())
  assert [(p["model"], p["width"], p["runs"]) for p in saved["points"]] == [
      ("transformer", 64, 2), ("transformer", 128, 1), ("s5", 64, 1), ("s5", 128, 1)]
  assert (out / "recall.md").read_text().startswith("### MQAR, 64 tokens, 4 pairs")
  with Image.open(out / "recall.png") as im:
    assert im.format == "PNG" and im.size[0] > 500


def test_each_data_point_is_a_panel_of_its_own(capsys, tmp_path, drawn):
  _mqar_result(tmp_path / "runs", "a", "transformer", 64, 16384, 0.5, 0.5)
  _mqar_result(tmp_path / "runs", "b", "transformer", 64, 65536, 0.5, 0.4, max_len=256,
               pairs=16)
  code, _, err = run_eval(capsys, "recall", str(tmp_path / "runs"), f"--out={tmp_path / 'o'}")
  assert code == 0, err
  assert list(drawn[0]["panels"]) == ["MQAR, 64 tokens, 4 pairs", "MQAR, 256 tokens, 16 pairs"]
  assert [list(p.values()) for p in drawn[0]["panels"].values()] == [
      [[(16384, 50.0, 64)]], [[(65536, 40.0, 64)]]]


@pytest.mark.parametrize("total", [-1024, 0, "1024", 1024.5])
def test_an_impossible_state_size_is_named_and_skipped(capsys, tmp_path, drawn, total):
  """A carried_state total that is no positive integer (an edited results.json, an outside
  mixer's count): one warning line naming the file and the value, the run left out of the
  table and the chart (before: tabled, and dropped from the log axis without a word)."""
  _mqar_result(tmp_path / "runs", "t64", "transformer", 64, 16384, 0.5, 0.5)
  _mqar_result(tmp_path / "runs", "s5_64", "s5", 64, 1024, 0.4, 0.4)
  file = tmp_path / "runs" / "s5_64" / "results.json"
  edited = json.loads(file.read_text())
  edited["carried_state"]["total"] = total
  file.write_text(json.dumps(edited))
  code, stdout, err = run_eval(capsys, "recall", str(tmp_path / "runs"), f"--out={tmp_path / 'o'}")
  assert code == 0, err
  assert [l for l in err.splitlines() if l.strip()] == [
      f"warning: {file}: carried_state total={total!r} is not a positive integer; left out of "
      "the recall chart"]
  (panel,) = drawn[0]["panels"].values()
  assert list(panel) == ["transformer"] and "| S5 |" not in stdout


def test_recall_without_a_drawable_run_is_one_line(capsys, tmp_path):
  _mqar_result(tmp_path / "runs", "old", "mamba", 64, 0, 0.4, 0.4, carried=False)
  code, _, err = run_eval(capsys, "recall", str(tmp_path / "runs"), f"--out={tmp_path / 'o'}")
  assert code == 1 and "no finished MQAR run with a recorded carried_state" in err.splitlines()[-1]
  assert not (tmp_path / "o").exists()
  code, _, err = run_eval(capsys, "recall", str(tmp_path / "nowhere"), f"--out={tmp_path / 'o'}")
  assert code == 1 and "no such run directory" in one_error_line(err)


def _growing_longformer(data_dir: str = ""):
  """A tiny MQAR config of a Longformer whose window doubles by layer (2, then 4)."""
  c = mqar_config.get_config("longformer,cpu")
  c.data.update(vocab_size=32, max_len=16, num_kv_pairs=2, num_train=32, num_val=8,
                num_test=8, data_dir=data_dir)
  c.model.update(emb_dim=8, qkv_dim=8, mlp_dim=8, num_heads=1, num_layers=2)
  c.model.attention.update(window=2, window_growth=2.0)
  return c


# Its layers' counts: 2 x (w_i + 1 + 1 global token) x qkv_dim.
GROWING = [2 * (2 + 1 + 1) * 8, 2 * (4 + 1 + 1) * 8]


def test_the_record_counts_each_layers_mixer_as_its_block_builds_it():
  c = _growing_longformer()
  net = models.build(c.model.to_dict(), vocab_size=32, num_classes=32, max_len=16,
                     pair=False, denoise=True)
  assert run_record.carried_state(net) == {"per_layer": GROWING, "total": sum(GROWING),
                                           "width": 8, "length": 16}


@pytest.mark.slow
def test_a_run_records_its_carried_state_and_the_chart_reads_it(capsys, tmp_path, drawn):
  """A tiny MQAR run (50 s on the shared 2-core machine): results.json holds each layer's
  count and their total, which eval.py recall draws."""
  c = _growing_longformer(str(tmp_path / "data"))
  c.batch_size = c.eval_batch_size = 8
  c.num_train_steps, c.warmup_steps = 2, 0
  c.log_every = c.eval_every = c.checkpoint_every = 2
  c.progress, c.compilation_cache_dir = False, ""
  trainer.train_and_evaluate(c, str(tmp_path / "runs" / "longformer"))
  stored = json.loads((tmp_path / "runs" / "longformer" / "results.json").read_text())
  per_layer = GROWING
  assert stored["carried_state"] == {"per_layer": per_layer, "total": sum(per_layer),
                                     "width": 8, "length": 16}
  code, _, err = run_eval(capsys, "recall", str(tmp_path / "runs"), f"--out={tmp_path / 'o'}")
  assert code == 0, err
  (panel,) = drawn[0]["panels"].values()
  assert panel == {"longformer": [(sum(per_layer), 100 * stored["test_accuracy"], 8)]}
