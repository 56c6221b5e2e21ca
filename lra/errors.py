"""Errors a user can cause; the entry points print them as one line and exit non-zero.

Anything else (a bug) keeps its traceback: only validation code raises these types.
"""
import sys


class UserError(Exception):
  """A bad config, missing or malformed data: the message names the fix."""


def user_errors() -> tuple[type[Exception], ...]:
  """The error types train.py and eval.py report as one line: ours and the models'.

  models.settings is imported here, not at the top, so that data code (which imports this
  module) never imports the models package.
  """
  from models.settings import SettingError
  return (UserError, SettingError)


def run_command(run, args, errors: tuple[type[Exception], ...] = (UserError,)) -> None:
  """run(args) for a command line: a user error (`errors`) is one `error:` line and exit 1;
  anything else is a bug and keeps its traceback."""
  try:
    run(args)
  except errors as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
