"""The layers point one way (read from the sources with ast, nothing is imported): the library
never imports configs/, and the project's modules import each other without a circle."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The commands (lra/commands/) sit above configs/: they load configs and pass values in; every
# other module of lra/ and models/ is library, or shared by library and commands.
COMMANDS = "lra.commands"
GRAPH_PACKAGES = ("lra", "models", "configs")


def _package_dir() -> dict[str, str]:
  """setup.py's package_dir (package -> folder), read from the file as packaging tools read it:
  the one place that says models/ is lra.models and configs/ is lra.configs."""
  for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())):
    if isinstance(node, ast.keyword) and node.arg == "package_dir":
      return ast.literal_eval(node.value)
  raise AssertionError("setup.py sets no package_dir")


def _module_name(path: pathlib.Path) -> str:
  """The name it is imported by, through setup.py's package_dir."""
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  for package, folder in _package_dir().items():
    if parts[0] == folder:
      parts = [*package.split("."), *parts[1:]]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(packages) -> dict[str, pathlib.Path]:
  return {_module_name(p): p for package in packages
          for p in sorted((ROOT / package).rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool, prefixes: bool = False) -> list[str]:
  """The dotted names an import statement (or importlib.import_module call) names; with
  `prefixes`, also the fixed start of a computed name (f"lra.configs.{task}" -> lra.configs)."""
  if isinstance(node, ast.Import):
    return [alias.name for alias in node.names]
  if isinstance(node, ast.ImportFrom):
    base = node.module or ""
    if node.level:  # relative: from the module's package
      package = module.split(".") if is_package else module.split(".")[:-1]
      package = package[:len(package) - node.level + 1]
      base = ".".join(package + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]
  if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
      == "import_module" and node.args):
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
      return [first.value]
    if prefixes and isinstance(first, ast.JoinedStr) and first.values and \
        isinstance(first.values[0], ast.Constant):
      return [str(first.values[0].value).rstrip(".")]  # f"lra.configs.{t}" -> lra.configs
  return []


def _within(name: str, package: str) -> bool:
  return name == package or name.startswith(package + ".")


def test_the_library_never_imports_configs_or_commands():
  """models/, lra/data, lra/training, lra/reporting and the shared lra modules take what comes
  from configs/ as arguments: no import of configs, nor of the commands above them, anywhere
  in them (in functions included); configs/ never imports a command either."""
  found = []
  for name, path in _modules(("lra", "models", "configs")).items():
    if _within(name, COMMANDS):
      continue
    above = (COMMANDS,) if _within(name, "lra.configs") else (COMMANDS, "lra.configs")
    for node in ast.walk(ast.parse(path.read_text())):
      for target in _imported(node, name, path.name == "__init__.py", prefixes=True):
        if any(_within(target, package) for package in above):
          found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
  assert not found, "the library imports configs/ or a command: " + "; ".join(found)


def _graph() -> dict[str, set[str]]:
  """module -> the project modules it imports, anywhere in it (in functions too, and by
  importlib.import_module). `from a import b` counts as an import of a.b where that is a
  module, else of a; a package's own __init__ is not counted as imported by its submodules
  (Python runs it first, but that is no circle of ours)."""
  modules = _modules(GRAPH_PACKAGES)
  graph = {}
  for name, path in modules.items():
    edges = set()
    for node in ast.walk(ast.parse(path.read_text())):
      targets = _imported(node, name, path.name == "__init__.py")
      if isinstance(node, ast.ImportFrom):
        submodules = [t for t in targets[1:] if t in modules]
        names_only = len(submodules) < len(targets) - 1
        targets = submodules + ([targets[0]] if names_only else [])
      edges.update(t for t in targets if t in modules and t != name)
    graph[name] = edges
  return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import circle of `graph` (its modules in order, the first repeated), or None."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == "open":
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_the_import_graph_has_no_circle():
  """The modules of lra/, models/ and configs/ import each other without a circle, the
  imports inside functions included: a lazy import (a task's loader, the generator, JAX where
  a step runs) keeps a load cheap, it does not make a circle of the layers acceptable."""
  graph = _graph()
  assert "lra.data.pathfinder_gen.params" in graph["lra.data.pathfinder"]  # it reads edges
  cycle = _cycle(graph)
  assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_every_project_import_resolves_to_a_file():
  """Read from the files alone (setup.py's package_dir, no import system, no run-time mount):
  every `lra...` module that the code, the tests and the scripts import is a file of the tree,
  and nothing else (lra.setup, lra.tests) is a module of lra."""
  modules = _modules(GRAPH_PACKAGES)
  files = [p for folder in ("lra", "models", "configs", "tests", "scripts")
           for p in sorted((ROOT / folder).rglob("*.py"))] + [ROOT / "train.py", ROOT / "eval.py"]
  missing = []
  for path in files:
    name = _module_name(path) if path.parts[len(ROOT.parts)] in GRAPH_PACKAGES else ""
    for node in ast.walk(ast.parse(path.read_text())):
      targets = _imported(node, name, path.name == "__init__.py")
      if isinstance(node, ast.ImportFrom):  # `from a import b`: a module, or a name of a
        targets = [t for t in targets[1:] if t in modules] or targets[:1]
      missing += [f"{path.relative_to(ROOT)}:{node.lineno} {t}" for t in targets
                  if t.split(".")[0] == "lra" and t not in modules]
  assert not missing, "imports no file resolves: " + "; ".join(missing)
  assert "lra.models.registry" in modules and "lra.configs.base" in modules
  assert not {"lra.setup", "lra.tests", "lra.train"} & set(modules)
  assert "__path__" not in (ROOT / "lra" / "__init__.py").read_text()  # no run-time mount


