"""The README's list of mixers and docs/models.md's mixer table agree with the registry in
what tests/test_front_door.py leaves (it checks the counts and the table's names): the README's
mixer paragraph names every mixer of models/, and each table row gives the mixer's file and
every setting it declares. Adding a mixer makes this test say what to add to the docs, with no
edit to the test."""
import pathlib
import re
from unittest import mock

from lra import rules
from lra.models import common, registry

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _spoken(name: str) -> str:
  """A registry name as prose writes it, lowered: transformer_xl -> "transformer xl"."""
  return name.replace("_", " ")


def _built_in() -> dict[str, str]:
  """{name: its file} of every mixer of models/mixers/."""
  return {n: f"models/mixers/{registry.get(n).__module__.rsplit('.', 1)[1]}.py"
          for n in registry.names() if registry.in_repository(n)}


def readme_problems(readme: str, mixers: dict[str, str]) -> list[str]:
  """The mixers of `mixers` that README.md's mixer paragraph ("<Count> token mixers: ...")
  does not name."""
  found = re.search(r"^\S+ token mixers: (.*?)\n\n", readme, re.M | re.S)
  if not found:
    return ["README.md has no paragraph starting '<Count> token mixers:'"]
  prose = " ".join(found.group(1).lower().replace("-", " ").split())
  return [f"README.md's mixer paragraph does not name {n!r}" for n in mixers
          if _spoken(n) not in prose]


def models_doc_problems(doc: str, mixers: dict[str, str], settings: dict[str, list[str]]
                        ) -> list[str]:
  """What docs/models.md's mixer table gets wrong: a row per mixer with its file and every
  setting it takes (grid aliases aside)."""
  rows = {}
  for line in doc.splitlines():
    row = re.match(r"\| `(\w+)` \| `([^`]+)` \|.*\|(.*)\|\s*$", line)
    if row:
      rows[row.group(1)] = (row.group(2), row.group(3))
  problems = []
  for name, file in mixers.items():
    if name not in rows:
      problems.append(f"docs/models.md's table has no row for {name!r} ({file})")
      continue
    if rows[name][0] != file:
      problems.append(f"docs/models.md's row {name!r} names {rows[name][0]}, not {file}")
    missing = [k for k in settings[name] if f"`{k}`" not in rows[name][1]]
    if missing:
      problems.append(f"docs/models.md's row {name!r} lacks setting(s) {', '.join(missing)}")
  return problems


def _settings(mixers) -> dict[str, list[str]]:
  return {n: registry.user_settings(n) for n in mixers}


def test_readme_and_models_doc_list_every_mixer_of_the_registry():
  mixers = _built_in()
  problems = readme_problems((ROOT / "README.md").read_text(), mixers)
  problems += models_doc_problems((ROOT / "docs" / "models.md").read_text(), mixers,
                                  _settings(mixers))
  assert not problems, "\n".join(problems)


def test_a_new_mixer_is_named_as_missing_from_both():
  """The checks need no edit when a mixer is added: a new one is reported missing."""

  class Extra(common.Mixer):
    depth: int = rules.setting(1, rules.Int(1), "layers of it")

  mixers = {**_built_in(), "gated_delta_net": "models/gated_delta_net.py"}
  with mock.patch.dict(registry._MIXERS, {"gated_delta_net": Extra}):
    readme = readme_problems((ROOT / "README.md").read_text(), mixers)
    doc = models_doc_problems((ROOT / "docs" / "models.md").read_text(), mixers,
                              _settings(mixers))
  assert readme == ["README.md's mixer paragraph does not name 'gated_delta_net'"]
  assert doc == ["docs/models.md's table has no row for 'gated_delta_net' "
                 "(models/gated_delta_net.py)"]
  doc = models_doc_problems("| `s5` | `models/s5.py` | an SSM | `state_size` 256 |\n",
                            {"s5": "models/s5.py"}, {"s5": ["state_size", "blocks"]})
  assert doc == ["docs/models.md's row 's5' lacks setting(s) blocks"]


def test_every_mixer_of_models_has_a_title_in_the_tables():
  """Tables and charts name a model by paper.MODEL_TITLES ("Mamba-2", not "mamba2"): a mixer
  added to models/ without one shows its registry name beside titled rows."""
  from lra.reporting import paper
  missing = sorted(set(_built_in()) - set(paper.MODEL_TITLES))
  assert not missing, f"add a title to lra/reporting/paper.py MODEL_TITLES for {missing}"
