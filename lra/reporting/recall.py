"""Zoology's recall chart: MQAR accuracy against the state a model carries across positions.

Zoology (Arora et al. 2023, Figure 2) and Based (Arora et al. 2024, Figure 2) plot MQAR
accuracy against model size, one line per sequence mixer: Zoology's against the width
(d_model), a panel per sequence length; Based's against the state size. Read from
HazyResearch/zoology: the state size of a model is the sum over its layers of each mixer's
`state_size(sequence_length)` at the longest test length, times 4 (bytes of float32;
zoology/model.py `_compute_state_size`, logged by zoology/logger.py); attention counts its
key-value cache 2 x d_model x L (zoology/mixers/attention.py), Mamba 2 x d_model x d_state,
sliding windows 2 x window x d_model, Hyena and long convolutions d_model x L. A point is, per
(state size, model), the run of the best accuracy over the learning-rate sweep
(experiments/paper_configs/arxiv24_based_figure2/plot.py: idxmax of valid/accuracy; Zoology's
README: "the maximum performance for each model over four learning rates").

Here: the x axis is results.json's `carried_state.total` (lra.training.run_record: each
layer's Mixer.carried_state summed over the layers), in numbers, not bytes (Zoology's
figure / 4); the model is the table's row name (lra.reporting.results.run_label), the width
config.model.emb_dim. A point is a (model, width, state size) of one data point (max_len,
num_kv_pairs), each data point a panel of its own. Of several runs at a point (learning rates
of a sweep, seeds) the one with the best validation accuracy is chosen and its test accuracy
shown: Zoology takes the maximum of the accuracy it reports (it validates on its test set);
ours chooses on the validation split and reports the test split. A run without a recorded
carried_state (from before it was recorded, or a mixer that does not declare it) is left out,
in a warning, as is one whose recorded total or width is no positive integer (an impossible
figure, named as the accuracy table names one).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from lra import paths
from lra.reporting import charts, files
from lra.reporting.axes import log_ticks, steps_text
from lra.reporting.charts import model_style
from lra.reporting.numbers import finite, fmt, pct
from lra.reporting.paper import model_order, model_title
from lra.reporting import results
from lra.rules import is_int

CHOICE = ("Each point: of the runs of one model, width and state size on one data point "
          "(learning rates of a sweep, seeds), the one with the best validation accuracy, and "
          "its test accuracy (Zoology keeps each model's best accuracy over its learning-rate "
          "sweep).")
STATE = ("State size: the numbers per sequence the model's mixers carry from one position to "
         "the next, summed over the layers (results.json carried_state; Zoology's state size is "
         "the same count in bytes of float32, x 4).")


def _state(result: dict) -> dict | None:
  """results.json's carried_state when it holds a usable count (a positive whole total and
  width)."""
  state = result.get("carried_state")
  if isinstance(state, dict) and _impossible(state) is None:
    return state
  return None


def _impossible(state: dict) -> str | None:
  """Why a recorded carried_state cannot be a point (a total or width that is not a positive
  integer: an edited results.json, an outside mixer's count), None when it can."""
  for key in ("total", "width"):
    value = state.get(key)
    if not is_int(value) or value < 1:
      return f"carried_state {key}={value!r} is not a positive integer"
  return None


def read_runs(workdirs: list[str], warnings: list[str]) -> list[dict]:
  """Every finished MQAR run under `workdirs` that recorded its carried state, with "workdir"
  and "model" (its row name, results.read_results); a run that cannot be read or drawn is a
  line in `warnings`."""
  runs = []
  for result in results.read_results(workdirs, warnings):
    if result["task"] != "mqar":
      continue  # not a recall run: not for this chart
    state = result.get("carried_state")
    if state is None:
      warnings.append(f"{result['path']}: no carried_state (a run from before "
                      "results.json recorded it, or a mixer that does not declare "
                      "Mixer.carried_state); left out of the recall chart")
      continue
    why = _impossible(state) if isinstance(state, dict) else "carried_state is not a JSON object"
    if why is not None:  # an impossible figure is named and skipped, as the accuracy table does
      warnings.append(f"{result['path']}: {why}; left out of the recall chart")
      continue
    runs.append(result)
  return runs


def _per_layer(state: dict) -> list[int] | None:
  layers = state.get("per_layer")
  return layers if isinstance(layers, list) and layers and all(map(is_int, layers)) else None


def _data_point(result: dict) -> tuple[int | None, int | None]:
  """(max_len, num_kv_pairs) of the run's MQAR data, as its config records them."""
  data = (result.get("config") or {}).get("data") or {}
  return data.get("max_len"), data.get("num_kv_pairs")


def recall_points(runs: list[dict]) -> list[dict]:
  """A point per (data point, model, width, state size), by CHOICE; in the reports' model
  order, then by state size."""
  groups: dict[tuple, list[dict]] = {}
  for r in runs:
    state = _state(r)
    groups.setdefault((_data_point(r), r["model"], state["width"], state["total"]), []
                      ).append(r)
  points = []
  for (data, model, width, total), group in groups.items():
    # max() keeps the first of equals: the runs' sorted order decides ties.
    best = max(group, key=lambda r: finite(r.get("best_val_accuracy")) or -1.0)
    points.append({"max_len": data[0], "num_kv_pairs": data[1], "model": model,
                   "width": width, "state_size": total,
                   "per_layer": _per_layer(_state(best)),
                   "test_accuracy": pct(best["test_accuracy"]),
                   "val_accuracy": pct(best.get("best_val_accuracy")),
                   "runs": len(group), "workdir": best["workdir"],
                   "learning_rate": (best.get("config") or {}).get("learning_rate"),
                   "num_train_steps": best.get("num_train_steps")})
  rank = {m: i for i, m in enumerate(model_order({p["model"] for p in points}))}
  return sorted(points, key=lambda p: (_panel_key((p["max_len"], p["num_kv_pairs"])),
                                       rank[p["model"]], p["state_size"], p["width"]))


def _panel_key(panel: tuple[Any, Any]) -> tuple[int, ...]:
  return tuple(x if is_int(x) else -1 for x in panel)


def panels(points: list[dict]) -> list[tuple[Any, Any]]:
  """The data points (max_len, num_kv_pairs), each a panel of the chart, shortest first."""
  found = {(p["max_len"], p["num_kv_pairs"]) for p in points}
  return sorted(found, key=_panel_key)


def _panel_title(panel: tuple[Any, Any]) -> str:
  length, pairs = panel
  return f"MQAR, {length if length is not None else '?'} tokens, " \
         f"{pairs if pairs is not None else '?'} pairs"


def _steps(steps: int | None) -> str:
  return "-" if steps is None else f"{steps:,}"


def recall_markdown(points: list[dict]) -> str:
  """The chart's table: a row per point, a table per data point, then how points were made."""
  out = []
  for panel in panels(points):
    out += [f"### {_panel_title(panel)}", "",
            "| Model | Width | State size | Per layer | Test acc. (%) | Val acc. (%) | Runs | "
            "Learning rate | Steps | Run |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for p in points:
      if (p["max_len"], p["num_kv_pairs"]) != panel:
        continue
      layers = p["per_layer"] or []
      per_layer = f"{layers[0]:,}" if len(set(layers)) == 1 else " / ".join(
          f"{n:,}" for n in layers)
      out.append(f"| {model_title(p['model'])} | {p['width']} | {p['state_size']:,} | "
                 f"{per_layer} | {fmt(p['test_accuracy'])} | {fmt(p['val_accuracy'])} | "
                 f"{p['runs']} | {p['learning_rate'] if p['learning_rate'] is not None else '-'}"
                 f" | {_steps(p['num_train_steps'])} | {p['workdir']} |")
    out.append("")
  return "\n".join(out + [CHOICE, "", STATE]).rstrip() + "\n"


# Markers closer than this (points, 1/72 inch) in both directions would cover each other: they
# are set side by side, this far apart.
_GAP = 10.0


def _marker_sizes(points: list[dict]) -> dict[int, float]:
  """{width: marker size (points)}: the widths of the chart from small to large."""
  widths = sorted({p["width"] for p in points})
  return {w: 6.0 + 4.0 * i / max(len(widths) - 1, 1) for i, w in enumerate(widths)}


def _spread(places: list[tuple[float, float]], gap: float = _GAP) -> list[float]:
  """Sideways shifts (points) for markers at `places` (x, y in points) so that none covers
  another: the markers of a group that would (closer than `gap` both ways) are set side by
  side, `gap` apart, around the group's middle, in the order given; groups that then meet
  are merged, until none does."""
  groups = [[i] for i in range(len(places))]
  shifts = [0.0] * len(places)

  def clash(a: list[int], b: list[int]) -> bool:
    return any(abs(places[i][0] + shifts[i] - places[j][0] - shifts[j]) < gap - 1e-6 and
               abs(places[i][1] - places[j][1]) < gap for i in a for j in b)
  while True:
    met = next(((a, b) for a, b in itertools.combinations(range(len(groups)), 2)
                if clash(groups[a], groups[b])), None)
    if met is None:
      return shifts
    group = sorted(groups[met[0]] + groups.pop(met[1]))
    groups[met[0]] = group
    middle = sum(places[i][0] for i in group) / len(group)
    for k, i in enumerate(group):
      shifts[i] = middle + (k - (len(group) - 1) / 2) * gap - places[i][0]


def _place(ax: Any, points: list[dict]) -> tuple[list[float], float]:
  """(sideways shift in points of each of `points`, decades per point): the shifts of _spread
  at the axes' final size, the x limits widened until every marker set sideways lies inside
  them (the shifts are in points, so a wider span moves them further in data; a few rounds
  settle it)."""
  box = ax.get_window_extent()  # pixels
  wide, high = box.width * 72 / ax.figure.dpi, box.height * 72 / ax.figure.dpi  # points
  y0, y1 = ax.get_ylim()
  logs = [math.log10(p["state_size"]) for p in points]
  for _ in range(5):
    lo, hi = (math.log10(x) for x in ax.get_xlim())
    per_x = (hi - lo) / wide  # decades per point
    shifts = _spread([(u / per_x, p["test_accuracy"] * high / (y1 - y0))
                      for u, p in zip(logs, points)])
    new_lo, new_hi = lo, hi
    for _ in range(30):  # each marker _GAP inside the axes: converges while the rows fit
      per = (new_hi - new_lo) / wide
      new_lo = min(lo, *(u + (s - _GAP) * per for u, s in zip(logs, shifts)))
      new_hi = max(hi, *(u + (s + _GAP) * per for u, s in zip(logs, shifts)))
    if new_lo > lo - 1e-9 and new_hi < hi + 1e-9:  # every marker inside already
      return shifts, per_x
    ax.set_xlim(10 ** new_lo, 10 ** new_hi)
  return shifts, per_x


def _draw_panel(ax: Any, points: list[dict], sizes: dict[int, float]) -> tuple[dict, dict]:
  """A line per model through its points by state size, a marker per point sized by its width;
  markers that would cover each other set side by side (_place; the axes' size is final by
  now). Returns ({model: [(state size, accuracy, width), ...]} as drawn, {(model, width):
  sideways shift in points} of the points moved)."""
  drawn: dict[str, list] = {}
  for p in points:
    drawn.setdefault(p["model"], []).append((p["state_size"], p["test_accuracy"], p["width"]))
  rank = {m: i for i, m in enumerate(model_order(drawn))}
  order = sorted(points, key=lambda p: (p["state_size"], rank[p["model"]], p["width"]))
  shifts, per_x = _place(ax, order)
  moved = {(p["model"], p["width"]): round(float(shift), 1) for p, shift in zip(order, shifts)}
  for model in rank:
    colour, marker = model_style(model)
    line = [(x * 10 ** (moved[model, w] * per_x), y, w) for x, y, w in drawn[model]]
    ax.plot([x for x, _, _ in line], [y for _, y, _ in line], color=colour, linewidth=1.5,
            gid=model, zorder=2)
    line.sort(key=lambda point: -point[2])  # the widest first: a smaller one stays in sight
    ax.scatter([x for x, _, _ in line], [y for _, y, _ in line],
               s=[sizes[w] ** 2 for _, _, w in line], color=colour, marker=marker,
               edgecolors="white", linewidths=0.6, zorder=3)
  log_ticks(ax, "x")  # again: the limits may have widened
  return drawn, {key: shift for key, shift in moved.items() if shift}


def _legend(fig: Any, models: list[str], sizes: dict[int, float]) -> list[str]:
  """The models in their colour and marker, then the widths by marker size; the models'
  labels."""
  from matplotlib.lines import Line2D
  handles = [Line2D([], [], color=model_style(m)[0], marker=model_style(m)[1], markersize=7)
             for m in models]
  handles += [Line2D([], [], color="grey", marker="o", linestyle="", markersize=size)
              for size in sizes.values()]
  labels = [model_title(m) for m in models]
  if handles:
    fig.legend(handles, labels + [f"width {w}" for w in sizes], loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=8, labelspacing=0.9)
  return labels


def recall_chart(path, points: list[dict], title: str = "MQAR accuracy vs state size"
                 ) -> dict[str, Any]:
  """The PNG: a panel per data point, accuracy (%) against state size (log x, labelled ticks),
  a line per model in its colour of every chart, each point's marker sized by its width,
  models set side by side where their points would cover each other, the runs' training steps
  in the title. Returns what was drawn (panels, lines, shifts, each model's colour, axis labels
  and scale, title, notes), for tests."""
  import matplotlib
  plt = charts._pyplot()  # files only (Agg), as every chart
  shown = panels(points) or [(None, None)]
  fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 5), squeeze=False)
  sizes = _marker_sizes(points)
  drawn = {"panels": {}, "shifts": {}, "xlabel": "state size (numbers carried across "
           "positions, all layers; log scale)", "ylabel": "MQAR test accuracy (%)",
           "title": f"{title} ({steps_text([p['num_train_steps'] for p in points])})",
           "notes": [CHOICE, STATE, "Marker size: the width (config.model.emb_dim), larger for "
                     "wider."]}
  mine = {panel: [p for p in points if (p["max_len"], p["num_kv_pairs"]) == panel]
          for panel in shown}
  for ax, panel in zip(axes[0], shown):
    if mine[panel]:
      ax.set_xscale("log")
      states = [p["state_size"] for p in mine[panel]]
      ax.set_xlim(min(states) / 1.5, max(states) * 1.5)  # room for markers set side by side
      log_ticks(ax, "x")
    else:
      ax.text(0.5, 0.5, "no MQAR run with a recorded state size", ha="center", va="center",
              transform=ax.transAxes)
    ax.set_ylim(-2, 104)
    ax.set_title(_panel_title(panel) if panel != (None, None) else "MQAR")
    ax.set_xlabel(drawn["xlabel"])
    ax.set_ylabel(drawn["ylabel"])
    ax.grid(True, which="both", alpha=0.3)
  fig.suptitle(drawn["title"])
  fig.tight_layout()  # the axes' final size, which _draw_panel's spacing reads
  for ax, panel in zip(axes[0], shown):
    lines, shifts = _draw_panel(ax, mine[panel], sizes) if mine[panel] else ({}, {})
    drawn["panels"][_panel_title(panel)] = lines
    drawn["shifts"][_panel_title(panel)] = shifts
    drawn["xscale"] = ax.get_xscale()
    drawn.setdefault("colours", {}).update(
        {line.get_gid(): matplotlib.colors.to_hex(line.get_color()) for line in ax.get_lines()})
  if any(drawn["shifts"].values()):
    drawn["notes"].append("Markers that would cover each other are set side by side, a few "
                          "points apart (each point's state size is in recall.md).")
  drawn["legend"] = _legend(fig, model_order({p["model"] for p in points}), sizes)
  drawn["marker_sizes"] = sizes
  fig.text(0.01, -0.01, "\n".join(drawn["notes"]), fontsize=7, ha="left", va="top", wrap=True)
  charts._save(fig, path)  # `path` may be a URL (gs://...)
  return drawn


def write_recall(workdirs: list[str], out: str, warnings: list[str]) -> tuple[list[dict], str]:
  """recall.{md,json} and recall.png in `out` from the MQAR runs under `workdirs`; (points,
  the markdown). No point at all writes nothing and returns ([], "")."""
  points = recall_points(read_runs(workdirs, warnings))
  if not points:
    return [], ""
  text = recall_markdown(points)
  folder = paths.resolve(out)
  paths.write_text(folder / "recall.md", text)
  files.write_json(folder / "recall.json", {"points": points, "choice": CHOICE,
                                            "state_size": STATE})
  recall_chart(folder / "recall.png", points)
  return points, text

