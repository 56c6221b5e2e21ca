"""Errors a user can cause; the entry points print them as one line and exit non-zero.

Anything else (a bug) keeps its traceback: only validation code raises these types. Faults of
the machine (disk full, read-only, ...) are one line too: `environment_fault` finds them.
"""
import contextlib
import errno
import os
import re
import sys


class UserError(Exception):
  """A bad config, missing or malformed data: the message names the fix. The base of every
  user error, lra.rules.SettingError included (this module imports nothing of the
  project, so the models may import it)."""


# Errors of the machine or its storage, not of the code, and what to do about each.
_FREE = "free space there (or use another disk), then run the same command again"
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: _FREE, errno.EDQUOT: _FREE,
    errno.EFBIG: "raise the file size limit (ulimit -f unlimited), then run the same command "
                 "again",
    errno.EROFS: "choose a folder on a writable filesystem",
    errno.EACCES: "make it writable (and readable) for this user, or choose another folder",
    errno.EPERM: "make it writable (and readable) for this user, or choose another folder",
    errno.ENOTDIR: "a folder was expected: choose a path whose parents are folders",
    errno.EISDIR: "a file was expected, not a folder: choose another path",
    errno.EIO: "the disk reported an input/output error: check it, or use another disk",
}
# Orbax writes through TensorStore, whose errors are ValueErrors that name the OS error code.
_TENSORSTORE_CODE = re.compile(r"\[os_error_code='(\d+)'\]")
_TENSORSTORE_PATH = re.compile(r'(?:local file|Failed writing:) "([^"]+)"')


def environment_fault(error: BaseException) -> str | None:
  """One line for an error the machine caused (disk full, read-only, file size limit, ...),
  found in `error` or the errors it was raised from; None for any other error (a bug)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    code, path = None, None
    if isinstance(error, OSError):
      code, path = error.errno, error.filename
      if error.filename2:  # a rename: either end may be the problem
        path = f"{error.filename} -> {error.filename2}"
    elif isinstance(error, ValueError) and _TENSORSTORE_CODE.search(str(error)):
      code = int(_TENSORSTORE_CODE.search(str(error)).group(1))
      found = _TENSORSTORE_PATH.findall(str(error))
      path = found[-1] if found else None
    if code in ENVIRONMENT_ERRNOS:
      where = f"{path}: " if path else ""
      return f"{where}{os.strerror(code)}; {ENVIRONMENT_ERRNOS[code]}"
    error = error.__cause__  # raised from it; an error met while handling one may be a bug
  return None


@contextlib.contextmanager
def naming(path):
  """An OSError of the machine met while writing `path` names it where the OS named no file
  (write() or close() on a full disk), so that environment_fault's line says where to free
  space; any other error passes as it is."""
  try:
    yield
  except OSError as e:
    if e.filename is None and e.errno in ENVIRONMENT_ERRNOS:
      raise type(e)(e.errno, e.strerror, os.fspath(path)) from e
    raise


def fail(message: str, code: int = 1, *, now: bool = False) -> None:
  """The one way every command reports a user error or a fault: one `error:` line on stderr,
  then exit `code`. `now`: exit at once (os._exit, after a flush), where library threads that
  met the same fault would print their tracebacks while Python shuts down."""
  print(f"error: {message}", file=sys.stderr)
  if now:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
  sys.exit(code)


def run_command(run, args) -> None:
  """run(args) for a command line: a user error (a UserError, a model's SettingError included)
  or a fault of the machine (a full disk, ...) is one `error:` line and exit 1; anything else
  is a bug and keeps its traceback."""
  try:
    run(args)
  except UserError as e:
    fail(str(e))
  except OSError as e:
    if environment_fault(e) is None:
      raise
    fail(environment_fault(e))
