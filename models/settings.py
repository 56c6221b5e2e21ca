"""Mixer and encoder settings: the error a bad one raises, and the checks that raise it."""


class SettingError(Exception):
  """A model name or setting that is not valid (a user error, not a bug): one line naming the
  setting, the value and what is allowed. Raised by validation code only, when the model is
  built; the trainer reports it as one line, while any other exception keeps its traceback."""
