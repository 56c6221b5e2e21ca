"""Padding, measured for every mixer (`python eval.py padding`): how much a row's real outputs
and input gradients move when the row is padded.

For each mixer of the registry (and a few variants, VARIANTS) at tiny shapes, a batch of
BATCH rows of `real` tokens is run alone (the reference), then padded on the right by each of
PADS positions (mask False there, the padded inputs random junk of scale JUNK, never zeros,
so a leak shows) and, in the same batch, on the left by the same counts. Each case gives two
figures: the largest absolute change of the real outputs, relative to the largest real output
of the reference, and the same for the input gradients of the real positions (d/dx of one
fixed random cotangent on the real outputs, zero on the padded ones). Padding by 0 is the
same rows in a batch twice as large: the floor of float noise between two programs.

The parameters are made once at the longest padded length and applied at every length (as
the encoder makes them at max_len), except for a FIXED_LENGTH mixer, whose parameters are per
length (Sinkhorn's sorting network: made anew at each length from the same key).

A mixer is invariant where every figure stays within TOLERANCE. Mixers whose real outputs
depend on the padded length by design are LENGTH_DEPENDENT (right and left), and those whose
pattern is tied to absolute positions (blocks, segments, positions 0..) take no left padding
(NO_LEFT): each with its reason, which the table prints. Any other figure above TOLERANCE is
a leak: the table says LEAKS and tests/test_padding.py fails.
"""
from __future__ import annotations

import numpy as np

REAL, WIDTH, HEADS, BATCH = 24, 16, 2, 2  # real tokens per row, width (= qkv_dim), heads, rows
PADS = (0, 1, 17, 500)  # positions of padding, right and left
LEFT_SHOWN = (1, 17, 500)  # the left pads the table shows (left 0 is right 0)
JUNK = 100.0  # scale of the random inputs at padded positions
TOLERANCE = 1e-5  # relative: float32 noise of a differently shaped program stays below it

# Settings for rows of 24 tokens padded up to 524: block, chunk and segment sizes of 8 (4 for
# BigBird, whose pattern needs several blocks), so that a row spans several, as the tests'
# tiny settings give them; a mixer not named runs with its defaults (Hyena's l_max 1024 and
# Mega's max_positions 1024 take 524). NEEDED names those without which a mixer refuses these
# shapes.
SETTINGS = {
    "based": dict(window=8, chunk_size=8),
    "bigbird": dict(block_size=4),
    "deltanet": dict(chunk_size=8),
    "deltaproduct": dict(chunk_size=8),
    "gated_deltanet": dict(chunk_size=8),
    "comba": dict(chunk_size=8),
    "gla": dict(chunk_size=8),
    "hgrn2": dict(chunk_size=8),
    "kda": dict(chunk_size=8),
    "local": dict(block_size=8),
    "longformer": dict(window=8),
    "mamba": dict(chunk_size=8),
    "mamba2": dict(head_dim=8, chunk_size=8),
    "mamba3": dict(chunk_size=8),
    "mlstm": dict(chunk_size=8),
    "nystromformer": dict(num_landmarks=4),
    "reformer": dict(n_buckets=4, chunk_len=8),
    "retnet": dict(chunk_size=8),
    "rwkv7": dict(chunk_size=8, zero_init=False),
    "sinkhorn": dict(block_size=8),
    "sparse_transformer": dict(block_size=8, c=2),
    "transformer_xl": dict(segment_len=8, mem_len=8),
}
NEEDED = {
    "mamba2": "head_dim=8: its default 64 does not divide expand x width (2 x 16)",
    "rwkv7": "zero_init=False: at the authors' init (o_proj 0) its outputs and gradients are 0",
}
# Named rows beyond each registered name's: label -> (mixer, settings update, layer_index).
# Based's kind follows the layer (layer_index 1, as the contract builds it, is linear
# attention); the recurrent family and Mamba read both ways on LRA (bidirectional configs).
VARIANTS = {
    "based (conv layer)": ("based", {}, 0),
    "based (window layer)": ("based", {}, 2),
    "deltanet (bidirectional)": ("deltanet", dict(bidirectional=True), 1),
    "mamba (bidirectional)": ("mamba", dict(bidirectional=True), 1),
}

# Real outputs that depend on the padded LENGTH by design (never on the padded content): the
# reason, from the mixer's docstring. tests/test_mixer_contract.py's LENGTH_DEPENDENT (no
# truncation check at its tiny length) is a subset: at its 13 tokens BigBird's blocks cover
# every real key whatever the padding.
LENGTH_DEPENDENT = {
    "fnet": "the DFT runs over all L positions (frequencies 2 pi k / L): another L is another "
            "transform of the same real tokens",
    "nystromformer": "the m landmarks are means over m segments of the padded sequence: L sets "
                     "the segment boundaries",
    "sinkhorn": "the sorting network has an output per block of its init length "
                "(FIXED_LENGTH): each length has its own parameters, and the trainer pads every "
                "row to max_len",
    "bigbird": "the last blocks are global and the random blocks are drawn per block count: "
               "padding moves the global blocks onto padding and redraws the pattern",
}
# Mixers whose pattern is tied to absolute positions, so padding before the real tokens moves
# them in it (LRA pads at the end; their contract assumes real tokens first).
NO_LEFT = {
    "local": "blocks start at position 0",
    "sparse_transformer": "blocks and their summary positions start at position 0",
    "longformer": "global_positions are absolute (0: the CLS token)",
    "transformer_xl": "segments start at position 0",
    "linformer": "E and F weigh positions by their absolute index (column l)",
    "synthesizer": "the random synthetic logits are indexed by absolute position",
}


