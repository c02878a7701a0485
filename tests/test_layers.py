"""The layers' import rules (docs/architecture.md), read from every import in ``bench/``, lazy ones included.

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


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "bench" or node.module.startswith("bench."):  # from bench.x import module
                found.update(f"{node.module}.{alias.name}" for alias in node.names
                             if (BENCH.parent / f"{node.module}.{alias.name}".replace(".", "/")).with_suffix(".py")
                             .exists() or (BENCH.parent / f"{node.module}.{alias.name}".replace(".", "/")).is_dir())
    return found


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


def _top_level_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports at module level (what runs when it is imported)."""
    found = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("bench"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if (BENCH.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists())
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("bench"))
    return found


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
