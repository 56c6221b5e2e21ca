"""PNG charts for eval.py: the paper's Figure 3 bubble chart and speed/memory scaling.

matplotlib is imported inside the functions (Agg backend) so importing this module costs
nothing and works on machines without a display.
"""
from __future__ import annotations

import io
import math
import zlib
from typing import Any

from lra import paths
from lra.reporting.axes import log_ticks
from lra.reporting.numbers import memory_text
from lra.reporting.paper import MODEL_TITLES, PAPER_MODELS, model_order, model_title
from lra.reporting.speed import speed_tables

_MARKERS = "osD^vP*Xhp<>"


def _pyplot() -> Any:
  import matplotlib
  matplotlib.use("Agg")  # files only; never needs a display
  import matplotlib.pyplot as plt
  return plt


# Every model the reports name, in a fixed order: a model's place here is its colour and marker
# in every chart, whatever other models a chart shows (the paper's first, then the others).
_KNOWN = tuple(dict.fromkeys((*PAPER_MODELS, *MODEL_TITLES)))
# tab20 (its darker, more distinct half first) for the first 20 models, then colours of their
# own for the later ones (Kelly's contrasting set, darker shades of tab20b), so that no two known
# models share a colour. Append only: a colour's place is a model's colour.
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",  # tab20: the paper's 11, then up to mega_chunk
    "#393b79", "#637939", "#7b4173",  # window16, window64, transformer_rotary
    # Mamba-2, RetNet, GLA, HGRN2, DeltaNet, Gated DeltaNet, mLSTM, Based, Hyena
    "#be0032", "#875692", "#f38400", "#008856", "#000000", "#00b3b3", "#e68fac", "#8db600",
    "#654522",
    # for models added later, and by hash for the others
    "#f3c300", "#604e97", "#f99379", "#b3446c", "#dcd300", "#882d17", "#2b3d26", "#e25822",
    "#0067a5", "#f6a600", "#4b0082", "#6b8e23")
# (colour, marker) pairs that differ: the least common multiple of the two counts.
_SLOTS = math.lcm(len(_COLOURS), len(_MARKERS))


def model_style(model: str) -> tuple[Any, str]:
  """The (colour, marker) of `model` in every chart: by its place among the known models;
  another name (a mixer from outside models/, a row started from another run) by a hash of
  the name, so it too looks the same in every chart: into the colours no known model has
  while some remain (an outside model never takes a known model's colour, whichever models
  are known), else into the pairs no known model has."""
  if model in _KNOWN:
    index = _KNOWN.index(model)
    return _COLOURS[index % len(_COLOURS)], _MARKERS[index % len(_MARKERS)]
  code = zlib.crc32(model.encode())  # crc32, not hash(): the same in every process
  free = len(_COLOURS) - len(_KNOWN)
  if free > 0:
    return _COLOURS[len(_KNOWN) + code % free], _MARKERS[code % len(_MARKERS)]
  index = len(_KNOWN) + code % (_SLOTS - len(_KNOWN))
  return _COLOURS[index % len(_COLOURS)], _MARKERS[index % len(_MARKERS)]


def _style(models: list[str]) -> dict[str, tuple[Any, str]]:
  return {m: model_style(m) for m in models}


def _save(fig: Any, path) -> None:
  """`path` local or a URL (gs://...): the PNG is rendered in memory, then written."""
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=120, bbox_inches="tight")
  paths.write_bytes(path, png.getvalue())
  _pyplot().close(fig)


def _spread_labels(fig: Any, ax: Any, models: list[str], xs: dict[str, float],
                   ys: dict[str, float], radii: dict[str, float], labels: dict[str, str]
                   ) -> dict[str, tuple[float, float]]:
  """Offsets (points) that put each label right of its bubble without overlapping another.

  Greedy, top to bottom: a label that would collide with one already placed moves down.
  """
  to_points = 72.0 / fig.dpi
  line_h, char_w = 10.0, 4.9  # fontsize 8, approximately
  placed: list[tuple[float, float, float, float]] = []  # x0, x1, y_centre, height
  shifts = {}
  anchors = {m: ax.transData.transform((xs[m], ys[m])) * to_points for m in models}
  for m in sorted(models, key=lambda m: -anchors[m][1]):
    ax_pt, ay_pt = anchors[m]
    text_lines = labels[m].split("\n")
    width = char_w * max(len(t) for t in text_lines)
    height = line_h * len(text_lines) + 2
    x0 = ax_pt + radii[m] + 3
    y = ay_pt
    for _ in range(len(placed) + 1):
      clash = [p for p in placed if p[0] < x0 + width and x0 < p[1]
               and abs(p[2] - y) < (p[3] + height) / 2]
      if not clash:
        break
      y = min(p[2] - (p[3] + height) / 2 for p in clash) - 1
    placed.append((x0, x0 + width, y, height))
    shifts[m] = (radii[m] + 3, y - ay_pt)
  return shifts


