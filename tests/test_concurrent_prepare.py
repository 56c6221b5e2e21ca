"""Three processes preparing one data folder at once, as every host of a multi-host run does on
first use: all succeed, one generates, the files equal a single process's byte for byte, and
other users can read them."""
import multiprocessing
import os
import queue
import stat
import time

import numpy as np
import pytest

from lra import paths
from lra.data import listops, pathfinder, publish, record, retrieval, store, tasks

NUM_PROCS = 3
LINGER_S = 0.3  # a writer sleeps this long before writing, so all three find the data missing


def _listops_config(data_dir):
  from lra.configs import listops as listops_config
  config = listops_config.get_config("transformer")
  d = config.data
  d.data_dir, d.max_len, d.workers, d.seed = data_dir, 32, 1, 3
  d.num_train, d.num_val, d.num_test = 40, 8, 8
  d.min_length, d.max_length, d.max_depth, d.max_args = 5, 30, 3, 4
  return config


def _pathfinder_config(data_dir):
  from lra.configs import pathfinder as pathfinder_config
  config = pathfinder_config.get_config("transformer")
  d = config.data
  d.data_dir, d.size, d.level, d.num_images, d.workers, d.seed = data_dir, 32, "easy", 30, 1, 2
  return config


def _write_aan(folder):
  """A tiny release tsv_data folder: label, two ids, two texts per line."""
  os.makedirs(folder)
  for i, name in enumerate(retrieval.SPLIT_FILES.values()):
    with open(os.path.join(folder, name), "w") as f:
      for row in range(6 + i):
        f.write(f"{row % 2}.0\tid{row}\tcited{row}\t{f'paper {row} ' * (row + 1)}\tother\n")


def _lingering(fn):
  """fn, recording that it ran and sleeping first: the race window a slow generator opens."""

  def wrapped(*args, **kwargs):
    wrapped.calls += 1
    time.sleep(LINGER_S)
    return fn(*args, **kwargs)

  wrapped.calls = 0
  return wrapped


def _digest(task):
  """What a process read: every split's token rows and labels."""
  return {s: {f: np.asarray(v[:]).tobytes() for f, v in split.items()}
          for s, split in task.splits.items()}


def _linger_in_writers():
  """In a worker only: each generator or writer sleeps first and counts its calls."""
  listops.generate_split_files = _lingering(listops.generate_split_files)
  pathfinder.generate_and_prepare = _lingering(pathfinder.generate_and_prepare)
  store.SplitWriter.close = _lingering(store.SplitWriter.close)


def _run(kind, data_dir, release_dir=None):
  """One process's work: what it read (or prepared)."""
  if kind == "listops":
    return _digest(tasks.load(_listops_config(data_dir)))
  if kind == "pathfinder":
    return _digest(tasks.load(_pathfinder_config(data_dir)))
  # The data command on every host: each prepares, one at a time, never mixing files.
  return retrieval.prepare(release_dir, data_dir, max_len=48, progress=False)


def _worker(barrier, results, index, kind, data_dir, release_dir):
  os.umask(0o022)  # the usual umask, so the modes checked below do not depend on the runner's
  _linger_in_writers()
  barrier.wait()  # all start together, as the hosts of one run do
  seen = _run(kind, data_dir, release_dir)
  made = {"listops": listops.generate_split_files, "pathfinder": pathfinder.generate_and_prepare,
          "retrieval": store.SplitWriter.close}[kind].calls
  results.put((index, made, seen))


def _concurrently(kind, data_dir, release_dir=None):
  ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each, like separate hosts
  barrier, results = ctx.Barrier(NUM_PROCS), ctx.Queue()
  procs = [ctx.Process(target=_worker, args=(barrier, results, i, kind, data_dir, release_dir))
           for i in range(NUM_PROCS)]
  for p in procs:
    p.start()
  out = {}
  deadline = time.monotonic() + 60
  while len(out) < NUM_PROCS and time.monotonic() < deadline:
    try:
      index, made, seen = results.get(timeout=0.5)
    except queue.Empty:  # none yet; stop waiting once a worker has failed
      if any(p.exitcode not in (None, 0) for p in procs):
        break
      continue
    out[index] = made, seen
  for p in procs:
    p.join(timeout=60)
  assert [p.exitcode for p in procs] == [0] * NUM_PROCS
  return [out[i] for i in range(NUM_PROCS)]


def _files(root):
  """Relative path -> bytes of every file under root but the lock; also checks the modes."""
  out = {}
  for folder, _, names in os.walk(root):
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755, folder
    for name in names:
      path = os.path.join(folder, name)
      assert stat.S_IMODE(os.stat(path).st_mode) == 0o644, path
      assert not name.startswith(".tmp-"), f"temporary file left behind: {path}"
      if name not in (publish.LOCK_NAME, record.CHECKED):  # the stamps differ by folder
        with open(path, "rb") as f:
          out[os.path.relpath(path, root)] = f.read()
  return out


def _check(kind, tmp_path, release_dir=None):
  shared, single = str(tmp_path / "shared" / kind), str(tmp_path / "single" / kind)
  runs = _concurrently(kind, shared, release_dir)
  old_umask = os.umask(0o022)
  try:
    reference = _run(kind, single, release_dir)
  finally:
    os.umask(old_umask)
  for _, seen in runs:
    assert seen == reference
  expected, got = _files(single), _files(shared)
  assert sorted(got) == sorted(expected)
  for name in expected:
    assert got[name] == expected[name], name
  return [made for made, _ in runs]


def test_generated_listops(tmp_path):
  made = _check("listops", tmp_path)
  assert sorted(made) == [0, 0, 1]  # the others waited, then read it without regenerating
  assert os.path.exists(tmp_path / "shared" / "listops" / record.NAME)


def test_generated_pathfinder(tmp_path):
  made = _check("pathfinder", tmp_path)
  assert sorted(made) == [0, 0, 1]
  assert store.exists(pathfinder.prepared_dir(str(tmp_path / "shared" / "pathfinder"), "easy"),
                      tasks.SPLITS)


def test_prepared_release(tmp_path):
  release = str(tmp_path / "tsv_data")
  _write_aan(release)
  made = _check("retrieval", tmp_path, release)
  assert made == [3, 3, 3]  # every process prepared all three splits, one at a time


def test_atomic_write_failure_leaves_the_old_file(tmp_path):
  path = tmp_path / "a.txt"
  path.write_text("old")
  with pytest.raises(KeyError):
    with paths.atomic_write(path) as f:
      f.write("half")
      raise KeyError("stop")
  assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]


def test_data_dir_that_is_a_file_is_a_user_error(tmp_path):
  """A data_dir naming an existing file: one line saying so, and the file is left as it was."""
  from lra.errors import UserError
  path = tmp_path / "notes.txt"
  path.write_text("keep")
  with pytest.raises(UserError, match="is a file, not a folder; choose another data_dir"):
    tasks.load(_listops_config(str(path)))
  assert path.read_text() == "keep"
