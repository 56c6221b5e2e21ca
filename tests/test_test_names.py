"""Tests are filed by subject: a test file is named for the module or subject it checks, and no
test says which issue asked for it (the reason is the property it states; the history is in
git). Text only: no JAX."""
import pathlib
import re

TESTS = pathlib.Path(__file__).resolve().parent
# "issue 14", "Issue 44 item 8", "(issue 26)", "the issue's grid": an issue as the reason.
ISSUE = re.compile(r"\bissue(?:'s|\s+\d+)", re.IGNORECASE)


def issue_citations(folder: pathlib.Path) -> list[str]:
  """file:line of each Python file under `folder` that names an issue, and each file named
  after one."""
  found = []
  for path in sorted(folder.glob("*.py")):
    if path.name == pathlib.Path(__file__).name:  # this check names the pattern it looks for
      continue
    if "issue" in path.name.lower():
      found.append(f"{path.name}: named after an issue; name it for its subject")
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if ISSUE.search(line):
        found.append(f"{path.name}:{number}: {line.strip()}")
  return found


def test_no_test_cites_an_issue_as_its_reason():
  assert issue_citations(TESTS) == [], "say the property tested instead"


def test_the_check_finds_a_cited_issue(tmp_path):
  (tmp_path / "test_issue_7.py").write_text('"""Issue 44 item 8: a kill ..."""\n')
  (tmp_path / "test_fine.py").write_text("# a kill between two writes\nx = 'tissue 3'\n")
  assert issue_citations(tmp_path) == [
      "test_issue_7.py: named after an issue; name it for its subject",
      'test_issue_7.py:1: """Issue 44 item 8: a kill ..."""']
