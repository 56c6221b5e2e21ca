"""The front door stays accurate: README.md short, the mixer count and table equal to the
registry, docs/layout.md equal to the files, every relative link of README.md and docs/*.md
resolving (anchors included). Text and the registry only: no JAX compile.

Each check is a function of the checkout's root that returns what is wrong, so that a scratch
copy with a broken page shows that it can fail."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_README_LINES = 300
# Where the number of mixers is stated, and what states it: "Nineteen token mixers", "19
# registered token mixers".
COUNT_PAGES = ("README.md", "docs/models.md")
COUNT = re.compile(r"\b([A-Za-z]+(?:-[A-Za-z]+)?|\d+)\s+(?:registered\s+)?(?:token\s+)?mixers\b",
                   re.IGNORECASE)
# The mixer table: the one table whose header names the config argument.
TABLE_HEADER = "`--config=configs/TASK.py:NAME`"
ALIAS_MARK = "(grid alias)"
LAYOUT_PAGE = "docs/layout.md"
LAYOUT_FOLDERS = ("lra", "models", "configs")  # every .py of these must be listed
# Subpackages that docs/layout.md may list as one line (a folder, "lra/data/pathfinder_gen/").
ONE_LINE_SUBPACKAGES = ("lra/data/pathfinder_gen/",)

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}


def number(word: str) -> int | None:
  """'19', 'nineteen', 'Twenty-one' -> the number; any other word -> None."""
  word = word.lower()
  if word.isdigit():
    return int(word)
  if word in _UNITS:
    return _UNITS.index(word)
  tens, _, unit = word.partition("-")
  if tens in _TENS and (not unit or unit in _UNITS[1:10]):
    return _TENS[tens] + (_UNITS.index(unit) if unit else 0)
  return None


def _prose(text: str) -> list[str]:
  """The lines of a markdown text outside fenced code blocks (a `# comment` in a bash block is
  no heading, a link in a code block no link)."""
  lines, fenced = [], False
  for line in text.splitlines():
    if line.lstrip().startswith("```"):
      fenced = not fenced
      continue
    if not fenced:
      lines.append(line)
  return lines


def _pages(root: pathlib.Path) -> list[pathlib.Path]:
  return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _registered() -> list[str]:
  from lra.models import registry
  return registry.names()


def readme_problems(root: pathlib.Path) -> list[str]:
  lines = (root / "README.md").read_text().splitlines()
  if len(lines) >= MAX_README_LINES:
    return [f"README.md has {len(lines)} lines; keep the front door under {MAX_README_LINES} "
            "by moving a section into a docs/ page and linking it"]
  return []


def count_problems(root: pathlib.Path, registered: list[str]) -> list[str]:
  """Every stated number of mixers must be the registry's, and the README must state one."""
  problems, found_in_readme = [], False
  for page in COUNT_PAGES:
    text = " ".join(_prose((root / page).read_text()))
    for match in COUNT.finditer(text):
      stated = number(match.group(1))
      if stated is None:
        continue
      found_in_readme |= page == "README.md"
      if stated != len(registered):
        problems.append(f"{page} says {match.group(0)!r}, but {len(registered)} mixers are "
                        f"registered ({', '.join(registered)}): fix the number")
  if not found_in_readme:
    problems.append("README.md states no number of mixers (e.g. 'Nineteen token mixers'): "
                    f"say how many are registered ({len(registered)})")
  return problems


def _mixer_tables(root: pathlib.Path) -> list[tuple[str, list[str]]]:
  """(page, first cells of the rows) of every table whose header names TABLE_HEADER."""
  tables = []
  for page in _pages(root):
    lines = _prose(page.read_text())
    for i, line in enumerate(lines):
      if line.startswith("|") and TABLE_HEADER in line.split("|")[1]:
        cells = []
        for row in lines[i + 2:]:
          if not row.startswith("|"):
            break
          cells.append(row.split("|")[1].strip())
        tables.append((page.relative_to(root).as_posix(), cells))
  return tables