def _complete_models(figures: dict[str, dict[str, float]]
                     ) -> tuple[list[str], list[str], list[str]]:
  """(every model, those with all figures finite, 'Title (no speed, ...)' for the others)."""
  everyone = model_order(set().union(*figures.values()))
  shown, left_out = [], []
  for m in everyone:
    missing = [name for name, d in figures.items()
               if d.get(m) is None or not math.isfinite(d[m])]
    if missing:
      left_out.append(f"{model_title(m)} (no {', '.join(missing)})")
    else:
      shown.append(m)
  return everyone, shown, left_out


def _bubble_limits(ax: Any, xs: list[float], ys: list[float]) -> None:
  """Room for the bubbles and the labels to their right; speed never below 0."""
  xpad = max(max(xs) - min(xs), 0.1 * max(abs(max(xs)), 1e-9)) * 0.25
  ypad = max(max(ys) - min(ys), 2.0) * 0.2
  ax.set_xlim(max(min(xs) - xpad, 0.0), max(xs) + 2 * xpad)
  ax.set_ylim(min(ys) - ypad, max(ys) + ypad)


def _baseline_line(ax: Any, accuracy: float, name: str) -> None:
  """A dashed line across the chart where guessing would score."""
  ax.axhline(accuracy, color="dimgrey", linestyle="--", linewidth=1, zorder=1)
  ax.annotate(f"{name} ({accuracy:.1f}%)", (0.01, accuracy), xycoords=("axes fraction", "data"),
              xytext=(0, 3), textcoords="offset points", fontsize=8, color="dimgrey")


def _annotate(ax: Any, models: list[str], xs: dict[str, float], ys: dict[str, float],
              labels: dict[str, str], shifts: dict[str, tuple[float, float]]) -> None:
  """Each label beside its bubble, with a thin line where it had to move away."""
  for m in models:
    dx, dy = shifts[m]
    ax.annotate(labels[m], (xs[m], ys[m]), xytext=(dx, dy), textcoords="offset points",
                va="center", fontsize=8, zorder=3,
                arrowprops=(dict(arrowstyle="-", color="grey", linewidth=0.6)
                            if abs(dy) > 4 else None))


def _points(ax: Any, models: list[str], xs: dict[str, float], ys: dict[str, float],
            areas: dict[str, float], colours: dict[str, Any],
            spread: dict[str, tuple[float, int]]) -> list[str]:
  """The bubbles, and a +- std bar through each that is a mean over seeds; returns the note
  on the bars ([] without any)."""
  for m in models:
    ax.scatter([xs[m]], [ys[m]], s=areas[m], color=colours[m], alpha=0.55, edgecolors="black",
               linewidths=0.8, clip_on=False, zorder=2)
  for m, (std, _) in spread.items():
    ax.errorbar([xs[m]], [ys[m]], yerr=[std], fmt="none", ecolor="black", elinewidth=1.2,
                capsize=4, clip_on=False, zorder=3)
  ns = sorted({n for _, n in spread.values()})
  if not ns:
    return []
  return [f"Error bars: \u00b1 the sample standard deviation over seeds (n = "
          f"{ns[0] if len(ns) == 1 else f'{ns[0]}-{ns[-1]}'}); an average's combines its "
          f"tasks' as independent, sqrt(sum of std^2) / tasks"]


