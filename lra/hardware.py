"""The host CPU in a few words, recorded in results.json: its model, and a fingerprint of the
instruction-set family XLA's CPU code is compiled for. A CPU run repeats bit for bit on a CPU of
the same family; on another (AVX2 against AVX-512 or AMX, say) XLA may vectorise, fuse and so
round differently, and a few predictions flip.

Plain Python, no JAX and no dependency: the trainer records it, the stored-result test reads it.
"""
from __future__ import annotations

import pathlib
import platform

CPUINFO = "/proc/cpuinfo"  # Linux only; elsewhere the model comes from platform.processor()
# Flags that change the code XLA emits for float math: fused multiply-add, the vector width,
# the matrix units (x86), and ARM's vector extensions.
FEATURES = ("fma", "avx2", "avx512f", "amx_tile", "asimd", "sve")
UNKNOWN = "unknown"


def _cpuinfo() -> dict[str, str]:
  """The first value of each field of CPUINFO ({} where it cannot be read)."""
  try:
    text = pathlib.Path(CPUINFO).read_text(errors="replace")
  except OSError:
    return {}
  fields = {}
  for line in text.splitlines():
    name, colon, value = line.partition(":")
    if colon:
      fields.setdefault(name.strip(), value.strip())
  return fields


def describe_cpu() -> dict[str, str]:
  """{"cpu_model": the CPU's name, "cpu_features": the FEATURES it has, joined by "+" ("none"
  if it has none of them)}; UNKNOWN for what this machine does not tell."""
  info = _cpuinfo()
  model = info.get("model name") or platform.processor() or UNKNOWN
  flags = info.get("flags", info.get("Features"))  # x86, ARM
  if flags is None:
    features = UNKNOWN
  else:
    present = set(flags.split())
    features = "+".join(f for f in FEATURES if f in present) or "none"
  return {"cpu_model": model, "cpu_features": features}


def repeats_exactly(stored: dict, current: dict) -> tuple[bool, str]:
  """(exact, why): whether a rerun on the machine of hardware record `current` should repeat a
  run stored with record `stored` bit for bit: both on CPU, with the same known fingerprint. A
  record made before cpu_features existed counts as unknown, so not the same."""
  where = (stored.get("platform"), current.get("platform"))
  if where != ("cpu", "cpu"):
    return False, f"not both on CPU (stored on {where[0]!r}, rerun on {where[1]!r})"
  old, new = stored.get("cpu_features", UNKNOWN), current.get("cpu_features", UNKNOWN)
  if old == UNKNOWN:
    return False, "the stored run's CPU family is unknown (recorded before cpu_features)"
  if new == UNKNOWN:
    return False, "this machine's CPU family is unknown"
  if old != new:
    return False, f"another CPU family: stored on {old}, rerun on {new}"
  return True, f"the same CPU family ({new})"
