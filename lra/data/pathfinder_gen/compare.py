"""Our Pathfinder images beside a reference sample (the original generator's): statistics side
by side, and classifiers asked to tell the two apart (0.5 = indistinguishable).

`python -m lra.data.pathfinder_gen --compare LEVEL_DIR` runs it (see __main__.py). The reference
folder has the release layout: `<level_dir>/metadata/<n>.txt` (or `.npy`) text lines
`imgs/<n> sample_<i>.png <i> <label> ...`, the PNGs under `imgs/<n>/`, and optionally
`markers.json` ({"<n>/<i>": [[row, col], [row, col]]}: origin marker, then terminal marker).

The classifiers are in lra.data.pathfinder_gen.classify.
"""

from __future__ import annotations

import json
import math
import os
import platform

import numpy as np
from PIL import Image

from lra.data.pathfinder_gen import stats
from lra.data.pathfinder_gen.classify import cnn_accuracy, features, logistic_accuracy
from lra.data.pathfinder_gen.params import LEVEL_FOLDERS
from lra.errors import UserError

FOLDER_LEVELS = {folder: level for level, folder in LEVEL_FOLDERS.items()}


def _metadata_files(level_dir: str) -> list[str]:
  """metadata/<n>.txt where it exists, else metadata/<n>.npy, in numeric order."""
  meta_dir = os.path.join(level_dir, "metadata")
  if not os.path.isdir(meta_dir):
    raise UserError(f"{level_dir}: no metadata folder; expected a Pathfinder level folder "
                    f"(<level_dir>/metadata/<n>.txt or .npy, <level_dir>/imgs/<n>/*.png)")
  stems = {os.path.splitext(f)[0] for f in os.listdir(meta_dir)
           if f.endswith((".txt", ".npy"))}
  files = []
  for stem in sorted(stems, key=lambda s: (len(s), s)):
    txt = os.path.join(meta_dir, stem + ".txt")
    files.append(txt if os.path.exists(txt) else os.path.join(meta_dir, stem + ".npy"))
  if not files:
    raise UserError(f"{meta_dir}: no metadata files (<n>.txt or <n>.npy)")
  return files


def _metadata_lines(path: str) -> list[str]:
  """The lines of a metadata file: text, or a binary np.save array of strings (one row a line),
  as the original generator writes it."""
  with open(path, "rb") as f:
    data = f.read()
  if data.startswith(b"\x93NUMPY"):
    try:
      rows = np.load(path, allow_pickle=False)
    except ValueError as e:
      raise UserError(f"{path}: unreadable metadata array ({e})") from None
    return [" ".join(str(v) for v in np.atleast_1d(row)) for row in rows]
  return data.decode("utf-8", "replace").splitlines()


def read_items(level_dir: str) -> list[tuple[str, str, int]]:
  """(png path, markers.json key "<n>/<i>", label) of every image listed in the metadata."""
  items = []
  for path in _metadata_files(level_dir):
    for number, raw in enumerate(_metadata_lines(path), 1):
      fields = raw.split()
      if not fields:
        continue
      if len(fields) < 4 or fields[3] not in ("0", "1") or not fields[0].startswith("imgs/"):
        raise UserError(f"{path}, line {number}: expected `imgs/<n> sample_<i>.png <i> "
                        f"<label 0 or 1> ...`, got {raw.strip()[:80]!r}")
      key = f"{fields[0][len('imgs/'):]}/{fields[1][len('sample_'):-len('.png')]}"
      items.append((os.path.join(level_dir, fields[0], fields[1]), key, int(fields[3])))
  if not items:
    raise UserError(f"{os.path.join(level_dir, 'metadata')} lists no images")
  return items


def read_markers(level_dir: str) -> dict | None:
  """{"<n>/<i>": [[row, col], [row, col]]} from <level_dir>/markers.json (or metadata/
  markers.json, or the per-folder metadata/markers_<n>.json joined); None when there is none."""
  meta_dir = os.path.join(level_dir, "metadata")
  for path in (os.path.join(level_dir, "markers.json"), os.path.join(meta_dir, "markers.json")):
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        return json.load(f)
  parts = sorted(f for f in os.listdir(meta_dir) if f.startswith("markers_")
                 and f.endswith(".json"))
  if not parts:
    return None
  table_ = {}
  for name in parts:
    with open(os.path.join(meta_dir, name), encoding="utf-8") as f:
      table_.update(json.load(f))
  return table_


