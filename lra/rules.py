"""The value rules every setting is checked by (Int, Float, Choice, Bool, Ints), and the error a
bad one raises. Mixers (their fields), the encoder (models/settings.py EncoderConfig), the
trainer (lra/training/options.py) and the data settings declare their rules with these; the
reports read numbers with is_int / is_real. A leaf like lra/errors.py: it imports nothing else
of the project. Each rule also lists values it rejects (`bad_values`), so one test can try them
all. Plain Python, no numpy or JAX.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any, Mapping, Sequence

# The one base of user errors; lra/errors.py imports nothing of the project (no cycle, no JAX).
from lra.errors import UserError


class SettingError(UserError):
  """A model name or setting that is not valid (a user error, not a bug): one line naming the
  setting, the value and what is allowed. Raised by validation code only, when the model is
  built; the trainer reports it as one line (a UserError), while any other exception keeps its
  traceback."""


def attention_key(name: str) -> str:
  """Where a mixer setting lives in a config."""
  return f"config.model.attention.{name}"


def model_key(name: str) -> str:
  """Where an encoder setting lives in a config."""
  return f"config.model.{name}"


def did_you_mean(name: str, valid: Sequence[str]) -> str:
  """' (did you mean 'NAME'?)' for the nearest valid name, '' when none is near."""
  near = difflib.get_close_matches(str(name), list(valid), n=1)
  return f" (did you mean {near[0]!r}?)" if near else ""


def fail(key: str, value: Any, allowed: str):
  """Raises the one-line error: `key`=`value`, and what is allowed instead."""
  raise SettingError(f"{key}={value!r} is not valid: {allowed}")


def is_int(value) -> bool:
  """An integer, numpy's included, but not a bool (True would otherwise pass as 1)."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool) \
      and type(value).__name__ != "bool_"


