"""The tree stays easy to read: small modules, short functions (or a stated reason)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("lra", "models", "configs")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "long because"  # a longer function says why in its docstring, with these words


def _sources():
  files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
  return files + [ROOT / "train.py", ROOT / "eval.py"]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_are_small(path):
  text = path.read_text()
  assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name}: split it by job"
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      length = node.end_lineno - node.lineno + 1
      reason = REASON in (ast.get_docstring(node) or "").lower()
      assert length <= MAX_FUNCTION_LINES or reason, (
          f"{path.name}:{node.lineno} {node.name} is {length} lines; split it, or say in its "
          f"docstring why it is {REASON.split()[0]} ('{REASON} ...')")