def test_the_cycle_finder_finds_one():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None


def test_models_and_tasks_keep_their_sides():
  """models/ imports no lra module but the two leaves lra.errors (the one user-error base) and
  lra.rules (the value rules, on lra.errors alone); the trainer's settings and the reports take
  their rules from lra.rules, not models/; the data layer (lra/data) never imports models/."""
  graph = _graph()
  assert not graph["lra.errors"] & set(graph), graph["lra.errors"]
  assert graph["lra.rules"] <= {"lra.errors"}, graph["lra.rules"]
  found = [f"{m} imports {t}" for m, targets in graph.items() for t in targets
           if (m.startswith("lra.models") and not t.startswith("lra.models")
               and t not in ("lra.errors", "lra.rules"))
           or (m.startswith(("lra.training.options", "lra.reporting"))
               and t.startswith("lra.models"))
           or (m.startswith("lra.data") and t.startswith("lra.models"))]
  assert not found, "; ".join(found)


def test_models_are_in_three_layers():
  """As fla's ops, modules and layers: the computations (models/ops) import no building block
  and no mixer (of models/ only each other and common.py's masked softmax), the building blocks
  (models/blocks) no mixer, and a mixer (models/mixers) no other mixer: a part two mixers share
  lives in ops/ or blocks/."""
  graph = _graph()
  ops, blocks, mixers = "lra.models.ops", "lra.models.blocks", "lra.models.mixers"
  assert {f"{mixers}.mamba", f"{blocks}.recurrent", f"{ops}.matrix_recurrence"} <= set(graph)
  found = [f"{m} imports {t}" for m, targets in graph.items() for t in targets
           if (_within(m, ops) and _within(t, "lra.models")
               and not (_within(t, ops) or t == "lra.models.common"))
           or (_within(m, blocks) and _within(t, mixers))
           or (_within(m, mixers) and _within(t, mixers) and t != mixers)]
  assert not found, "; ".join(found)


def test_nothing_imports_a_top_level_models_or_configs():
  """The project imports its own folders only as lra.models / lra.configs (a user's own
  `models` package must never be taken for ours, nor ours for theirs): in the library, the
  commands, the tests and the scripts, in functions and import_module calls included."""
  files = [p for folder in ("lra", "models", "configs", "tests", "scripts")
           for p in sorted((ROOT / folder).rglob("*.py"))] + [ROOT / "train.py", ROOT / "eval.py"]
  found = [f"{p.relative_to(ROOT)}:{node.lineno} imports {t}" for p in files
           for node in ast.walk(ast.parse(p.read_text()))
           for t in _imported(node, "", False, prefixes=True)
           if t.split(".")[0] in ("models", "configs", "train")]
  assert not found, "; ".join(found)


def test_every_command_reports_errors_through_one_function():
  """An `error:` line is printed in one place, lra.errors.fail (run_command and train.py use it):
  no other module of the project, command or script writes one itself."""
  files = [p for folder in ("lra", "models", "configs", "scripts")
           for p in sorted((ROOT / folder).rglob("*.py"))] + [ROOT / "train.py", ROOT / "eval.py"]
  found = []
  for path in files:
    if path == ROOT / "lra" / "errors.py":
      continue
    for node in ast.walk(ast.parse(path.read_text())):
      if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
          node.func, "attr", "")) in ("print", "exit", "write") and node.args):
        continue
      first = node.args[0]
      text = first.value if isinstance(first, ast.Constant) else (
          first.values[0].value if isinstance(first, ast.JoinedStr) and first.values
          and isinstance(first.values[0], ast.Constant) else None)
      if isinstance(text, str) and text.startswith("error:"):
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
  assert not found, "an error line written outside lra.errors.fail: " + "; ".join(found)