def is_real(value) -> bool:
  """A finite int or float (numpy's included), not a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool) \
      and type(value).__name__ != "bool_" and math.isfinite(value)


class Int:
  """An integer in [low, high] (high None: no upper bound)."""

  def __init__(self, low: int = 1, high: int | None = None):
    self.low, self.high = low, high

  def allowed(self) -> str:
    if self.high is None:
      return f"an integer >= {self.low}"
    return f"an integer in {self.low}..{self.high}"

  def ok(self, value) -> bool:
    return is_int(value) and value >= self.low and (self.high is None or value <= self.high)

  def bad_values(self) -> list:
    bad = [True, 1.5, "1", self.low - 1]
    return bad + ([] if self.high is None else [self.high + 1])


class Float:
  """A real number in the interval from low to high; `open` names the excluded ends."""

  def __init__(self, low: float = -math.inf, high: float = math.inf, open: str = ""):
    self.low, self.high, self.open = low, high, open

  def allowed(self) -> str:
    parts = []
    if self.low > -math.inf:
      parts.append(f"{'>' if 'low' in self.open else '>='} {self.low}")
    if self.high < math.inf:
      parts.append(f"{'<' if 'high' in self.open else '<='} {self.high}")
    return "a number " + " and ".join(parts) if parts else "a finite number"

  def ok(self, value) -> bool:
    if not is_real(value):
      return False
    above = value > self.low if "low" in self.open else value >= self.low
    below = value < self.high if "high" in self.open else value <= self.high
    return above and below

  def bad_values(self) -> list:
    bad = [True, "0.5", float("nan")]
    if self.low > -math.inf:
      bad.append(self.low if "low" in self.open else self.low - 1)
    if self.high < math.inf:
      bad.append(self.high if "high" in self.open else self.high + 1)
    return bad


class Choice:
  """One of a fixed set of values."""

  def __init__(self, values: Sequence):
    self.values = tuple(values)

  def allowed(self) -> str:
    return "one of " + ", ".join(repr(v) for v in self.values)

  def ok(self, value) -> bool:
    return isinstance(value, type(self.values[0])) and value in self.values

  def bad_values(self) -> list:
    return ["no_such_choice", True, None]


class Bool:
  """True or False (numpy's bool too); 1, 0 or "yes" are errors."""

  def allowed(self) -> str:
    return "True or False"

  def ok(self, value) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"

  def bad_values(self) -> list:
    return [1, "yes", None]


class Ints:
  """A non-empty tuple or list of integers >= low (an int alone counts as one value) if
  `scalar_ok`; an empty one only if `empty_ok`."""

  def __init__(self, low: int = 1, *, empty_ok: bool = False, scalar_ok: bool = False):
    self.low, self.empty_ok, self.scalar_ok = low, empty_ok, scalar_ok

  def allowed(self) -> str:
    kind = "a tuple" if self.empty_ok else "a non-empty tuple"
    alone = f" (or one integer)" if self.scalar_ok else ""
    return f"{kind} of integers >= {self.low}{alone}"

  def ok(self, value) -> bool:
    if self.scalar_ok and is_int(value):
      value = (value,)
    if not isinstance(value, (tuple, list)) or (not value and not self.empty_ok):
      return False
    return all(is_int(v) and v >= self.low for v in value)

  def bad_values(self) -> list:
    bad = [(True,), (1.5,), "1", (self.low - 1,), None]
    return bad + ([] if self.empty_ok else [()])


def check(key: str, value, rule) -> None:
  """Raises SettingError naming `key` unless `value` passes `rule`."""
  if not rule.ok(value):
    fail(key, value, rule.allowed())


# --- the one way a setting is declared (trainer, encoder, mixer, data) ---

@dataclasses.dataclass(frozen=True)
class Setting:
  """One setting of any layer. `default` may be a function (called each time a config is
  made). `rule`: its value rule above (None: no range to check). `resume`: may change on a
  resume (it only extends or observes the run), except under the schedules in `fixed_under`.
  `ignored`: the paper comparison ignores it (it does not change what the run measures).
  `only_with`: (other setting of the same layer, value) or (other, value, why): this one does
  nothing unless the other has that value (`unmet` finds those that do nothing). What a layer
  does with one is the layer's, said where it checks: a model's settings (the encoder's,
  models/settings.py; a mixer's, models/common.py) refuse a value other than the default
  (`refuse_unmet`), since no config sets one; the run's (trainer, data: lra/training/
  config_checks.py idle_overrides) warn of a value given on the command line, since a task's
  table sets mask_rate for every run and a grid passes one --config to all its stages."""
  default: Any
  rule: Any
  doc: str
  resume: bool = False
  ignored: bool = False
  fixed_under: tuple[str, ...] = ()
  only_with: tuple = ()

  def field(self) -> Any:
    """This setting as a dataclass field (a Flax module's or a config dataclass's)."""
    return dataclasses.field(default=self.default, metadata={"setting": self})


def setting(default, rule, doc: str, **options) -> Any:
  """A dataclass field declared as a Setting: `x: int = setting(4, Int(1), "what it is")`."""
  return Setting(default, rule, doc, **options).field()


def declared(cls) -> dict[str, Setting]:
  """{name: Setting} of a dataclass's (or a Flax module's) fields declared with `setting`."""
  return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls)
          if "setting" in f.metadata}


def unmet(settings: Mapping[str, Setting], values: Mapping[str, Any]
          ) -> dict[str, tuple[str, Any, str]]:
  """{name: (other, wanted, why)} of the `settings` (one layer's, as `declared` gives them)
  that do nothing with these `values` of the layer: their only_with setting has not the value
  it needs (an absent value counts as its default); `why` is " (reason)" or ""."""
  found = {}
  for name, declaration in settings.items():
    if declaration.only_with:
      other, wanted, *why = declaration.only_with
      if values.get(other, settings[other].default) != wanted:
        found[name] = (other, wanted, f" ({why[0]})" if why else "")
  return found


def refuse_unmet(settings: Mapping[str, Setting], values: Mapping[str, Any], key) -> None:
  """A model's settings (`values`, keyed as `settings`; `key(name)` its config key): one that
  does nothing with the others (`unmet`) and is given a value other than its default is
  refused in one line naming the setting it needs."""
  for name, (other, wanted, why) in unmet(settings, values).items():
    default = settings[name].default
    if name in values and values[name] != default:
      fail(key(name), values[name], f"its default {default!r} unless {key(other)}={wanted!r}"
           f"{why}")
