"""The accelerator run's files at the end: summary.md (everything on one page, the device
named), training.json and tails.txt (the last lines of every part's output)."""
from __future__ import annotations

import json
import os
import time

from lra.commands.accelerator import speed_cells
from lra.commands.accelerator.clock import Run
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


def _case_lines(case: dict) -> list[str]:
  s = case["shape"]
  lines = [f"Batch {s['batch']}, **{s['length']} tokens**, {s['heads']} heads of "
           f"{s['head_dim']}, real lengths {s['real_lengths']} (trailing padding).", "",
           "| pair | output | dq | dk | dv | pass |", "|---|---|---|---|---|---|"]
  for p in case["pairs"]:
    if p["pass"] is None:
      lines.append(f"| {p['pair']} | {p['skipped']} | | | | skipped |")
      continue
    e = p["errors"]
    cells = " | ".join(f"{e[k]['max_rel']:.2e}" for k in ("output", "dq", "dk", "dv"))
    lines.append(f"| {p['pair']} | {cells} | {'yes' if p['pass'] else '**NO**'} |")
  cudnn = case["implementations"].get("cudnn", {})
  if "fused_kernel_in_hlo" in cudnn:
    lines += ["", f"cuDNN's fused kernel in the compiled program: {cudnn['fused_kernel_in_hlo']}"]
  return lines + [""]


def _model_lines(check: dict | None) -> list[str]:
  if not check:
    return []
  head = (f"The ListOps Transformer ({check['sizes']}), {check['tokens']} tokens, batch "
          f"{check['batch']}, real lengths {check['real_lengths']}, bfloat16, dropout off, "
          f"through the trainer's loss and {check['steps']} steps of its sharded jitted train "
          f"step: **{check['implementation']}** against dense.")
  if check["status"] != "ok":
    return [head, "", f"**Not checked**: {check['status']} (tails.txt)", ""]
  e, t = check["errors"], check["tolerance"]
  return [head, "",
          f"- loss: relative difference {e['loss']:.2e}; the {check['steps']} steps' losses "
          f"at most {e['step_losses']:.2e} apart (tolerance {t['loss']})",
          f"- whole gradient, normwise relative error against float32: "
          f"{check['implementation']} {e['grad_vs_float32']:.2e}, dense bfloat16 "
          f"{e['grad_dense_vs_float32']:.2e} (tolerance: {t['grad_factor']}x dense's, or "
          f"{t['grad']}); {check['implementation']} against dense {e['grad_vs_dense']:.2e}",
          *([f"- cuDNN's fused kernel in the trainer's compiled step: "
             f"{check['fused_kernel_in_hlo']}"] if "fused_kernel_in_hlo" in check else []),
          f"- pass: **{check['pass']}**", ""]


def _attention_lines(att: dict | None) -> list[str]:
  if not att or "cases" not in att:
    why = (att or {}).get("error", "did not run")
    return [f"The attention check did not finish: {why} (see tails.txt). **Not checked.**"]
  lines = [f"bfloat16 on {att['device_kind']} ({att['backend']}). Error = "
           f"{att['error_measure']}; tolerance {att['tolerance']['output']} (outputs), "
           f"{att['tolerance']['grad']} (gradients).", ""]
  for case in att["cases"]:
    lines += _case_lines(case)
  lines += _model_lines(att.get("model_check"))
  return lines + [f"All compared pairs pass: **{att['pass']}**"]


def _steps(c: dict) -> str:
  """Steps trained against the config's, and what the first step rate projected."""
  plan = c.get("plan") or {}
  if c["status"] == "finished":
    text = f"{c['steps_trained']} of {c['planned_num_train_steps']}"
  else:
    prog = c.get("progress", {})
    text = (f"{prog.get('step')} of {prog.get('num_train_steps')}" if prog.get("step")
            else "-")
  if plan:
    text += f"; {plan['steps_per_s']:.2f} steps/s at step {plan['step']}"
    if "projected_steps" in plan:
      text += f", projected {plan['projected_steps']}"
  return text