def bubble_chart(path: str, accuracy_by_model: dict[str, float],
                 speed_by_model: dict[str, float], memory_by_model: dict[str, float],
                 title: str, xlabel: str = "speed (training steps/s)",
                 ylabel: str = "average accuracy (%)",
                 baseline: tuple[float, str] | None = None,
                 notes: tuple[str, ...] = (), marked: frozenset = frozenset(),
                 spread: dict[str, tuple[float, int]] | None = None) -> dict[str, Any]:
  """Accuracy against speed, bubble area proportional to memory (the paper's Figure 3).

  `baseline` (accuracy, name) is drawn as a dashed line: what chance or the majority class
  scores. Models in `marked` get a `*` (accuracy not comparable with the paper's). `spread`
  {model: (std, n)} draws a +- std error bar on a point that is a mean over n seeds. Models
  missing any of the three figures are left out and named in a note on the figure, under
  `notes`. Returns what was drawn (axis limits, labels, notes, error bars), for tests.
  """
  plt = _pyplot()
  figures = {"accuracy": accuracy_by_model, "speed": speed_by_model, "memory": memory_by_model}
  everyone, shown, left_out = _complete_models(figures)
  fig, ax = plt.subplots(figsize=(8, 6))
  style = _style(everyone)
  biggest = max((memory_by_model[m] for m in shown), default=0.0)
  # 2500 points^2 for the largest memory; area, not radius, scales with memory.
  areas = {m: 2500.0 * memory_by_model[m] / biggest if biggest > 0 else 100.0 for m in shown}
  bars = {m: v for m, v in (spread or {}).items() if m in shown}
  ends = [accuracy_by_model[m] + d * std for m, (std, _) in bars.items() for d in (-1, 1)]
  if shown:  # room for the bars' ends too
    _bubble_limits(ax, [speed_by_model[m] for m in shown],
                   [accuracy_by_model[m] for m in shown] + ([baseline[0]] if baseline else []) +
                   ends)
  if baseline is not None:
    _baseline_line(ax, *baseline)
  else:
    ax.text(0.5, 0.5, "no model has accuracy, speed and memory", ha="center",
            va="center", transform=ax.transAxes)
  bars_note = _points(ax, shown, speed_by_model, accuracy_by_model, areas,
                      {m: style[m][0] for m in shown}, bars)
  labels = {m: f"{model_title(m)}{'*' * (m in marked)}\n"
                f"{memory_text(memory_by_model[m])}" for m in shown}
  below = list(notes) + (["Left out: " + "; ".join(left_out)] if left_out else []) + (
      ["* accuracy not comparable with the paper's (see accuracy.md)"]
      if marked & set(shown) else []) + bars_note
  shifts = _spread_labels(fig, ax, shown, speed_by_model, accuracy_by_model,
                          {m: math.sqrt(areas[m] / math.pi) for m in shown}, labels)
  _annotate(ax, shown, speed_by_model, accuracy_by_model, labels, shifts)
  ax.text(0.99, 0.01, "bubble area \u221d memory", transform=ax.transAxes, ha="right",
          va="bottom", fontsize=8, color="dimgrey")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(True, alpha=0.3, zorder=0)
  if below:
    fig.text(0.01, -0.02, "\n".join(below), fontsize=7, ha="left", va="top", wrap=True)
  drawn = {"xlim": ax.get_xlim(), "ylim": ax.get_ylim(), "xlabel": xlabel, "ylabel": ylabel,
           "labels": labels, "baseline": baseline, "notes": below,
           "error_bars": {m: std for m, (std, _) in bars.items()}}
  _save(fig, path)
  return drawn


def _model_points(tables: dict, model: str
                  ) -> tuple[list[tuple[int, float]], list[tuple[int, float]], list[str]]:
  """(length, step time) and (length, GB) of a model's ok cells, and where it failed."""
  times, mems, failed = [], [], []
  for n in tables["lengths"]:
    s, mem = tables["speed"][model].get(n), tables["memory"][model].get(n)
    if s is None:
      continue
    if s["status"] != "ok":
      failed.append(f"{s['status']} at {n}")
      continue
    t = s["step_time_s"]
    if t is None and s["steps_per_s"]:
      t = 1.0 / s["steps_per_s"]
    if t is not None:
      times.append((n, t))
    if mem["gb"] is not None:
      mems.append((n, mem["gb"]))
  return times, mems, failed


def _time_bars(ax: Any, tables: dict, model: str, colour: Any) -> bool:
  """The min-max over the rounds of a model's step times as bars; whether it had any."""
  cells = [(n, c) for n, c in tables["speed"][model].items()
           if c["status"] == "ok" and c["low"] is not None]
  for n, c in cells:  # step time = 1 / steps per second: the slowest round is the top
    t = 1.0 / c["steps_per_s"]
    ax.errorbar([n], [t], yerr=[[t - 1.0 / c["high"]], [1.0 / c["low"] - t]], fmt="none",
                ecolor=colour, elinewidth=1, capsize=3)
  return bool(cells)


