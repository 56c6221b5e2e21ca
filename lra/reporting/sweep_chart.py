"""The sweep chart of eval.py accuracy and the grid: test accuracy against one swept key, a
line per model (in its colour and marker of every chart, lra.reporting.charts.model_style) and
a panel per task, one PNG per swept key (sweep_KEY.png), or per linked keys that moved
together (the grid's --sweep KEY1,KEY2=(..),(..); sweep_KEY1+KEY2.png): x the value of the
first key (keys sorted, as the folder names list them: the flag's order is not recorded), the
label naming every key and each tick every key's value (one where the keys took the same value
at every point, as widths model.emb_dim = model.qkv_dim). Each point is the model's accuracy at
that value: the point chosen on validation (per seed) among those with that value, over the
other swept keys, its mean over seeds with a ± std bar (lra.reporting.sweeps.profile), as
Zoology (Arora et al. 2023) draws accuracy against the learning rate, each model at its best
width. Numbers on a log axis (a learning rate, a width) where all are positive; other values
(a string, a bool) one tick each."""
from __future__ import annotations

import itertools
from typing import Any

from lra import paths, sweep_names
from lra.reporting import charts, sweeps
from lra.reporting.axes import steps_text
from lra.reporting.paper import TASK_TITLES, model_order, model_title


def _number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: tuple, same: bool, spell=sweep_names.value_text) -> str:
  """A point's text: its value, or its linked keys' values joined by '/' (one where the keys
  all took one value at every point)."""
  return spell(value[0]) if same else "/".join(spell(v) for v in value)


def _tick(value: Any) -> str:
  return f"{value:g}" if _number(value) else sweep_names.value_text(value)


def _axis(ax: Any, values: list[tuple], same: bool) -> dict:
  """The x axis of one panel: {value text: x}, x the first key's value, log where every one
  is a positive number; else one tick per value."""
  firsts = [value[0] for value in values]
  if all(_number(v) for v in firsts):
    if all(v > 0 for v in firsts):
      ax.set_xscale("log")
    ax.set_xticks(firsts)
    ax.set_xticklabels([_text(value, same, _tick) for value in values])
    ax.minorticks_off()
    return {_text(value, same): value[0] for value in values}
  ax.set_xticks(range(len(values)))
  ax.set_xticklabels([_text(value, same) for value in values])
  return {_text(value, same): i for i, value in enumerate(values)}


# Two models' points at one value closer than _NEAR (points of %) would cover each other: then
# each model's line is set sideways, _DODGE points (1/72 inch) from the next, in the legend's
# order.
_NEAR, _DODGE = 2.5, 5.0


def _shifts(models: list[str], lines: dict[str, list[tuple[str, float]]]) -> dict[str, float]:
  """{model: sideways shift in points}: 0 for all where no two models' points at one value
  are within _NEAR of each other, else each model its own."""
  crowded = any(x == u and abs(y - v) < _NEAR for a, b in itertools.combinations(models, 2)
                for x, y in lines[a] for u, v in lines[b])
  return {m: (i - (len(models) - 1) / 2) * _DODGE if crowded else 0.0
          for i, m in enumerate(models)}


