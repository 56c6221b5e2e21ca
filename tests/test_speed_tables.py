"""The speed tables of `eval.py speed`: steps per second with the ratio to the Transformer
beside the paper's, memory (XLA's compiled analysis or the device's peak; below 1 GB in MB),
FLOPs against the matmul peak, OOM and error cells; the models interleaved over rounds (each
cell once a round in a fresh process), every round kept in speed.json, the median with the
min-max over the rounds in three significant figures and the models it cannot rank marked; the
machine's grid on a CPU when --lengths and --batch are not given; the grid's aliases timed as
their mixer. In-process calls of eval.main with the measuring child stood in for (no
measurement)."""
from __future__ import annotations

import json

import pytest

from lra.commands import measuring
from lra.reporting import speed, speed_table
from tests.reporting import SMALL_SPEED, SPEED_ROWS, run_eval, speed_row


def test_speed_tables_and_markdown():
  tables = speed.speed_tables(SPEED_ROWS)
  assert tables["lengths"] == [1024, 2048]
  assert tables["models"] == ["transformer", "reformer", "performer"]
  perf = tables["speed"]["performer"]
  assert perf[1024]["ratio"] == pytest.approx(2.5)
  assert perf[2048]["ratio"] is None  # the Transformer ran out of memory there
  assert perf[1024]["paper_ratio"] == pytest.approx(9.5 / 8.1)
  assert tables["speed"]["transformer"][1024]["ratio"] is None
  assert tables["speed"]["transformer"][2048]["status"] == "OOM"
  assert tables["speed"]["reformer"][1024]["status"] == "error"
  assert tables["memory"]["performer"][1024]["gb"] == pytest.approx(0.5)
  assert tables["memory"]["reformer"][2048]["measure"] == "peak"
  assert tables["flops"]["performer"][1024]["fraction_of_peak"] == pytest.approx(0.2)
  assert sorted(tables["memory_measures"]) == ["compiled", "peak"]

  md = speed_table.speed_markdown(tables, machine={"device_kind": "cpu", "platform": "cpu",
                                                   "device_count": 1, "jax_version": "0.0",
                                                   "matmul_peak_flops_per_s": 1e14,
                                                   "batch": 32})
  lines = md.splitlines()
  perf_line = next(x for x in lines if x.startswith("| Performer ") and "x" in x)
  assert "5.00 (2.50x; paper 1.2x)" in perf_line  # three significant figures
  assert "| 4.00 (paper 1.9x) |" in perf_line
  trans = [x for x in lines if x.startswith("| Transformer ")]
  assert len(trans) == 3 and all(x.endswith("| OOM |") for x in trans)
  assert "| 2.00 |" in trans[0]
  reformer = [x for x in lines if x.startswith("| Reformer ")]
  assert all("| error |" in x for x in reformer)
  assert "XLA compiled memory analysis" in md and "device-reported peak" in md
  assert "3.00 GB (990 MB)" in reformer[1] and "500 MB† (370 MB)" in md
  assert "4 TFLOP, 20 TFLOP/s (20%)" in md

  # A later re-measurement replaces the earlier row.
  again = speed.speed_tables(SPEED_ROWS + [speed_row("transformer", 1024, steps=1.0)])
  assert again["speed"]["performer"][1024]["ratio"] == pytest.approx(5.0)
  assert again["notes"]


def test_memory_below_one_gigabyte_in_megabytes():
  tables = speed.speed_tables(SMALL_SPEED["rows"])
  md = speed_table.speed_markdown(tables)
  assert "| Transformer | 500 MB (850 MB) |" in md and "| Performer | 2.00 GB (370 MB) |" in md


# ------------------------------------------------------------------ rounds and their spread


# Seconds per step of each round, as the stand-in child reports them in turn.
ROUND_TIMES = {"transformer": [5.4, 5.8, 5.6], "performer": [5.9, 5.5, 5.7],
               "local": [2.0, 2.2, 2.1]}


