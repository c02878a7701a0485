"""The layers' import rules (docs/architecture.md), read from every import in ``bench/``: lazy ones, relative
ones (resolved against the importing module's package) and ``importlib.import_module``/``__import__`` calls
with a constant name included.

Rules:
1. A database driver (psycopg, PyMySQL, mariadb) is imported only under ``bench/engines/<name>/``.
2. ``bench.load`` and ``bench.measure`` see the engines only through ``bench.engines.base``.
3. ``bench.analysis`` and ``bench.report`` import only ``bench.results``, ``bench.analysis`` and
   ``bench.report`` (and nothing that runs load or talks to a database), ``bench.errors`` and ``bench.data``
   (where the shipped data files, the report templates among them, live: paths, no code).
6. ``bench.errors`` imports nothing from queue-bench (every layer may import it).
7. ``bench.runner``, ``bench.run_summary``, ``bench.sweep`` and ``bench.plan`` reach an engine only through
   ``bench.engines`` (``get_engine``) and ``bench.engines.base`` (the ``Engine`` interface).
8. An engine does not reach up the chain: ``bench.engines`` imports neither ``bench.runner``,
   ``bench.run_summary``, ``bench.sweep`` nor ``bench.load``.
4. Nothing outside ``bench.cli`` imports ``bench.report`` (only a command renders a report).
5. No layer imports ``bench.cli`` (the commands sit on top).

``KNOWN`` lists the imports that break a rule today, while the redesign is under way. The test
fails on any import that breaks a rule and is not listed, and on a listed one that is gone (so
the list can only shrink, and each fix is recorded by deleting its line).
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
DRIVERS = {"psycopg", "psycopg_binary", "psycopg_c", "pymysql", "mariadb", "MySQLdb"}

#: (importing module, imported module) pairs that break a rule today; see the module docstring.
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """``name`` (dotted) is a module or package under the repository root."""
    path = BENCH.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or path.is_dir()


def _package(path: Path) -> str:
    """The package a relative import in ``path`` is resolved against: itself for an ``__init__.py``."""
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(name: str, level: int, package: str) -> str:
    """The absolute name of ``name`` imported with ``level`` leading dots from a module of ``package``
    (``"engines.postgres", 2, "bench.report"`` -> ``"bench.engines.postgres"``); ``name`` as is at level 0."""
    if not level:
        return name
    parts = package.split(".")
    return ".".join(parts[:len(parts) - (level - 1)] + ([name] if name else []))


def _from_names(node: ast.ImportFrom, package: str) -> set[str]:
    """What ``from <module> import a, b`` imports: the module, and each name that is a bench module itself.
    A relative module (``from ..engines.postgres import db``, ``from . import x``) is resolved against
    ``package``, the importing module's package."""
    module = _resolve(node.module or "", node.level, package)
    found = {module}
    if module == "bench" or module.startswith("bench."):
        found.update(f"{module}.{alias.name}" for alias in node.names if _is_module(f"{module}.{alias.name}"))
    return found


def _dynamic_import(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("...")`` or ``__import__("...")`` call with a constant name
    imports (a relative name resolved against a constant ``package=``); None for any other call."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    target = node.args[0]
    if not (isinstance(target, ast.Constant) and isinstance(target.value, str)):
        return None
    if name == "import_module" and target.value.startswith("."):
        package = next((k.value for k in node.keywords if k.arg == "package"),
                       node.args[1] if len(node.args) > 1 else None)
        if not (isinstance(package, ast.Constant) and isinstance(package.value, str)):
            return None
        name = target.value.lstrip(".")
        return _resolve(name, len(target.value) - len(name), package.value)
    return target.value


def _imports_in(source: str, package: str, top_level_only: bool = False) -> set[str]:
    """The modules ``source`` (a module of ``package``) imports: ``import``, ``from ... import`` (relative
    ones resolved), and ``importlib.import_module``/``__import__`` with a constant name; lazy ones too
    unless ``top_level_only``."""
    tree = ast.parse(source)
    found = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_from_names(node, package))
        elif isinstance(node, ast.Call) and (dynamic := _dynamic_import(node)):
            found.add(dynamic)
    return found


def _imports(path: Path) -> set[str]:
    return _imports_in(path.read_text(), _package(path))


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def broken_rules(importer: str, imported: str) -> list[str]:
    """The numbers of the rules that ``importer`` importing ``imported`` breaks."""
    broken = []
    top = imported.split(".")[0]
    if top in DRIVERS and not (_within(importer, "bench.engines") and importer.count(".") >= 3):
        broken.append("1: a driver outside bench.engines.<name>")
    if not _within(imported, "bench"):
        return broken
    if (any(_within(importer, p) for p in ("bench.load", "bench.measure"))
            and _within(imported, "bench.engines") and imported not in ("bench.engines", "bench.engines.base")):
        broken.append("2: load/measure past bench.engines.base")
    if (any(_within(importer, p) for p in ("bench.analysis", "bench.report"))
            and not any(_within(imported, p) for p in ("bench.results", "bench.analysis", "bench.report"))
            and imported not in ("bench", "bench.errors", "bench.data")):
        broken.append("3: analysis/report beyond results")
    if _within(imported, "bench.report") and not any(_within(importer, p) for p in ("bench.report", "bench.cli")):
        broken.append("4: a report rendered below cli")
    if _within(imported, "bench.cli") and not _within(importer, "bench.cli"):
        broken.append("5: a layer importing cli")
    if importer == "bench.errors" and imported != "bench.errors":
        broken.append("6: bench.errors importing queue-bench")
    if (any(_within(importer, p) for p in ("bench.runner", "bench.run_summary", "bench.sweep", "bench.plan"))
            and _within(imported, "bench.engines") and imported not in ("bench.engines", "bench.engines.base")):
        broken.append("7: the run or a sweep past the Engine interface")
    if _within(importer, "bench.engines") and any(
            _within(imported, p) for p in ("bench.runner", "bench.run_summary", "bench.sweep", "bench.load")):
        broken.append("8: an engine reaching up the chain")
    return broken


