"""The measuring of `eval.py padding` (JAX): one row of the padding table, the mixer built as
the encoder builds it and run on the reference rows and every padded case in one compiled
program; lra.reporting.padding declares the shapes, the settings and the verdicts."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import testing
from lra.models import registry
from lra.reporting import padding as table
from lra.rules import SettingError


def rows_to_measure(names: list[str] | None = None) -> list[str]:
  """Every registered mixer (or `names`), then the VARIANTS of those measured."""
  names = registry.names() if names is None else names
  return [*names, *(label for label, v in table.VARIANTS.items() if v[0] in names)]


def row_settings(label: str) -> tuple[str, dict, int]:
  """(mixer, settings, layer_index) of row `label` (a mixer's name or a VARIANTS label)."""
  name, update, layer = table.VARIANTS.get(label, (label, {}, 1))
  return name, {**table.SETTINGS.get(name, {}), **update}, layer


class Harness(nn.Module):
  """The mixer as the encoder builds it (registry.make with the encoder's fields, its shared
  module made in this scope), deterministic."""
  mixer: str | type
  settings: dict
  layer_index: int

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL):
    fields = dict(num_heads=table.HEADS, qkv_dim=table.WIDTH, dtype="float32")
    shared = registry.make_shared(self.mixer, self.settings, **fields)
    module = registry.make(self.mixer, self.settings, dropout_rate=0.0, num_layers=2,
                           layer_index=self.layer_index, shared=shared, name="mixer", **fields)
    return module(x_BxLxD, mask_BxL, deterministic=True)


def cases(real: int, pads, seed: int):
  """The reference (x, mask, cotangent: BATCH rows of `real` tokens) and, per pad p, the same
  rows padded by p on the right, then as many rows padded by p on the left: junk of scale JUNK
  where padded (mask False), the cotangent zero there."""
  batch, width = table.BATCH, table.WIDTH
  rng = np.random.default_rng(seed)
  x_BxRxD = rng.normal(size=(batch, real, width)).astype(np.float32)
  cotangent_BxRxD = rng.normal(size=(batch, real, width)).astype(np.float32)
  real_BxR = np.ones((batch, real), bool)
  padded = {}
  for pad in pads:
    junk_BxPxD = (rng.normal(size=(batch, pad, width)) * table.JUNK).astype(np.float32)
    both = lambda real_part, pad_part: np.concatenate(
        [np.concatenate([real_part, pad_part], 1), np.concatenate([pad_part, real_part], 1)])
    padded[pad] = (both(x_BxRxD, junk_BxPxD), both(real_BxR, np.zeros((batch, pad), bool)),
                   both(cotangent_BxRxD, np.zeros((batch, pad, width), np.float32)))
  return (x_BxRxD, real_BxR, cotangent_BxRxD), padded


def _program(harness: Harness, fixed_length: bool, longest: int):
  """The reference and every padded case through one program (one compile): each one's
  outputs and the input gradients of its cotangent. The parameters are made once at the
  longest length (as the encoder makes them at max_len); a FIXED_LENGTH mixer's at each
  length, from the same key."""

  def params_at(length: int):
    return harness.init(jax.random.PRNGKey(0), jnp.zeros((1, length, table.WIDTH), jnp.float32),
                        jnp.ones((1, length), bool))

  def program(reference, padded):
    made = None if fixed_length else params_at(longest)

    def run(x, mask, cotangent):
      params = params_at(x.shape[1]) if fixed_length else made
      y, vjp = jax.vjp(lambda x: harness.apply(params, x, mask), x)
      return y, vjp(cotangent)[0]

    return run(*reference), {pad: run(*case) for pad, case in padded.items()}

  return program


def _relative(changed, reference) -> float:
  """max |changed - reference| relative to max |reference| (nan where any is not finite)."""
  changed, reference = np.asarray(changed, np.float64), np.asarray(reference, np.float64)
  return float(np.max(np.abs(changed - reference)) / max(np.max(np.abs(reference)), 1e-30))


def measure(label: str, real: int = table.REAL, pads=table.PADS, seed: int = 0,
            mixer: type | None = None) -> dict[str, Any]:
  """Row `label` (a mixer's name or a VARIANTS label; with `mixer`, that mixer class at its
  defaults under any label): {"right": {pad: {"outputs": f, "gradients": f}}, "left": {...}}
  with its settings and verdict; a mixer that refuses these shapes (SettingError) gives
  {"refused": its one-line message} instead of figures."""
  name, settings, layer = (label, {}, 1) if mixer else row_settings(label)
  row: dict[str, Any] = dict(row=label, mixer=name, settings=settings, layer_index=layer,
                             needed=table.NEEDED.get(name))
  built = mixer or name
  longest = real + max(pads)
  try:  # every setting checked, with the rules that need the longest length
    registry.make(built, settings, length=longest, num_heads=table.HEADS, qkv_dim=table.WIDTH,
                  dropout_rate=0.0, dtype="float32", layer_index=layer, num_layers=2)
  except SettingError as e:
    return {**row, "refused": str(e)}
  reference, padded = cases(real, pads, seed)
  fixed_length = (mixer or registry.get(name)).FIXED_LENGTH
  program = _program(Harness(built, settings, layer), fixed_length, longest)
  with testing.cheap_compiles():
    (y_ref, g_ref), out = jax.device_get(testing.run_once(program, reference, padded))
  batch = table.BATCH
  for side in ("right", "left"):
    row[side] = {}
    for pad, (y, g) in out.items():
      rows, cut = ((slice(0, batch), slice(0, real)) if side == "right" else
                   (slice(batch, None), slice(pad, None)))
      row[side][pad] = dict(outputs=_relative(y[rows, cut], y_ref),
                            gradients=_relative(g[rows, cut], g_ref))
  row["verdict"] = table.verdict(row)
  return row
