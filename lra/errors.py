"""Errors a user can cause; train.py prints them as one line and exits non-zero."""


class UserError(Exception):
  """A bad config, missing or malformed data: the message names the fix."""
