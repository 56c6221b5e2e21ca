"""summary.md of the accelerator run: everything on one page, the device named."""
from __future__ import annotations

import json


def _fmt(x, digits: int = 2) -> str:
  return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _env_lines(env: dict | None) -> list[str]:
  if not env or "versions" not in env:
    why = (env or {}).get("error", "did not run")
    return [f"The environment could not be read: {why} (see log.txt)."]
  v = env.get("versions", {})
  cuda = env.get("cuda", {})
  plugins = ", ".join(f"{k} {v[k]}" for k in v if k.startswith("jax-cuda") and v[k])
  lines = [f"- Device: **{env.get('device_kind')}** x{env.get('device_count')} "
           f"(platform {env.get('platform')}"
           + (f", compute capability {env['compute_capability']}"
              if env.get("compute_capability") else "") + ")",
           f"- JAX {v.get('jax')}, jaxlib {v.get('jaxlib')}"
           + (f", {plugins}" if plugins else "")
           + f"; flax {v.get('flax')}, optax {v.get('optax')}, orbax {v.get('orbax-checkpoint')}",
           "- CUDA / cuDNN as JAX reports them: " + (", ".join(
               f"{k} {val}" for k, val in cuda.items()) or "none"),
           f"- nvidia-smi: {env.get('nvidia_smi') or 'not available'}",
           f"- Python {env.get('python')}, host {env.get('hostname')}, "
           f"{env.get('cpu_count')} CPUs, {env.get('date')}"]
  return lines


def _attention_lines(att: dict | None) -> list[str]:
  if not att or "pairs" not in att:
    why = (att or {}).get("error", "did not run")
    return [f"The attention check did not finish: {why} (see log.txt). **Not checked.**"]
  s = att["shape"]
  lines = [f"bfloat16 on {att['device_kind']} ({att['backend']}); batch {s['batch']}, "
           f"{s['length']} tokens, {s['heads']} heads of {s['head_dim']}, real lengths "
           f"{s['real_lengths']} (trailing padding). Error = {att['error_measure']}; "
           f"tolerance {att['tolerance']['output']} (outputs), {att['tolerance']['grad']} "
           f"(gradients).", "",
           "| pair | output | dq | dk | dv | pass |", "|---|---|---|---|---|---|"]
  for p in att["pairs"]:
    if p["pass"] is None:
      lines.append(f"| {p['pair']} | {p['skipped']} | | | | skipped |")
      continue
    e = p["errors"]
    cells = " | ".join(f"{e[k]['max_rel']:.2e}" for k in ("output", "dq", "dk", "dv"))
    lines.append(f"| {p['pair']} | {cells} | {'yes' if p['pass'] else '**NO**'} |")
  cudnn = att["implementations"].get("cudnn", {})
  if "fused_kernel_in_hlo" in cudnn:
    lines += ["", f"cuDNN's fused kernel in the compiled program: {cudnn['fused_kernel_in_hlo']}"]
  return lines + ["", f"All compared pairs pass: **{att['pass']}**"]


def _train_lines(cells: list[dict]) -> list[str]:
  lines = ["| cell | status | test acc. (%) | paper (%) | diff | steps | wall (s) | note |",
           "|---|---|---|---|---|---|---|---|"]
  for c in cells:
    prog = c.get("progress", {})
    status = c["status"] + (f" ({c['skipped']})" if c.get("skipped") else "")
    if c.get("stopped"):
      status += f": {c['stopped']}"
    if c["status"] == "finished":
      steps = c["num_train_steps"]
    else:
      steps = (f"{prog.get('step')}/{prog.get('num_train_steps')}, {prog.get('steps_per_s')} "
               f"steps/s, ETA {prog.get('eta')}" if prog.get("step") else "-")
      if prog.get("last_val_accuracy") is not None:
        status += f"; last validation {100 * prog['last_val_accuracy']:.2f}% at step " \
                  f"{prog['last_val_step']}"
      if prog.get("error"):
        status += f"; {prog['error']}"
    lines.append(f"| {c['cell']} | {status} | {_fmt(c.get('test_accuracy'))} | "
                 f"{_fmt(c['paper_test_accuracy'])} | {_fmt(c.get('difference_to_paper'))} | "
                 f"{steps} | {_fmt(c.get('wall_s'), 0)} | {c['note']} |")
  return lines


def _timeline_lines(parts: list[dict]) -> list[str]:
  lines = ["| part | planned (s) | took (s) | outcome |", "|---|---|---|---|"]
  for p in parts:
    lines.append(f"| {p['part']} | {_fmt(p.get('planned_s'), 0)} | {_fmt(p.get('took_s'), 0)} "
                 f"| {p.get('outcome', '')} |")
  return lines


def summary(dry_run: bool, env: dict | None, att: dict | None, speed_text: str | None,
            speed_skipped: list, cells: list[dict], parts: list[dict], budget_s: float,
            total_s: float, command: str) -> str:
  """The whole run on one page (markdown)."""
  device = (env or {}).get("device_kind") or "unknown device"
  title = "DRY RUN (CPU, tiny sizes; no figure here is a result)" if dry_run else "full run"
  out = [f"# Accelerator run on {device}: {title}", "",
         f"`{command}`: {total_s:.0f} s of a {budget_s:.0f} s budget.", "",
         "## Environment", "", *_env_lines(env), "",
         "## Attention implementations agree (dense, chunked, cuDNN)", "",
         *_attention_lines(att), "",
         "## Full-scale training", "", *_train_lines(cells), "",
         "## Speed (`eval.py speed`: train steps/s, ratio to the Transformer beside the "
         "paper's Table 2)", "", speed_text or "The speed part did not run.", "",
         "## Time budget", "", *_timeline_lines(parts), ""]
  skipped = [c["cell"] for c in cells if c["status"] != "finished"]
  out += ["## Skipped or unfinished for time", ""]
  if not skipped and not speed_skipped:
    out.append("Nothing: every part finished.")
  else:
    if speed_skipped:
      out.append(f"- speed: {len(speed_skipped)} (model, length) cells not measured "
                 f"(listed under the speed table)")
    for name in skipped:
      out.append(f"- training: {name}")
    out.append("")
    out.append("Running the same command again (same --work) keeps what is done, measures "
               "the missing speed cells and resumes unfinished training from its checkpoint.")
  return "\n".join(out) + "\n"


def training_json(dry_run: bool, cells: list[dict]) -> str:
  return json.dumps({"dry_run": dry_run, "cells": cells}, indent=1, default=str) + "\n"
