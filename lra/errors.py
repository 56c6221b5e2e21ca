"""Errors a user can cause; the entry points print them as one line and exit non-zero.

Anything else (a bug) keeps its traceback: only validation code raises these types.
"""


class UserError(Exception):
  """A bad config, missing or malformed data: the message names the fix."""


def user_errors() -> tuple[type[Exception], ...]:
  """The error types train.py and eval.py report as one line: ours and the models'.

  models.settings is imported here, not at the top, so that data code (which imports this
  module) never imports the models package.
  """
  from models.settings import SettingError
  return (UserError, SettingError)