def read_reference(level_dir: str, limit: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
  """(images uint8 [N, S, S], labels [N], markers int [N, 2, 2] or None, skipped) of a level
  folder: the first `limit` images listed whose PNG (and marker entry, where there is a marker
  file) exists; `skipped` counts the listed images passed over for lack of them."""
  if not os.path.isdir(level_dir):
    raise UserError(f"{level_dir}: no such folder")
  items = read_items(level_dir)
  marker_table = read_markers(level_dir)
  images, labels, markers, skipped = [], [], [], 0
  for path, key, label in items:
    if limit is not None and len(images) >= limit:
      break
    if not os.path.exists(path) or (marker_table is not None and key not in marker_table):
      skipped += 1
      continue
    try:
      with Image.open(path) as image:
        images.append(np.asarray(image.convert("L"), np.uint8))
    except (OSError, ValueError) as e:
      raise UserError(f"{path}: not a readable PNG image ({e})") from None
    labels.append(label)
    if marker_table is not None:
      markers.append(marker_table[key])
  if not images:
    raise UserError(f"{level_dir}: none of the images its metadata lists exists")
  if len({im.shape for im in images}) != 1 or images[0].shape[0] != images[0].shape[1]:
    raise UserError(f"{level_dir}: images are not all square and of one size")
  marker_array = np.floor(np.asarray(markers, np.float64)).astype(np.int64) if markers else None
  return np.stack(images), np.asarray(labels, np.int64), marker_array, skipped


def level_of(level_dir: str) -> str | None:
  """The level name of a folder named as the release names it (curv_baseline -> easy)."""
  return FOLDER_LEVELS.get(os.path.basename(os.path.normpath(level_dir)))


def generate_ours(size: int, level: str, n: int, seed: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """n images of our generator: (images [n, S, S], labels [n], marker pixels int [n, 2, 2]).
  Marker centres are floored, so float pixel coordinates (centres at .5) and integer pixels
  give the same pixel."""
  from lra.data.pathfinder_gen import params_for, sample
  params = params_for(size, level)
  images, labels, markers = [], [], []
  for k in range(n):
    image, label, geometry = sample(params, seed, k)
    images.append(image)
    labels.append(label)
    markers.append(np.floor(np.asarray(geometry["markers"], np.float64)).astype(np.int64))
  return np.stack(images), np.asarray(labels, np.int64), np.stack(markers)


def table(reference: dict, ours: dict) -> str:
  """Markdown: statistic, reference mean, ours mean, difference in combined standard errors
  (|z| > 4 in bold)."""
  lines = ["| statistic | reference | ours | (ours - ref) / SE |", "|---|---:|---:|---:|"]
  for name, ref in reference["stats"].items():
    if name not in ours["stats"]:
      continue
    our = ours["stats"][name]
    if ref["mean"] is None or our["mean"] is None:
      lines.append(f"| {name} | {ref['mean']} | {our['mean']} | - |")
      continue
    se = stats.standard_error(ref, our)
    diff = our["mean"] - ref["mean"]
    z = diff / se if se > 0 else (0.0 if diff == 0 else math.inf)
    cell = f"{z:+.1f}" if math.isfinite(z) else "inf"
    lines.append(f"| {name} | {ref['mean']:.4g} | {our['mean']:.4g} | "
                 f"{f'**{cell}**' if abs(z) > 4 else cell} |")
  return "\n".join(lines)


def reference_entry(summary: dict, size: int, level: str, level_dir: str, generator: str
                    ) -> dict:
  """The JSON entry of one reference sample: numbers only, with where they came from."""
  import PIL
  import scipy
  n = max((s["n"] for s in summary["stats"].values()), default=0)
  return {"size": size, "level": level, "sample_size": n, "generator": generator,
          "source": os.path.basename(os.path.normpath(level_dir)),
          "versions": {"python": platform.python_version(), "numpy": np.__version__,
                       "scipy": scipy.__version__, "pillow": PIL.__version__},
          "marker_half_width": stats.marker_half(size),
          "stats": summary["stats"], "marker_patch": summary["marker_patch"]}


def _check_folder(path: str) -> None:
  if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
    raise UserError(f"{path}: its folder does not exist; create it or choose another file")


def write_reference(path: str, key: str, entry: dict) -> None:
  """Sets `key` ("<size>_<level>") of the JSON file at `path` (a dict; created if missing)."""
  _check_folder(path)
  table_ = {}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      table_ = json.load(f)
    if not isinstance(table_, dict):
      raise UserError(f"{path}: expected a JSON object keyed '<size>_<level>'")
  table_[key] = entry
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(table_, f, indent=1, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


def _finite(summary_stats: dict) -> dict:
  """NaN means (a statistic no image had) as null, so the JSON file stays strict JSON."""
  return {name: {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in s.items()} for name, s in summary_stats.items()}


def compare(level_dir: str, *, size: int | None = None, level: str | None = None,
            n: int | None = None, seed: int = 0, ref_limit: int | None = None,
            cnn: bool = False, write: str | None = None, generator: str | None = None,
            log=print) -> dict:
  """Reads the reference folder, generates n of ours (as many as the reference by default),
  prints the side-by-side table and the classifier accuracies; optionally writes the reference
  statistics to `write` under "<size>_<level>". Returns the numbers printed."""
  import time
  if write:
    _check_folder(write)
  start = time.perf_counter()
  ref_images, ref_labels, ref_markers, skipped = read_reference(level_dir, ref_limit)
  found_size = ref_images.shape[1]
  size = size or found_size
  level = level or level_of(level_dir)
  if size != found_size:
    raise UserError(f"{level_dir}: images are {found_size}x{found_size}, not {size}x{size}")
  if level is None:
    raise UserError(f"{level_dir}: cannot tell the level from the folder name; pass --level")
  from lra.data.pathfinder_gen import SIZES
  if size not in SIZES:
    raise UserError(f"{level_dir}: {size}x{size} images; our generator makes sizes "
                    f"{', '.join(map(str, SIZES))}")
  read_s = time.perf_counter() - start
  start = time.perf_counter()
  images, labels, markers = generate_ours(size, level, n or len(ref_images), seed)
  ours_s = time.perf_counter() - start
  if ref_markers is None:
    markers = None
  reference = summarise(ref_images, ref_labels, ref_markers)
  ours = summarise(images, labels, markers)
  log(f"pathfinder{size} {level}: reference {len(ref_images)} images from {level_dir} "
      f"(read in {read_s:.1f} s{f'; {skipped} listed without PNG or marker' if skipped else ''})"
      f", ours {len(images)} (seed {seed}, generated in {ours_s:.1f} s)")
  if ref_markers is None:
    log("no marker file in the reference folder: marker statistics left out")
  log(table(reference, ours))
  start = time.perf_counter()
  result = {"size": size, "level": level, "n_reference": len(ref_images), "n_ours": len(images),
            "logistic": logistic_accuracy(features(ref_images, ref_markers),
                                          features(images, markers), seed=seed)}
  log(f"logistic regression on image statistics, 5-fold CV: accuracy "
      f"{result['logistic']:.3f} ({time.perf_counter() - start:.1f} s; 0.5 = "
      f"indistinguishable)")
  if cnn:
    start = time.perf_counter()
    result["cnn"] = cnn_accuracy(ref_images, images, seed=seed)
    log(f"CNN on raw pixels, 80/20 split: accuracy {result['cnn']:.3f} "
        f"({time.perf_counter() - start:.1f} s)")
  if write:
    entry = reference_entry(reference, size, level, level_dir,
                            generator or f"reference images in {os.path.abspath(level_dir)}")
    write_reference(write, f"{size}_{level}", entry)
    log(f"reference statistics written to {write} under '{size}_{level}'")
  result.update(reference=reference, ours=ours)
  return result


def summarise(images: np.ndarray, labels: np.ndarray, markers: np.ndarray | None) -> dict:
  """stats.summarise with NaN means as null (strict JSON)."""
  summary = stats.summarise(images, labels, markers)
  return {"stats": _finite(summary["stats"]), "marker_patch": summary["marker_patch"]}