@pytest.fixture
def child(monkeypatch):
  """Stands in for the measuring child: records each call, returns the next round's time."""
  calls = []
  monkeypatch.setattr(measuring, "machine_in_fresh_process", lambda dtype: {
      "platform": "cpu", "device_kind": "cpu", "device_count": 1,
      "matmul_peak_flops_per_s": 1e11})

  def measure(model, length, batch, size, dtype, repeats, *args, **kwargs):
    calls.append((model, length, repeats))
    t = ROUND_TIMES[model][sum(c[0] == model and c[1] == length for c in calls) - 1]
    return {"model": model, "length": length, "batch": batch, "status": "ok",
            "step_time_s": t, "steps_per_s": 1 / t, "compiled_memory_bytes": 10**8,
            "flops_per_step": 1e9, "peak_memory_bytes": None}
  monkeypatch.setattr(measuring, "run_in_fresh_process", measure)
  return calls


def test_speed_interleaves_rounds_and_reports_the_spread(capsys, tmp_path, child):
  code, out, err = run_eval(capsys, "speed", "--models=transformer,performer,local",
                            "--lengths=64", "--batch=2", "--repeats=3", f"--out={tmp_path}")
  assert code == 0, err
  # Round-robin: every model once per round, in turn; each call one round of timed steps.
  assert child == [(m, 64, 1) for _ in range(3) for m in ("transformer", "performer", "local")]
  rows = {r["model"]: r for r in json.loads((tmp_path / "speed.json").read_text())["rows"]}
  for model, times in ROUND_TIMES.items():  # every round's figure, so the tables can be remade
    assert rows[model]["round_step_times_s"] == times
    assert rows[model]["step_time_s"] == pytest.approx(sorted(times)[1])
  table = (tmp_path / "speed.md").read_text()
  # The median with min-max over the rounds, three significant figures (0.179, not 0.2).
  assert "| Transformer | 0.179 [0.172-0.185] |" in table
  # Performer's range overlaps the Transformer's: its ratio is marked, the pair named.
  assert "| Performer | 0.175 [0.169-0.182] (~0.982x) |" in table
  assert "| Local Attention | 0.476 [0.455-0.500] (2.67x) |" in table
  assert "median over 3 interleaved rounds [min-max]" in table
  ties = [l for l in table.splitlines() if l.startswith("Not ranked")]
  assert len(ties) == 1 and "64: Transformer ~ Performer" in ties[0]
  assert "Local" not in ties[0]
  # The progress lines say the round.
  assert "round 3/3: transformer @ 64: 0.179 steps/s" in out
  # Remade from speed.json alone: the same table.
  data = json.loads((tmp_path / "speed.json").read_text())
  assert speed_table.speed_markdown(speed.speed_tables(data["rows"]), data["machine"]) == \
      table.rstrip("\n") + "\n"


def test_a_failed_cell_is_not_measured_again_and_keeps_its_rounds():
  """An OOM or error in any round makes the cell that failure; it is not timed in later rounds
  (an OOM would only run out of memory again), and the rounds it had are kept."""
  calls = []

  def measure_one(model, length):
    calls.append(model)
    n = calls.count(model)
    if model == "reformer" and n == 2:
      return {"model": model, "length": length, "status": "OOM"}
    return {"model": model, "length": length, "status": "ok", "step_time_s": 1.0 + n,
            "steps_per_s": 1 / (1.0 + n), "compiled_memory_bytes": 10**8 + n,
            "peak_memory_bytes": 10**7 * n, "flops_per_step": 4.0}
  rows = measuring.measure_rounds([("transformer", 8), ("reformer", 8)], 3, measure_one)
  assert calls == ["transformer", "reformer", "transformer", "reformer", "transformer"]
  ok, failed = rows
  assert ok["status"] == "ok" and ok["round_step_times_s"] == [2.0, 3.0, 4.0]
  assert ok["step_time_s"] == 3.0 and ok["steps_per_s"] == pytest.approx(1 / 3)
  assert ok["achieved_flops_per_s"] == pytest.approx(4.0 / 3)
  # Memory from the first round's compile; the device peak the largest of the rounds.
  assert ok["compiled_memory_bytes"] == 10**8 + 1 and ok["peak_memory_bytes"] == 3 * 10**7
  assert failed["status"] == "OOM" and failed["round_step_times_s"] == [2.0]
  assert failed["failed_in_round"] == 2