def _log_log_axes(axes: tuple[Any, Any], lengths: list[int], memory_unit: str = "GB") -> None:
  """Lengths as powers of two; labelled plain numbers (0.5, not 5x10^-1) on the log y axes."""
  for ax, ylabel in zip(axes, ("step time (s)", f"memory per device ({memory_unit})")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if lengths:
      ax.set_xticks(lengths)
      ax.set_xticklabels([str(n) for n in lengths])
      ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    if ax.get_lines():  # an empty panel keeps matplotlib's limits
      log_ticks(ax, "y")
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def scaling_chart(path: str, rows: list[dict], title: str = "Speed and memory vs length"
                  ) -> None:
  """Log-log step time and memory against sequence length, one line per model.

  OOM and failed points are left out of the lines; the legend says where a model stopped.
  """
  plt = _pyplot()
  tables = speed_tables(rows)
  lengths, models = tables["lengths"], tables["models"]
  style = _style(models)
  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 5.5))
  by_model = {m: _model_points(tables, m) for m in models}
  # MB when every figure is below 1 GB, as in the tables.
  small = all(gb < 1 for _, mems, _ in by_model.values() for _, gb in mems)
  unit, scale = ("MB", 1000.0) if small else ("GB", 1.0)
  bars = False
  for m in models:
    times, mems, failed = by_model[m]
    mems = [(n, gb * scale) for n, gb in mems]
    label = model_title(m) + (f" ({', '.join(failed)})" if failed else "")
    color, marker = style[m]
    for ax, points in ((ax_t, times), (ax_m, mems)):
      if points:
        ax.plot(*zip(*points), marker=marker, color=color, label=label, linewidth=1.5,
                markersize=6)
    bars = _time_bars(ax_t, tables, m, color) or bars
  measure = {("peak",): "device peak", ("compiled",): "XLA compiled analysis"}.get(
      tuple(tables["memory_measures"]), "peak where reported, else XLA compiled analysis")
  _log_log_axes((ax_t, ax_m), lengths, unit)
  ax_t.set_title("training step time" + (" (median; bars: min-max over the rounds)"
                                          if bars else ""))
  ax_m.set_title(f"memory ({measure})")
  handles, labels = ax_t.get_legend_handles_labels()
  seen = set(labels)
  for h, lab in zip(*ax_m.get_legend_handles_labels()):
    if lab not in seen:  # a model with memory but no timing still gets a legend entry
      handles.append(h)
      labels.append(lab)
  if handles:
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
  else:
    ax_t.text(0.5, 0.5, "no successful measurement", ha="center", transform=ax_t.transAxes)
  fig.suptitle(title)
  fig.tight_layout()
  _save(fig, path)


_DASHES = ("-", "--", ":", "-.")


def _run_styles(names: list[str], models: dict[str, str | None]) -> dict[str, tuple[Any, str]]:
  """(colour, dash) per run: its model's colour (model_style; a run whose model is not
  recorded by its own name's), the runs of one colour told apart by the dash."""
  styles: dict[str, tuple[Any, str]] = {}
  for name in names:
    colour = model_style(models.get(name) or name)[0]
    same = sum(c == colour for c, _ in styles.values())
    styles[name] = colour, _DASHES[same % len(_DASHES)]
  return styles


def curves_chart(path, curves: dict[str, dict[str, list]], panels: tuple[tuple[str, str], ...],
                 title: str = "Training curves",
                 models: dict[str, str | None] | None = None) -> dict[str, Any]:
  """One PNG of 2 x 2 panels (lra.reporting.curves.PANELS: train and validation loss and
  accuracy) against the step, a line per run in one style throughout, and one legend by run
  name. `curves`: {run name: {metric: [(step, value), ...]}}; `models` {run name: model}: a
  run is drawn in its model's colour of every chart, runs of one model in different dashes.
  Returns what was drawn (labels, legend, lines per panel), for tests."""
  plt = _pyplot()
  from matplotlib.lines import Line2D
  from matplotlib.ticker import MaxNLocator
  styles = _run_styles(list(curves), models or {})
  fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
  drawn = {"labels": {}, "lines": {}}
  for ax, (metric, label) in zip(axes.flat, panels):
    drawn["lines"][metric] = []
    for name, found in curves.items():
      points = found.get(metric) or []
      if points:
        steps, values = zip(*points)
        ax.plot(steps, values, color=styles[name][0], linestyle=styles[name][1], label=name,
                linewidth=1.5, marker="o" if len(points) < 30 else None, markersize=3)
        drawn["lines"][metric].append(name)
    if not drawn["lines"][metric]:
      ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.tick_params(axis="x", labelbottom=True)  # every panel says its steps
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    drawn["labels"][metric] = (ax.get_xlabel(), ax.get_ylabel())
  handles = [Line2D([], [], color=colour, linestyle=dash, linewidth=2)
             for colour, dash in styles.values()]
  fig.legend(handles, list(curves), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9,
             title="run", handlelength=3)
  drawn["legend"] = list(curves)
  fig.suptitle(title)
  fig.tight_layout()
  _save(fig, path)
  return drawn
