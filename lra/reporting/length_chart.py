"""length.png: accuracy (or scaled accuracy) against test length, a line per model and setting,
a panel per task (Grazzi et al. 2025, Figure 1; Deletang et al. 2023): the mean over seeds at
each length, and dashed in the same colour the best seed's curve; the longest trained length
marked, chance drawn. The lines are lra.reporting.lengths's; write_lengths writes the chart and
the table (`python eval.py length`)."""
from __future__ import annotations

from typing import Any

from lra import paths
from lra.reporting import charts, files, lengths
from lra.reporting.axes import steps_text
from lra.reporting.lengths import RULE, SCALED
from lra.reporting.paper import TASK_TITLES


def line_style(line: dict, first_of_model: bool) -> tuple[Any, str]:
  """(colour, marker): the model's own in every chart for its first line, and for its other
  lines (another setting) those of the line's label, so that each looks the same everywhere."""
  return charts.model_style(line["model"] if first_of_model else line["label"])


def _chance(ax: Any, line: dict) -> None:
  """Where a guess scores: 0 on the scaled axis, the chance in % on the accuracy axis."""
  if line["measure"] == SCALED:
    ax.axhline(0.0, color="dimgrey", linestyle="--", linewidth=1, zorder=1)
    ax.annotate("chance (0)", (0.01, 0.0), xycoords=("axes fraction", "data"),
                xytext=(0, 3), textcoords="offset points", fontsize=8, color="dimgrey")
  elif line["chance"] is not None:
    charts._baseline_line(ax, 100.0 * line["chance"], "chance")


def _trained(ax: Any, lines: list[dict]) -> int | None:
  """A dotted vertical line at the longest length any run trained on, where it is known."""
  ends = [line["train_lengths"]["max"] for line in lines if line["train_lengths"]]
  if not ends:
    return None
  ax.axvline(max(ends), color="grey", linestyle=":", linewidth=1.2, zorder=1)
  ax.annotate(f"longest trained ({max(ends)})", (max(ends), 1.0),
              xycoords=("data", "axes fraction"), xytext=(3, -12), textcoords="offset points",
              fontsize=8, color="grey")
  return max(ends)


def _panel(ax: Any, lines: list[dict]) -> dict[str, Any]:
  """One task's lines; returns {label: {"mean": [(length, y)], "best": [...], "colour"}}."""
  drawn, seen = {}, set()
  for line in lines:
    colour, marker = line_style(line, line["model"] not in seen)
    seen.add(line["model"])
    xs, ys = zip(*line["curve"])
    ax.plot(xs, ys, color=colour, marker=marker, markersize=4, linewidth=1.6,
            label=f"{line['label']} (mean of {len(line['seeds'])})", zorder=3)
    if len(line["seeds"]) > 1:  # one seed: its best curve is its mean
      bx, by = zip(*line["best_curve"])
      ax.plot(bx, by, color=colour, linestyle="--", linewidth=1.0, zorder=2)
    drawn[line["label"]] = {"mean": list(line["curve"]), "best": list(line["best_curve"]),
                            "colour": colour}
  how = lines[0]["measure"]
  _chance(ax, lines[0])
  drawn_trained = _trained(ax, lines)
  ax.set_xlabel("test length")
  ax.set_ylabel("scaled accuracy (0 = chance, 1 = perfect)" if how == SCALED
                else "test accuracy (%)")
  if how == SCALED:  # below chance is negative: shown down to the lowest point
    lowest = min(y for line in lines for _, y in (*line["curve"], *line["best_curve"]))
    ax.set_ylim(min(-0.1, lowest - 0.05), 1.05)
  else:
    ax.set_ylim(-2, 104)
  ax.grid(True, alpha=0.3)
  return {"lines": drawn, "trained": drawn_trained, "ylabel": ax.get_ylabel()}


def length_chart(path, lines: list[dict]) -> dict[str, Any]:
  """The PNG of `lines` (lengths.length_lines): a panel per task, the legend below each, the
  runs' training steps in the title, how the lines are made under the chart. Returns what was
  drawn per task (each line's mean and best curves and colour, the trained length, the y
  label) and the title, for tests."""
  plt = charts._pyplot()
  tasks = list(dict.fromkeys(line["task"] for line in lines))
  fig, axes = plt.subplots(1, len(tasks), figsize=(7 * len(tasks), 5.5), squeeze=False)
  drawn: dict[str, Any] = {"panels": {}}
  for ax, task in zip(axes[0], tasks):
    drawn["panels"][task] = _panel(ax, [line for line in lines if line["task"] == task])
    ax.set_title(TASK_TITLES.get(task, task))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
  steps = [n for line in lines for n in line["num_train_steps"]]
  drawn["title"] = f"Length generalisation ({steps_text(steps)})"
  fig.suptitle(drawn["title"])
  fig.tight_layout()
  drawn["note"] = "Solid: the mean over seeds; dashed: the best seed. " + RULE
  fig.text(0.01, -0.01, drawn["note"], fontsize=7, ha="left", va="top", wrap=True)
  charts._save(fig, path)
  return drawn


def write_lengths(runs: list[dict], out, wanted: str = SCALED) -> tuple[list[dict], str]:
  """length.{md,json,png} in the folder `out` of `runs` (lengths.read_runs); (lines, the
  markdown). No run writes nothing: ([], "")."""
  lines = lengths.length_lines(runs, wanted)
  if not lines:
    return [], ""
  text = lengths.length_markdown(lines)
  folder = paths.resolve(out)
  paths.write_text(folder / "length.md", text)
  files.write_json(folder / "length.json", {"lines": lines, "rule": RULE})
  length_chart(folder / "length.png", lines)
  return lines, text
