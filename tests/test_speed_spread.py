"""Issue 44 item 4: `eval.py speed` interleaves the models over rounds (round-robin, each cell
measured once per round in a fresh process), keeps every round's figure in speed.json, and its
table gives the median with the min-max over the rounds in three significant figures (the ratio
to the Transformer too), marking the models that it cannot rank within their spread. In-process
calls of eval.main with the measuring child stood in for (no measurement)."""
import json

import pytest

from lra.commands import measuring
from lra.reporting import speed

from tests.test_eval_faults import _eval

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
  code, out, err = _eval(capsys, "speed", "--models=transformer,performer,local",
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
  from lra.reporting import speed_table
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
  from lra.reporting import speed_table
  rows = [{"model": "transformer", "length": 1024, "status": "ok", "steps_per_s": 0.179,
           "compiled_memory_bytes": 10**8},
          {"model": "performer", "length": 1024, "status": "ok", "steps_per_s": 0.2567,
           "compiled_memory_bytes": 10**8}]
  table = speed_table.speed_markdown(speed.speed_tables(rows))
  assert "| Transformer | 0.179 |" in table
  assert "| Performer | 0.257 (1.43x; paper 1.2x) |" in table
  assert "No spread recorded (one round, or a speed.json from before the rounds), so not " \
         "ranked: 1K: Transformer, Performer" in table