def test_old_speed_json_without_rounds_stays_readable():
  """A speed.json from before the rounds (one figure a cell) still makes the tables: its
  figures in three significant figures, and a note that their spread was not recorded."""
  rows = [{"model": "transformer", "length": 1024, "status": "ok", "steps_per_s": 0.179,
           "compiled_memory_bytes": 10**8},
          {"model": "performer", "length": 1024, "status": "ok", "steps_per_s": 0.2567,
           "compiled_memory_bytes": 10**8}]
  table = speed_table.speed_markdown(speed.speed_tables(rows))
  assert "| Transformer | 0.179 |" in table
  assert "| Performer | 0.257 (1.43x; paper 1.2x) |" in table
  assert "No spread recorded (one round, or a speed.json from before the rounds), so not " \
         "ranked: 1K: Transformer, Performer" in table


# --------------------------------------------------------------- the grid a machine measures


@pytest.mark.parametrize("platform, lengths, batch, said", [
    ("cpu", [512, 1024], 4, True),
    ("gpu", [1024, 2048, 3072, 4096], 32, False),
])
def test_speed_without_lengths_and_batch_measures_the_machines_grid(
    capsys, tmp_path, monkeypatch, platform, lengths, batch, said):
  measured = []
  monkeypatch.setattr(measuring, "machine_in_fresh_process", lambda dtype: {
      "platform": platform, "device_kind": platform, "device_count": 1,
      "matmul_peak_flops_per_s": 1e11})

  def measure(model, length, batch, *args, **kwargs):
    measured.append((model, length, batch))
    return {"model": model, "length": length, "batch": batch, "status": "ok",
            "step_time_s": 1.0, "steps_per_s": 1.0, "compiled_memory_bytes": 10**8}
  monkeypatch.setattr(measuring, "run_in_fresh_process", measure)
  code, out, err = run_eval(capsys, "speed", "--models=transformer", f"--out={tmp_path}")
  assert code == 0, err
  assert measured == [("transformer", n, batch) for _ in range(5) for n in lengths]  # rounds
  assert ("CPU: the CPU-sized grid (lengths 512,1024, batch 4;" in out) == said
  assert ("(1 model x 2 lengths x 5 rounds, one process each)" in out) == said
  machine = json.loads((tmp_path / "speed.json").read_text())["machine"]
  assert machine["batch"] == batch and machine["software"]["libraries"]["jax"]
  # The paper's memory is of batch 32; the CPU grid's of batch 4 says so.
  table = (tmp_path / "speed.md").read_text()
  assert "The paper's TPU v3 figure (batch 32) in parentheses" in table
  assert ("ours are at batch 4, so compare how the two grow with length" in table) == said
  # Given flags are kept as they are on a CPU too.
  measured.clear()
  code, out, err = run_eval(capsys, "speed", "--models=transformer", "--lengths=64", "--batch=2",
                            f"--out={tmp_path}")
  assert code == 0 and measured == [("transformer", 64, 2)] * 5 and "CPU-sized" not in out


def test_speed_measures_grid_aliases_as_their_mixer_with_its_settings():
  """`eval.py speed --models=mega_chunk,transformer_chunked` times the grid's aliases (the
  child process names each row by the alias)."""
  size = measuring.TEXT_BASE_SIZE
  c = measuring.measured_config("mega_chunk", 256, 2, size, "float32")
  assert (c.model.name, c.model.attention.chunk_size, c.data.max_len) == ("mega", 128, 256)
  c = measuring.measured_config("transformer_chunked", 256, 2, size, "float32")
  assert (c.model.name, c.model.attention.implementation) == ("transformer", "chunked")
  assert measuring.measured_config("mega", 256, 2, size, "float32").model.attention.chunk_size == 0