def expected(name: str, side: str) -> str | None:
  """Why mixer `name` need not be invariant on `side` ("right" or "left"), or None where it
  must be."""
  if name in LENGTH_DEPENDENT:
    return LENGTH_DEPENDENT[name]
  return NO_LEFT.get(name) if side == "left" else None


def _worst(figures: dict) -> float:
  """The largest figure of a side (nan if any is not finite)."""
  values = [v for pad in figures.values() for v in pad.values()]
  return float("nan") if not np.all(np.isfinite(values)) else max(values)


def moved(row: dict) -> list[str]:
  """The sides ("right", "left") on which some figure of `row` is above TOLERANCE."""
  return [side for side in ("right", "left") if not _worst(row[side]) <= TOLERANCE]


def leaks(row: dict) -> list[str]:
  """The sides on which `row` moves where its mixer must not (no reason declared)."""
  return [side for side in moved(row) if expected(row["mixer"], side) is None]


def verdict(row: dict) -> str:
  """"invariant", "invariant (right only)", "length-dependent" or "LEAKS (side, ...)"."""
  leaked = leaks(row)
  if leaked:
    return f"LEAKS ({', '.join(leaked)})"
  if row["mixer"] in LENGTH_DEPENDENT:
    return "length-dependent"
  return "invariant (right only)" if row["mixer"] in NO_LEFT else "invariant"


def _figure(x: float) -> str:
  """1e-07, 0.51, 0 (exactly), nan."""
  if not np.isfinite(x):
    return "nan"
  return "0" if x == 0 else f"{x:.2g}" if x >= 0.01 else f"{x:.0e}"


def _cell(row: dict, side: str, pad: int) -> str:
  """'outputs / gradients' of one case; a row read back from padding.json has its pads as
  text."""
  figures = row[side][pad] if pad in row[side] else row[side][str(pad)]
  return f"{_figure(figures['outputs'])} / {_figure(figures['gradients'])}"


def _settings_text(row: dict) -> str:
  changed = ", ".join(f"{k}={v!r}" for k, v in row["settings"].items())
  layer = f"layer_index={row['layer_index']}" if row["layer_index"] != 1 else ""
  return "; ".join(t for t in (changed, layer) if t)


def markdown(rows: list[dict], real: int = REAL, pads=PADS) -> str:
  """The table: a row per measured row, a cell per side and pad (outputs / gradients), the
  verdict and the settings given; footnotes say why a mixer is length-dependent, takes no
  left padding, needed a setting or refused."""
  notes: list[str] = []

  def note(text: str) -> str:
    if text not in notes:
      notes.append(text)
    return f"[{notes.index(text) + 1}]"

  left = [p for p in pads if p in LEFT_SHOWN]
  head = [f"right +{p}" for p in pads] + [f"left +{p}" for p in left]
  lines = ["| mixer | " + " | ".join(head) + " | verdict | settings |",
           "|---|" + "---:|" * len(head) + "---|---|"]
  for row in rows:
    if "refused" in row:
      cells = ["-"] * len(head) + [f"refused {note(row['mixer'] + ': ' + row['refused'])}"]
    else:
      why_left = expected(row["mixer"], "left") if row["mixer"] in NO_LEFT else None
      cells = [_cell(row, "right", p) for p in pads]
      if why_left and left:
        shown = 17 if 17 in left else max(left)
        mark = note(f"{row['mixer']} takes no left padding: {why_left} (measured at left "
                    f"+{shown}: {_cell(row, 'left', shown)})")
        cells += [f"n/a {mark}"] * len(left)
      else:
        cells += [_cell(row, "left", p) for p in left]
      why = LENGTH_DEPENDENT.get(row["mixer"])
      cells.append(row["verdict"] + (f" {note(row['mixer'] + ': ' + why)}" if why else ""))
    settings = _settings_text(row)
    if row.get("needed"):
      settings += f" {note(row['mixer'] + ' needs ' + row['needed'])}"
    settings = settings or "defaults"
    lines.append(f"| {row['row']} | " + " | ".join(cells) + f" | {settings} |")
  return "\n".join([_caption(real), "", *lines, "", *(f"- [{i + 1}] {t}" for i, t in
                                                     enumerate(notes))])


def _caption(real: int) -> str:
  return (f"Each cell: the largest change of the {real} real outputs / of their input "
          f"gradients (d/dx of a fixed random cotangent on the real outputs), relative to the "
          f"largest of the unpadded rows' (batch {BATCH}, width {WIDTH}, {HEADS} heads), when "
          f"the rows are padded by +N positions of random junk (scale {JUNK:g}, mask False); "
          f"+0: the same rows in a batch twice as large (float noise between two programs). "
          f"Invariant: every figure at most {TOLERANCE:g}.")