def table_problems(root: pathlib.Path, registered: list[str], aliases: list[str]) -> list[str]:
  """The mixer table names exactly the registered mixers (rows marked '(grid alias)' aside,
  which must be grid aliases)."""
  tables = _mixer_tables(root)
  if len(tables) != 1:
    return [f"expected one mixer table (header cell {TABLE_HEADER}) in README.md or docs/*.md, "
            f"found {len(tables)} ({[page for page, _ in tables]})"]
  (page, cells), = tables
  problems, named = [], []
  for cell in cells:
    name = re.match(r"`([^`]+)`", cell)
    if not name:
      problems.append(f"{page}: mixer table row {cell!r} does not start with a `name`")
    elif ALIAS_MARK in cell:
      if name.group(1) not in aliases:
        problems.append(f"{page}: {name.group(1)!r} is marked {ALIAS_MARK} but is not one of "
                        f"lra.commands.grid_plan.ALIASES ({', '.join(aliases)})")
    else:
      named.append(name.group(1))
  missing = sorted(set(registered) - set(named))
  extra = sorted(set(named) - set(registered))
  doubled = sorted({n for n in named if named.count(n) > 1})
  if missing:
    problems.append(f"{page}: the mixer table lacks the registered {missing}: add a row each")
  if extra:
    problems.append(f"{page}: the mixer table names {extra}, which are not registered: remove "
                    f"the rows (or mark a grid alias {ALIAS_MARK})")
  if doubled:
    problems.append(f"{page}: the mixer table names {doubled} twice")
  return problems


def _layout_paths(text: str) -> list[str]:
  """The paths docs/layout.md names: each table row's first cell, and every `code` span that
  looks like a path (has a '/' and no placeholder)."""
  paths = []
  for line in _prose(text):
    if line.startswith("|") and not set(line) <= set("|- "):
      first = re.fullmatch(r"`([^`]+)`", line.split("|")[1].strip())
      if first:
        paths.append(first.group(1))
    for span in re.findall(r"`([^`\s]+)`", line):
      if "/" in span and re.fullmatch(r"[\w.\-/]+", span) and not re.search(r"[A-Z]{3,}", span):
        paths.append(span)
  return list(dict.fromkeys(paths))


def layout_problems(root: pathlib.Path) -> list[str]:
  text = (root / LAYOUT_PAGE).read_text()
  named = _layout_paths(text)
  problems = [f"{LAYOUT_PAGE} names {path!r}, which does not exist: fix or remove its line"
              for path in named if not (root / path).exists()]
  folders = [p for p in named if p.endswith("/") and p in ONE_LINE_SUBPACKAGES]
  for top in LAYOUT_FOLDERS:
    for module in sorted((root / top).rglob("*.py")):
      path = module.relative_to(root).as_posix()
      if "__pycache__" in path or path in named or any(path.startswith(f) for f in folders):
        continue
      problems.append(f"{LAYOUT_PAGE} does not list {path}: add a row `{path}` with one line on "
                      "what it holds (from its docstring)")
  return problems


def slug(heading: str) -> str:
  """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to '-'."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link: its text
  return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
  seen: dict[str, int] = {}
  found = set()
  for line in _prose(page.read_text()):
    heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
    if heading:
      base = slug(heading.group(1))
      n = seen.get(base, 0)
      seen[base] = n + 1
      found.add(base if n == 0 else f"{base}-{n}")
  return found


def link_problems(root: pathlib.Path) -> list[str]:
  problems = []
  for page in _pages(root):
    name = page.relative_to(root).as_posix()
    for line in _prose(page.read_text()):
      line = re.sub(r"`[^`]*`", "", line)  # a link in a code span is no link
      for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
        if re.match(r"[a-z][a-z0-9+.\-]*:", target):  # https:, mailto:
          continue
        file_part, _, anchor = target.partition("#")
        file = (page.parent / file_part).resolve() if file_part else page
        if not file.exists():
          problems.append(f"{name}: link ({target}) points at {file_part}, which does not "
                          "exist: fix the path (relative to the page)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
          problems.append(f"{name}: link ({target}): {file.name} has no heading with anchor "
                          f"#{anchor}: point it at the section's current heading")
  return problems


def test_readme_is_a_short_front_door():
  assert not readme_problems(ROOT), readme_problems(ROOT)


def test_the_stated_number_of_mixers_is_the_registry_s():
  problems = count_problems(ROOT, _registered())
  assert not problems, "\n".join(problems)


def test_the_mixer_table_names_exactly_the_registered_mixers():
  from lra.commands.grid_plan import ALIASES
  problems = table_problems(ROOT, _registered(), list(ALIASES))
  assert not problems, "\n".join(problems)


def test_the_layout_page_lists_every_module_and_no_missing_file():
  problems = layout_problems(ROOT)
  assert not problems, "\n".join(problems)


def test_every_relative_link_resolves():
  problems = link_problems(ROOT)
  assert not problems, "\n".join(problems)


def test_slugs_are_github_s():
  assert slug("Every mixer on the quick ListOps setup (`python -m lra.commands.leaderboard`)") \
      == "every-mixer-on-the-quick-listops-setup-python--m-lracommandsleaderboard"
  assert slug("Install beside a machine's own JAX") == "install-beside-a-machines-own-jax"
  assert number("Nineteen") == 19 and number("twenty-one") == 21 and number("token") is None
