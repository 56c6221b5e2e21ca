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
in a warning.
"""
from __future__ import annotations

import io
from typing import Any

from lra import paths
from lra.reporting import files
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
  """results.json's carried_state when it holds a usable count (a whole total and width)."""
  state = result.get("carried_state")
  if isinstance(state, dict) and is_int(state.get("total")) and is_int(state.get("width")):
    return state
  return None


def read_runs(workdirs: list[str], warnings: list[str]) -> list[dict]:
  """Every finished MQAR run under `workdirs` that recorded its carried state, with "workdir"
  and "model" (its row name, results.read_results); a run that cannot be read or drawn is a
  line in `warnings`."""
  runs = []
  for result in results.read_results(workdirs, warnings):
    if result["task"] != "mqar":
      continue  # not a recall run: not for this chart
    if _state(result) is None:
      warnings.append(f"{result['workdir']}/results.json: no carried_state (a run from before "
                      "results.json recorded it, or a mixer that does not declare "
                      "Mixer.carried_state); left out of the recall chart")
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
                   "learning_rate": (best.get("config") or {}).get("learning_rate")})
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


def recall_markdown(points: list[dict]) -> str:
  """The chart's table: a row per point, a table per data point, then how points were made."""
  out = []
  for panel in panels(points):
    out += [f"### {_panel_title(panel)}", "",
            "| Model | Width | State size | Per layer | Test acc. (%) | Val acc. (%) | Runs | "
            "Learning rate | Run |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for p in points:
      if (p["max_len"], p["num_kv_pairs"]) != panel:
        continue
      layers = p["per_layer"] or []
      per_layer = f"{layers[0]:,}" if len(set(layers)) == 1 else " / ".join(
          f"{n:,}" for n in layers)
      out.append(f"| {model_title(p['model'])} | {p['width']} | {p['state_size']:,} | "
                 f"{per_layer} | {fmt(p['test_accuracy'])} | {fmt(p['val_accuracy'])} | "
                 f"{p['runs']} | {p['learning_rate'] if p['learning_rate'] is not None else '-'}"
                 f" | {p['workdir']} |")
    out.append("")
  return "\n".join(out + [CHOICE, "", STATE]).rstrip() + "\n"


def _draw_panel(ax: Any, points: list[dict]) -> dict[str, list]:
  """A line per model through its points by state size, each point labelled with its width;
  returns {model: [(state size, accuracy, width), ...]} as drawn."""
  drawn: dict[str, list] = {}
  for p in points:
    drawn.setdefault(p["model"], []).append((p["state_size"], p["test_accuracy"], p["width"]))
  for model, line in drawn.items():
    colour, marker = model_style(model)
    xs, ys, _ = zip(*line)
    ax.plot(xs, ys, color=colour, marker=marker, label=model_title(model), linewidth=1.5,
            markersize=6, gid=model)
    for x, y, w in line:
      ax.annotate(f"{w}", (x, y), xytext=(0, 5), textcoords="offset points", ha="center",
                  fontsize=6, color=colour)
  return drawn


def recall_chart(path, points: list[dict], title: str = "MQAR accuracy vs state size"
                 ) -> dict[str, Any]:
  """The PNG: a panel per data point, accuracy (%) against state size (log x), a line per
  model in its colour of every chart, each point labelled with its width. Returns what was
  drawn (panels, lines, each model's colour, axis labels and scale, notes), for tests."""
  import matplotlib
  matplotlib.use("Agg")  # files only, as lra.reporting.charts draws
  import matplotlib.pyplot as plt
  shown = panels(points) or [(None, None)]
  fig, axes = plt.subplots(1, len(shown), figsize=(5.5 * len(shown), 5), squeeze=False)
  drawn = {"panels": {}, "xlabel": "state size (numbers carried across positions, all layers)",
           "ylabel": "MQAR test accuracy (%)", "notes": [CHOICE, STATE, "Point labels: width "
                                                         "(config.model.emb_dim)."]}
  for ax, panel in zip(axes[0], shown):
    lines = _draw_panel(ax, [p for p in points if (p["max_len"], p["num_kv_pairs"]) == panel])
    drawn["panels"][_panel_title(panel)] = lines
    if lines:
      ax.set_xscale("log")
    else:
      ax.text(0.5, 0.5, "no MQAR run with a recorded state size", ha="center", va="center",
              transform=ax.transAxes)
    ax.set_ylim(-2, 102)
    ax.set_title(_panel_title(panel) if panel != (None, None) else "MQAR")
    ax.set_xlabel(drawn["xlabel"])
    ax.set_ylabel(drawn["ylabel"])
    ax.grid(True, which="both", alpha=0.3)
    drawn["xscale"] = ax.get_xscale()
    drawn.setdefault("colours", {}).update(
        {line.get_gid(): matplotlib.colors.to_hex(line.get_color()) for line in ax.get_lines()})
  handles, labels = {}, []
  for ax in axes[0]:
    for h, lab in zip(*ax.get_legend_handles_labels()):
      if lab not in handles:
        handles[lab] = h
        labels.append(lab)
  if labels:
    fig.legend([handles[lab] for lab in labels], labels, loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=8)
  drawn["legend"] = labels
  fig.suptitle(title)
  fig.tight_layout()
  fig.text(0.01, -0.01, "\n".join(drawn["notes"]), fontsize=7, ha="left", va="top", wrap=True)
  png = io.BytesIO()  # rendered in memory, then written: `path` may be a URL (gs://...)
  fig.savefig(png, format="png", dpi=120, bbox_inches="tight")
  plt.close(fig)
  paths.write_bytes(path, png.getvalue())
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

