"""The README's list of mixers and docs/models.md agree with the registry in what
tests/test_front_door.py leaves (it checks the counts and the table's names): the README's
mixer paragraph names every mixer of models/; docs/models.md's table gives each mixer one line
with its paper (and year) and its file, and a section headed by its name names every setting
it declares; no line of docs/models.md is a wall (over MAX_LINE characters). Adding a mixer
makes this test say what to add to the docs, with no edit to the test."""
import pathlib
import re
from unittest import mock

from lra import rules
from lra.models import common, registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS_DOC = "docs/models.md"
MAX_LINE = 400  # characters: a table line or a paragraph line longer than this is a wall
# A table line: | `name` (a mark such as "(grid alias)") | paper | `file` | phrase |
_ROW = re.compile(r"^\| `(\w+)`[^|]*\| ([^|]*) \| `([^`]+)` \| (.*) \|\s*$")
_YEAR = re.compile(r"\b(19|20)\d\d\b")


def _spoken(name: str) -> str:
  """A registry name as prose writes it, lowered: transformer_xl -> "transformer xl"."""
  return name.replace("_", " ")


def _built_in() -> dict[str, str]:
  """{name: its file} of every mixer of models/ (models/mixers/gla.py for lra.models.mixers.gla)."""
  return {n: registry.get(n).__module__.removeprefix("lra.").replace(".", "/") + ".py"
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


def _sections(doc: str) -> dict[str, str]:
  """{name: text} of every `### name` section of the doc, up to the next heading."""
  parts = re.split(r"^(#{1,6}) +(.*?)\s*$", doc, flags=re.M)
  return {title.strip("`"): text for level, title, text in zip(parts[1::3], parts[2::3],
                                                                parts[3::3]) if level == "###"}


def models_doc_problems(doc: str, mixers: dict[str, str], settings: dict[str, list[str]]
                        ) -> list[str]:
  """What docs/models.md gets wrong: one table line per mixer with a paper and year and its
  file, a `### name` section naming every setting it takes, no line over MAX_LINE."""
  rows: dict[str, list[tuple[str, str]]] = {}
  for line in doc.splitlines():
    row = _ROW.match(line)
    if row and "(grid alias)" not in line:
      rows.setdefault(row.group(1), []).append((row.group(2), row.group(3)))
  sections, problems = _sections(doc), []
  for name, file in mixers.items():
    if name not in rows:
      problems.append(f"{MODELS_DOC}'s table has no line for {name!r}: write | `{name}` | "
                      f"AUTHORS YEAR | `{file}` | ONE PHRASE |")
    elif len(rows[name]) > 1:
      problems.append(f"{MODELS_DOC}'s table has {len(rows[name])} lines for {name!r}")
    else:
      (paper, named_file), = rows[name]
      if named_file != file:
        problems.append(f"{MODELS_DOC}'s line {name!r} names {named_file}, not {file}")
      if not _YEAR.search(paper):
        problems.append(f"{MODELS_DOC}'s line {name!r} gives no paper with its year ({paper!r})")
    if name not in sections:
      problems.append(f"{MODELS_DOC} has no section '### {name}' for its settings")
      continue
    missing = [k for k in settings[name] if f"`{k}`" not in sections[name]]
    if missing:
      problems.append(f"{MODELS_DOC}'s section {name!r} lacks setting(s) {', '.join(missing)}")
  problems += [f"{MODELS_DOC} line {i} has {len(line)} characters (at most {MAX_LINE}): move "
               "the detail into the mixer's section or its module docstring"
               for i, line in enumerate(doc.splitlines(), 1) if len(line) > MAX_LINE]
  return problems


def _settings(mixers) -> dict[str, list[str]]:
  return {n: registry.user_settings(n) for n in mixers}


def test_readme_and_models_doc_list_every_mixer_of_the_registry():
  mixers = _built_in()
  problems = readme_problems((ROOT / "README.md").read_text(), mixers)
  problems += models_doc_problems((ROOT / MODELS_DOC).read_text(), mixers, _settings(mixers))
  assert not problems, "\n".join(problems)


def test_a_new_mixer_is_named_as_missing_from_both():
  """The checks need no edit when a mixer is added: a new one is reported missing."""

  class Extra(common.Mixer):
    depth: int = rules.setting(1, rules.Int(1), "layers of it")

  mixers = {**_built_in(), "gated_delta_net": "models/mixers/gated_delta_net.py"}
  with mock.patch.dict(registry._MIXERS, {"gated_delta_net": Extra}):
    readme = readme_problems((ROOT / "README.md").read_text(), mixers)
    doc = models_doc_problems((ROOT / MODELS_DOC).read_text(), mixers, _settings(mixers))
  assert readme == ["README.md's mixer paragraph does not name 'gated_delta_net'"]
  assert [p for p in doc if "gated_delta_net" in p] == [f"{MODELS_DOC}'s table has no line for 'gated_delta_net': write | "
                 "`gated_delta_net` | AUTHORS YEAR | `models/mixers/gated_delta_net.py` | "
                 "ONE PHRASE |",
                 f"{MODELS_DOC} has no section '### gated_delta_net' for its settings"]


def test_a_missing_setting_a_wrong_file_and_a_wall_are_named():
  s5 = {"s5": "models/mixers/s5.py"}
  good = ("| `s5` | Smith et al. 2023 | `models/mixers/s5.py` | [an SSM](#s5) |\n\n"
          "### s5\n\n- `state_size` (256): P.\n- `blocks` (8): J.\n\n## Next\n\n`extra`\n")
  settings = {"s5": ["state_size", "blocks"]}
  assert models_doc_problems(good, s5, settings) == []
  assert models_doc_problems(good, s5, {"s5": ["state_size", "blocks", "extra"]}) == [
      f"{MODELS_DOC}'s section 's5' lacks setting(s) extra"]  # named outside its section only
  moved = good.replace("models/mixers/s5.py", "models/s5.py")
  assert models_doc_problems(moved, s5, settings) == [
      f"{MODELS_DOC}'s line 's5' names models/s5.py, not models/mixers/s5.py"]
  no_year = good.replace("Smith et al. 2023", "Smith et al.")
  assert models_doc_problems(no_year, s5, settings) == [
      f"{MODELS_DOC}'s line 's5' gives no paper with its year ('Smith et al.')"]
  wall = good.replace("- `blocks` (8): J.", "- `blocks` (8): " + "J " * 250)
  assert models_doc_problems(wall, s5, settings) == [
      f"{MODELS_DOC} line 6 has 516 characters (at most {MAX_LINE}): move the detail into the "
      "mixer's section or its module docstring"]
  second = "| `s5` | Smith et al. 2023 | `models/mixers/s5.py` | x |"
  twice = good.replace("\n\n###", f"\n{second}\n\n###", 1)
  assert models_doc_problems(twice, s5, settings) == [f"{MODELS_DOC}'s table has 2 lines for 's5'"]


def test_every_mixer_of_models_has_a_title_in_the_tables():
  """Tables and charts name a model by paper.MODEL_TITLES ("Mamba-2", not "mamba2"): a mixer
  added to models/ without one shows its registry name beside titled rows."""
  from lra.reporting import paper
  missing = sorted(set(_built_in()) - set(paper.MODEL_TITLES))
  assert not missing, f"add a title to lra/reporting/paper.py MODEL_TITLES for {missing}"
