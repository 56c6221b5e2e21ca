"""The speed, memory and FLOP tables as markdown, like the paper's Table 2: each speed the
median over interleaved rounds with its min-max, in three significant figures, and the models
that the speed cannot rank within their spread named."""
from __future__ import annotations

import json

from lra.reporting import rounds
from lra.reporting.numbers import finite, memory_text, si, sig3
from lra.reporting.paper import PAPER_BATCH, model_title


def _length_title(length: int) -> str:
  return f"{length // 1024}K" if length % 1024 == 0 else str(length)


def _status_cell(cell: dict | None) -> str | None:
  """The text of a cell that has no number: missing, OOM or error."""
  if cell is None:
    return "-"
  if cell["status"] != "ok":
    return cell["status"]
  return None


_MEASURE_TEXT = {"peak": "device-reported peak memory",
                 "compiled": "XLA compiled memory analysis (arguments + outputs + temporaries)"}


def _machine_line(machine: dict) -> str:
  peak = finite(machine.get("matmul_peak_flops_per_s"))
  return (f"Machine: {machine.get('device_kind', '?')} x{machine.get('device_count', '?')} "
          f"({machine.get('platform', '?')}), JAX {machine.get('jax_version', '?')}, "
          f"batch {machine.get('batch', '?')}"
          + (f", measured matmul peak {si(peak, 'FLOP/s')}" if peak else "")
          + (f", model {json.dumps(machine['model_size'])}"
             if machine.get("model_size") else "") + ".")


def _length_table(tables: dict, kind: str, cell_text) -> list[str]:
  """One markdown table of `tables[kind]`: a row per model, a column per length; an ok cell
  reads `cell_text(cell)`, any other its status."""
  lengths = tables["lengths"]
  out = ["| Model | " + " | ".join(_length_title(n) for n in lengths) + " |",
         "|---|" + "---|" * len(lengths)]
  for model in tables["models"]:
    cells = []
    for n in lengths:
      c = tables[kind][model].get(n)
      text = _status_cell(c)
      cells.append(cell_text(c) if text is None else text)
    out.append(f"| {model_title(model)} | " + " | ".join(cells) + " |")
  return out


def _speed_text(c: dict) -> str:
  """'0.175 [0.169-0.182] (~0.982x; paper 1.2x)': the median [min-max], the ratio of the
  medians to the baseline, `~` where their ranges overlap. The paper's ratio is of its
  two-figure speeds, so it keeps one decimal."""
  text = sig3(c["steps_per_s"])
  if c["low"] is not None:
    text += f" [{sig3(c['low'])}-{sig3(c['high'])}]"
  extra = []
  if c["ratio"] is not None:
    extra.append(f"{'~' * bool(c['ratio_tied'])}{sig3(c['ratio'])}x")
  if c["paper_ratio"] is not None:
    extra.append(f"paper {c['paper_ratio']:.1f}x")
  return text + (f" ({'; '.join(extra)})" if extra else "")


def _speed_title(tables: dict) -> str:
  counts = sorted({c["rounds"] for cells in tables["speed"].values() for c in cells.values()
                   if c["rounds"]})
  over = (f"the median over {counts[0] if len(counts) == 1 else f'{counts[0]}-{counts[-1]}'} "
          f"interleaved rounds [min-max], " if counts else "")
  return (f"Training steps per second: {over}three significant figures (ratio of the medians "
          f"to {model_title(tables['baseline'])} at the same length, ~ where their min-max "
          f"ranges overlap: not ranked; paper's ratio on TPU v3 where it has one)")


def _by_length(tables: dict, key: str, text) -> str:
  return "; ".join(f"{_length_title(n)}: {', '.join(text(x) for x in tables[key][n])}"
                   for n in tables["lengths"] if tables[key].get(n))


def _rank_notes(tables: dict) -> list[str]:
  """The pairs of models that the speed cannot rank at a length (their min-max ranges
  overlap), and the models without a spread."""
  out = []
  tied = _by_length(tables, "ties", lambda p: f"{model_title(p[0])} ~ {model_title(p[1])}")
  if tied:
    out.append(f"Not ranked, their min-max ranges overlapping: {tied}.")
  bare = _by_length(tables, "unspread", model_title)
  if bare:
    out.append(f"No spread recorded ({rounds.NO_SPREAD}), so not ranked: {bare}.")
  return out


def _memory_text(c: dict, mixed: bool) -> str:
  text = memory_text(c["gb"])
  if mixed and c["measure"] == "compiled":
    text += "†"
  if c["paper"] is not None:
    text += f" ({memory_text(c['paper'])})"
  return text


def _flops_text(c: dict) -> str:
  parts = []
  if c["flops_per_step"] is not None:
    parts.append(si(c["flops_per_step"], "FLOP"))
  if c["achieved_flops_per_s"] is not None:
    rate = si(c["achieved_flops_per_s"], "FLOP/s")
    if c["fraction_of_peak"] is not None:
      rate += f" ({100 * c['fraction_of_peak']:.0f}%)"
    parts.append(rate)
  return ", ".join(parts) or "-"


def speed_markdown(tables: dict, machine: dict | None = None) -> str:
  """Three markdown tables (lra.reporting.speed.speed_tables): steps/s with their spread and
  ratios, memory, FLOPs and achieved FLOP/s."""
  out = [_machine_line(machine), ""] if machine else []
  out += [_speed_title(tables), ""]
  out += _length_table(tables, "speed", _speed_text)
  notes = _rank_notes(tables)
  out += [""] + notes if notes else []

  measures = tables["memory_measures"]
  mixed = len(measures) > 1
  if mixed:
    what = f"{_MEASURE_TEXT['peak']}; † = {_MEASURE_TEXT['compiled']} where no peak is reported"
  else:
    what = _MEASURE_TEXT[measures[0]] if measures else "no memory figures"
  batch = (machine or {}).get("batch")
  other = (f"; ours are at batch {batch}, so compare how the two grow with length, not the "
           f"figures" if batch is not None and batch != PAPER_BATCH else "")
  out += ["", f"Memory per device (MB = 10^6 bytes below 1 GB, GB = 10^9 bytes): {what}. The "
          f"paper's TPU v3 figure (batch {PAPER_BATCH}) in parentheses{other}.", ""]
  out += _length_table(tables, "memory", lambda c: _memory_text(c, mixed))

  out += ["", "FLOPs per training step (XLA cost analysis); achieved FLOP/s (fraction of the "
          "measured matmul peak)", ""]
  out += _length_table(tables, "flops", _flops_text)
  out += ["", "OOM = out of memory; error = the measurement failed (see the JSON for the "
          "message); - = not measured."]
  out += [f"- {n}" for n in tables["notes"]]
  return "\n".join(out) + "\n"
