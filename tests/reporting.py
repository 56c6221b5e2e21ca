"""What the reporting tests share: eval.py called in-process, made-up results.json files of
the tasks' base configs on their full data, and made-up speed rows (no training, no
measurement)."""
from __future__ import annotations

import importlib
import json

EVAL = importlib.import_module("eval")


def run_eval(capsys, *args) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of `python eval.py ARGS`, called in-process."""
  try:
    EVAL.main(list(args))
    code = 0
  except SystemExit as e:
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err


def one_error_line(err: str) -> str:
  lines = [l for l in err.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), err
  return lines[0]


def paper_config(task: str, arg: str, **changes) -> dict:
  """The task config of `arg` as results.json records it, with top-level `changes`."""
  config = json.loads(json.dumps(importlib.import_module(f"lra.configs.{task}").get_config(
      arg).to_dict()))
  config.update(changes)
  return config


# (train, test) examples of each task's full data under its default config: the LRA release
# sizes (Text: 10% of IMDb's 25,000 train reviews held out; Image: CIFAR-10's train[:90%]).
FULL = {"listops": (96000, 2000), "text": (22500, 25000), "retrieval": (147086, 17437),
        "image": (45000, 10000), "pathfinder": (160000, 20000), "pathx": (160000, 20000)}


def write_result(root, name: str, task: str, test: float, val: float, config: dict,
                 **fields) -> str:
  """A finished run of `config` on the task's full data (FULL); returns its workdir."""
  run = root / name
  run.mkdir(parents=True)
  result = {"task": task, "model": config["model"]["name"], "test_accuracy": test,
            "test_loss": 1.0, "best_step": config["num_train_steps"], "best_val_accuracy": val,
            "num_train_steps": config["num_train_steps"], "test_majority_rate": 0.5,
            "test_count": FULL[task][1], "train_count": FULL[task][0], "config": config,
            **fields}
  (run / "results.json").write_text(json.dumps(result))
  return str(run)


def full_runs(root, model: str = "transformer", test: float = 0.40, val: float = 0.40):
  """Runs of `model` on all five tasks with their base configs on the full data."""
  for task in ("listops", "text", "retrieval", "image", "pathfinder"):
    write_result(root, f"{model}_{task}", task, test, val, paper_config(task, model))


def result(root, model: str, task: str, accuracy: float) -> None:
  """A finished run with a config that names only its task and model."""
  run = root / f"{model}_{task}"
  run.mkdir(parents=True)
  (run / "results.json").write_text(json.dumps({
      "task": task, "model": model, "test_accuracy": accuracy, "test_loss": 1.0,
      "test_count": 2000, "best_step": 100, "best_val_accuracy": accuracy,
      "num_train_steps": 100, "test_majority_rate": 0.1,
      "config": {"task": task, "model": {"name": model}}}))


# A speed.json of two models at one length, as `eval.py speed` writes it.
SMALL_SPEED = {"machine": {"device_kind": "cpu", "batch": 32,
                           "model_size": {"emb_dim": 256, "num_layers": 4}},
               "rows": [{"model": "transformer", "length": 1024, "status": "ok",
                         "steps_per_s": 0.02, "compiled_memory_bytes": 5 * 10**8},
                        {"model": "performer", "length": 1024, "status": "ok",
                         "steps_per_s": 0.03, "compiled_memory_bytes": 2 * 10**9}]}


def speed_row(model: str, length: int, status: str = "ok", steps: float | None = None,
              peak: int | None = None, compiled: int | None = 2 * 10**9) -> dict:
  """One row of speed.json (a cell that failed has no figures)."""
  ok = status == "ok"
  return {"model": model, "length": length, "batch": 32, "status": status,
          "steps_per_s": steps if ok else None,
          "step_time_s": 1.0 / steps if ok and steps else None,
          "compiled_memory_bytes": compiled if ok else None,
          "peak_memory_bytes": peak if ok else None,
          "flops_per_step": 4e12 if ok else None,
          "achieved_flops_per_s": 4e12 * steps if ok and steps else None,
          "matmul_peak_flops_per_s": 1e14}


SPEED_ROWS = [
    speed_row("transformer", 1024, steps=2.0),
    speed_row("performer", 1024, steps=5.0, compiled=5 * 10**8),
    speed_row("transformer", 2048, status="OOM"),
    speed_row("performer", 2048, steps=4.0),
    speed_row("reformer", 1024, status="error: XlaRuntimeError: something broke"),
    speed_row("reformer", 2048, steps=1.0, peak=3 * 10**9),
]