def _train_lines(cells: list[dict]) -> list[str]:
  lines = ["| cell | status | test acc. (%) | paper (%) | diff | steps (of the config's) | "
           "time limit (s) | wall (s) | note |", "|---|---|---|---|---|---|---|---|---|"]
  for c in cells:
    prog = c.get("progress", {})
    status = c["status"] + (f" ({c['skipped']})" if c.get("skipped") else "")
    if c.get("stopped"):
      status += f": {c['stopped']}"
    after = c.get("test_after_stop")
    if after:
      status += ("; then tested" if c["status"] == "finished" else
                 f"; the test after the stop: {after}")
    if c.get("stopped_early"):
      status += " (ended by its time limit)"
    if c["status"] != "finished":
      if prog.get("last_val_accuracy") is not None:
        status += f"; last validation {100 * prog['last_val_accuracy']:.2f}% at step " \
                  f"{prog['last_val_step']}"
      if prog.get("error"):
        status += f"; {prog['error']}"
    if c.get("status") == "finished" and c.get("this_run") is False:
      status += " (an earlier run's)"
    note = c["note"] + (f"; **deviation**: {c['deviation']}" if c.get("deviation") else "")
    lines.append(f"| {c['cell']} | {status} | {_fmt(c.get('test_accuracy'))} | "
                 f"{_fmt(c['paper_test_accuracy'])} | {_fmt(c.get('difference_to_paper'))} | "
                 f"{_steps(c)} | {_fmt(c.get('max_train_time_s'), 0)} | "
                 f"{_fmt(c.get('wall_s'), 0)} | {note} |")
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
  skipped = [c["cell"] for c in cells
             if c["status"] != "finished" or not c.get("all_steps_trained", True)]
  out += ["## Skipped or unfinished for time", ""]
  if not skipped and not speed_skipped:
    out.append("Nothing: every part finished.")
  else:
    if speed_skipped:
      out.append(f"- speed: {len(speed_skipped)} (model, length) cells not measured "
                 f"(listed under the speed table)")
    for name in skipped:
      out.append(f"- training: {name} (not all its steps, or not run)")
    out.append("")
    out.append("Running the same command again (same --work) keeps what is done, measures "
               "the missing speed cells and trains the cells ended early further.")
  return "\n".join(out) + "\n"


def training_json(dry_run: bool, cells: list[dict]) -> str:
  return json.dumps({"dry_run": dry_run, "cells": cells}, indent=1, default=str) + "\n"


def _write_tails(run: Run, out: str, cells: list[dict], speed_result: dict | None) -> None:
  """tails.txt: the last lines of every part's output (a child's stdout and stderr, each
  training cell's train.log of this run, each failed speed cell), so a failure's reason comes
  back with the files."""
  blocks = list(run.tails)
  for cell in cells:
    if cell.get("tail"):
      blocks.append((f"training {cell['cell']} (train.log)", cell.pop("tail")))
    cell.pop("tail", None)
  for row in (speed_result or {}).get("rows", []):
    if row.get("output_tail"):
      blocks.append((f"speed {row['model']} @ {row['length']}", row["output_tail"]))
  text = "".join(f"===== {name}: the last {len(lines)} lines =====\n" + "\n".join(lines) + "\n\n"
                 for name, lines in blocks)
  with open(os.path.join(out, "tails.txt"), "w", encoding="utf-8") as f:
    f.write(text or "No part printed anything.\n")


def write(args, run: Run, env, att, speed_result, cells, budget_s: float, command: str) -> None:
  """tails.txt, speed.md and speed.json (when the speed part ran), training.json, summary.md."""
  _write_tails(run, args.out, cells, speed_result)
  speed_text = speed_cells.write(speed_result, args.out) if speed_result else None
  with open(os.path.join(args.out, "training.json"), "w", encoding="utf-8") as f:
    f.write(training_json(args.dry_run, cells))
  text = summary(args.dry_run, env, att, speed_text,
                 speed_result["skipped"] if speed_result else [], cells, run.parts, budget_s,
                 time.time() - run.start, command)
  with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
    f.write(text)