def test_every_import_keeps_the_layer_rules():
    violations = {}
    for path in sorted(BENCH.rglob("*.py")):
        importer = _module_name(path)
        for imported in sorted(_imports(path)):
            rules = broken_rules(importer, imported)
            if rules:
                violations[(importer, imported)] = rules
    new = {pair: rules for pair, rules in violations.items() if pair not in KNOWN}
    gone = KNOWN - set(violations)
    assert not new, "imports that break a layer rule:\n" + "\n".join(
        f"  {a} imports {b}: rule {'; '.join(r)}" for (a, b), r in sorted(new.items()))
    assert not gone, f"fixed, so delete from KNOWN: {sorted(gone)}"


def test_the_rules_catch_what_they_forbid():
    """Each rule, given an import it forbids, says so (the check itself could be wrong)."""
    assert broken_rules("bench.load.swarm", "psycopg")[0].startswith("1")
    assert broken_rules("bench.runner", "psycopg.sql")[0].startswith("1")
    assert broken_rules("bench.engines.postgres.session", "psycopg") == []
    assert broken_rules("bench.load.swarm", "bench.engines.postgres.session")[0].startswith("2")
    assert broken_rules("bench.measure.metrics", "bench.engines.base") == []
    assert broken_rules("bench.report.run_page", "bench.config.run_config")[0].startswith("3")
    assert broken_rules("bench.analysis.statistics", "bench.results.sweep") == []
    assert broken_rules("bench.sweep.driver", "bench.report.run_page")[0].startswith("4")
    assert broken_rules("bench.cli.main", "bench.report.run_page") == []
    assert broken_rules("bench.runner", "bench.cli.calibrate")[0].startswith("5")
    assert broken_rules("bench.report.run_page", "bench.errors") == []
    assert broken_rules("bench.errors", "bench.config.parameters")[0].startswith("6")
    assert broken_rules("bench.runner", "bench.engines.postgres.db")[0].startswith("7")
    assert broken_rules("bench.sweep.driver", "bench.engines") == []
    assert broken_rules("bench.engines.postgres.pgbench", "bench.runner")[0].startswith("8")
    # read from source: a relative import from bench/report into a driver-owning engine module breaks rule 3
    for source in ("from ..engines.postgres import db\n", "from ..engines.postgres.db import connect\n"):
        caught = {name: broken_rules("bench.report.format", name)
                  for name in _imports_in(source, "bench.report") if broken_rules("bench.report.format", name)}
        assert "bench.engines.postgres.db" in caught and caught["bench.engines.postgres.db"][0].startswith("3")


def test_relative_and_dynamic_imports_are_seen():
    """A relative import, ``importlib.import_module`` and ``__import__`` with a constant name are read as the
    absolute module they load."""
    report = "bench.report"  # the package of bench/report/format.py
    for source in ("def f():\n    from ..engines import postgres\n    from ..engines.postgres import db\n",
                   "import importlib\nimportlib.import_module('bench.engines.postgres.db')\n",
                   "from importlib import import_module\nimport_module('..engines.postgres.db', 'bench.report')\n",
                   "import importlib\nimportlib.import_module('.db', package='bench.engines.postgres')\n",
                   "__import__('bench.engines.postgres.db')\n"):
        found = _imports_in(source, report)
        assert "bench.engines.postgres.db" in found, source
    assert _imports_in("from . import format\n", report) == {"bench.report", "bench.report.format"}
    assert _imports_in("from . import x\n", "bench.engines.postgres") == {"bench.engines.postgres"}
    assert _imports_in("from .. import errors\n", "bench.report") == {"bench", "bench.errors"}
    assert _package(BENCH / "report" / "__init__.py") == "bench.report"
    assert _package(BENCH / "report" / "format.py") == "bench.report"
    # a name only known when it runs is not guessed
    assert _imports_in("import importlib\nimportlib.import_module(f'bench.{x}')\n", report) == {"importlib"}


def _top_level_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports at module level (what runs when it is imported)."""
    return {name for name in _imports_in(path.read_text(), _package(path), top_level_only=True)
            if name == "bench" or name.startswith("bench.")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt in graph and nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycle_among_the_modules():
    graph = {_module_name(p): _top_level_imports(p) for p in BENCH.rglob("*.py")}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]  # the check itself finds one