def _panel(ax: Any, rows: list[dict], keys: tuple[str, ...]) -> tuple[dict, bool]:
  """One task's panel: a line per model; returns ({model: [(value text, test %)]}, whether
  the lines were set sideways)."""
  from matplotlib.transforms import ScaledTranslation  # matplotlib only where a chart is drawn
  profiles = {row["model"]: sweeps.profile(row, keys) for row in rows}
  found = {tuple(map(sweep_names.value_text, v)): v for p in profiles.values() for v, *_ in p}
  values = sorted(found.values(), key=lambda vs: [sweeps._order(v) for v in vs])
  same = all(len(set(map(sweep_names.value_text, value))) == 1 for value in values)
  where = _axis(ax, values, same)
  models = model_order(list(profiles))
  shifts = _shifts(models, {m: [(_text(v, same), y) for v, y, _, _ in profiles[m]]
                            for m in models})
  drawn = {}
  for model in models:
    points = profiles[model]
    colour, marker = charts.model_style(model)
    xs = [where[_text(v, same)] for v, *_ in points]
    ys = [y for _, y, _, _ in points]
    # Set sideways by its few points, where models' points would cover each other.
    moved = ax.transData + ScaledTranslation(shifts[model] / 72, 0, ax.figure.dpi_scale_trans)
    ax.plot(xs, ys, color=colour, marker=marker, label=model_title(model), linewidth=1.5,
            transform=moved)
    bars = [(x, y, s) for x, (_, y, s, _) in zip(xs, points) if s is not None]
    if bars:
      bx, by, bs = zip(*bars)
      ax.errorbar(bx, by, yerr=bs, fmt="none", ecolor=colour, elinewidth=1, capsize=3,
                  transform=moved)
    # A line set sideways is not counted in the limits by itself: its points and bars' ends are.
    ax.update_datalim([(x, y + d * (sd or 0.0)) for x, (_, y, sd, _) in zip(xs, points)
                       for d in (-1, 1)])
    drawn[model] = [(_text(v, same), y) for v, y, _, _ in points]
  if any(shifts.values()):  # room at the sides for the outermost lines set sideways
    wide = ax.get_window_extent().width * 72 / ax.figure.dpi  # points, before the layout
    ax.margins(x=(max(map(abs, shifts.values())) + 8) / (0.8 * wide))
  ax.autoscale_view()
  rates = [row["majority_rate"] for row in rows if row.get("majority_rate") is not None]
  if rates:  # where always answering the majority class scores
    charts._baseline_line(ax, max(rates), "majority class")
  ax.set_xlabel((" = " if same else " / ").join(keys) +
                (" (log scale)" if ax.get_xscale() == "log" else ""))
  ax.set_ylabel("test accuracy (%)")
  ax.grid(True, alpha=0.3)
  return drawn, any(shifts.values())


def sweep_chart(path, rows: list[dict], keys: str | tuple[str, ...]) -> dict[str, Any]:
  """One PNG: test accuracy against a swept key, or linked keys (sweeps.axes) drawn against the
  first one's value and labelled with all, a panel per task of `rows` (sweeps.sweep_rows, those
  that swept `keys`). Returns what was drawn ({task: {model: [(value text, test %)]}}, the x
  scale and label per task), for tests."""
  keys = (keys,) if isinstance(keys, str) else tuple(keys)
  plt = charts._pyplot()
  tasks = list(dict.fromkeys(row["task"] for row in rows))
  fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 5), squeeze=False)
  drawn: dict[str, Any] = {"lines": {}, "xscale": {}, "xlabel": {}}
  shifted = False
  for ax, task in zip(axes[0], tasks):
    drawn["lines"][task], moved = _panel(ax, [r for r in rows if r["task"] == task], keys)
    shifted = shifted or moved
    drawn["xscale"][task] = ax.get_xscale()
    drawn["xlabel"][task] = ax.get_xlabel()
    ax.set_title(TASK_TITLES.get(task, task))
    ax.legend(fontsize=8)
  others = sorted({k for row in rows for k in row["keys"]} - set(keys))
  over = f" (over {', '.join(others)})" if others else ""
  steps = [run.get("num_train_steps") for row in rows for point in row["points"]
           for run in point["runs"]]
  drawn["title"] = f"Test accuracy vs {' / '.join(keys)} ({steps_text(steps)})"
  fig.suptitle(drawn["title"])
  fig.tight_layout()
  drawn["note"] = (f"Each value: the point of best validation accuracy among those with that "
                   f"value{over}, per seed; the mean over seeds, bars \u00b1 std." +
                   (" Where models' points would cover each other, each model's line is set "
                    "a few points sideways, in the legend's order." if shifted else ""))
  fig.text(0.01, -0.01, drawn["note"], fontsize=8, ha="left", va="top", wrap=True)
  charts._save(fig, path)
  return drawn


def write_charts(table: dict, out) -> list[str]:
  """sweep_KEY.png in the folder `out` for every key swept in the accuracy table's sweeps
  (table["sweeps"]), sweep_KEY1+KEY2.png for linked keys that moved together (one chart per
  linked --sweep); the paths written ([] without a sweep)."""
  rows = table.get("sweeps") or []
  written = []
  for keys in sweeps.axes(rows):
    path = paths.resolve(out) / f"sweep_{'+'.join(keys)}.png"
    sweep_chart(path, [row for row in rows if set(keys) <= set(row["keys"])], keys)
    written.append(str(path))
  return written
