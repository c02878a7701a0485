"""The layers' import rules (docs/architecture.md), read from every import in ``bench/``: lazy ones, relative
ones (resolved against the importing module's package) and ``importlib.import_module``/``__import__`` calls
with a constant name included.

Rules:
1. A database driver (psycopg, PyMySQL, mariadb) is imported only under ``bench/engines/<name>/``.
2. ``bench.load`` and ``bench.measure`` see the engines only through ``bench.engines.base``.
3. ``bench.analysis`` and ``bench.report`` import only ``bench.results``, ``bench.analysis`` and
   ``bench.report`` (and nothing that runs load or talks to a database), ``bench.errors``, ``bench.usage`` and
   ``bench.data``
   (where the shipped data files, the report templates among them, live: paths, no code).
6. ``bench.usage`` imports nothing from queue-bench, ``bench.errors`` only ``bench.usage`` (every layer may import
   them).
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
import re
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
            and imported not in ("bench", "bench.errors", "bench.usage", "bench.data")):
        broken.append("3: analysis/report beyond results")
    if _within(imported, "bench.report") and not any(_within(importer, p) for p in ("bench.report", "bench.cli")):
        broken.append("4: a report rendered below cli")
    if _within(imported, "bench.cli") and not _within(importer, "bench.cli"):
        broken.append("5: a layer importing cli")
    if importer in ("bench.errors", "bench.usage") and imported not in (importer, "bench.usage"):
        broken.append(f"6: {importer} importing queue-bench")
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
    assert broken_rules("bench.usage", "bench.errors")[0].startswith("6")
    assert broken_rules("bench.errors", "bench.usage") == []
    assert broken_rules("bench.analysis.plan_answer", "bench.usage") == []
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


# -- the driver seam (docs/architecture.md, "The driver adapters")
#: The two driver adapters: only these packages call a driver's connect or catch a driver's errors.
ADAPTERS = ("bench/engines/postgres/adapter/", "bench/engines/mariadb/adapter/")
#: The queue libraries' own workers keep their own drivers (asyncpg, procrastinate's connector), by design.
LIBRARY_WORKERS = "bench/engines/postgres/library_workers/"
#: PgBouncer's console: its ``SET key = value`` changes the pooler's setting (``server_login_retry`` during a
#: re-point), not a server session's.
POOLER_CONSOLE = "bench/engines/postgres/pooler/repoint.py"
_DRIVER_ROOTS = {"psycopg", "pymysql"}


def _driver_names(tree: ast.Module) -> set[str]:
    """The names a module binds to a driver or a part of one (``psycopg``, ``errors`` from ``from psycopg
    import errors``, ``OperationalError`` ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in _DRIVER_ROOTS}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _DRIVER_ROOTS:
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def driver_seam_breaches(source: str, path: str) -> list[str]:
    """Where ``source`` (the module at ``path``) calls a driver's ``connect`` or catches a driver's error outside
    :data:`ADAPTERS`: ``"<path>:<line> <what>"``."""
    if path.startswith(ADAPTERS) or path.startswith(LIBRARY_WORKERS):
        return []
    tree = ast.parse(source)
    drivers, found = _driver_names(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if any(_root(t) in drivers for t in types):
                found.append(f"{path}:{node.lineno} catches a driver's error")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "connect"
              and _root(node.func) in drivers):
            found.append(f"{path}:{node.lineno} calls a driver's connect")
    return found


def test_only_the_adapters_connect_and_catch_driver_errors():
    found = []
    for path in sorted(BENCH.rglob("*.py")):
        found += driver_seam_breaches(path.read_text(), path.relative_to(BENCH.parent).as_posix())
    assert not found, "outside the driver adapters:\n" + "\n".join(found)


def test_the_seam_rule_catches_what_it_forbids():
    where = "bench/engines/postgres/monitor.py"
    assert driver_seam_breaches("import psycopg\ntry:\n    pass\nexcept psycopg.Error:\n    pass\n", where)
    assert driver_seam_breaches("from psycopg import errors\ntry:\n    pass\nexcept (ValueError, errors.QueryCanceled):\n"
                                "    pass\n", where)
    assert driver_seam_breaches("import pymysql\nc = pymysql.connect(host='x')\n", where)
    assert driver_seam_breaches("import psycopg\nc = psycopg.connect('')\n", where)
    assert not driver_seam_breaches("import psycopg\nc = psycopg.connect('')\n", "bench/engines/postgres/adapter/connect.py")
    assert not driver_seam_breaches("try:\n    pass\nexcept EngineError:\n    pass\n", where)


#: A statement that leaves state on the session (not a transaction's ``SET LOCAL``/``SET TRANSACTION``,
#: MariaDB's one-statement ``SET STATEMENT … FOR`` or a user variable ``SET @x``).
_SESSION_STATE = re.compile(
    r"(^|;)\s*(SET\s+(SESSION\s+)?(?!LOCAL\b|TRANSACTION\b|STATEMENT\b|@)[\w{}\x22]+\s*(=|TO\b)|PREPARE\s+\w+\s+(AS|FROM)\b"
    r"|DEALLOCATE\s+(PREPARE\s+)?\w|(UN)?LISTEN\s)|pg_(try_)?advisory_(un)?lock\(|\bGET_LOCK\(|\bRELEASE_LOCK\(",
    re.I)


def session_state_breaches(source: str, path: str) -> list[str]:
    """Where ``source`` (the module at ``path``), outside :data:`ADAPTERS`, sets session state: a SQL string that
    ``SET``s a session value, prepares or deallocates by name, listens or takes a session lock, or a call that
    turns on psycopg's own preparation (``prepare=True``, ``prepare_threshold=``). Docstrings are not read."""
    if path.startswith(ADAPTERS) or path.startswith(LIBRARY_WORKERS) or path == POOLER_CONSOLE:
        return []
    tree = ast.parse(source)
    skipped = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    skipped |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}  # read whole, below
    found = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            text = node.value
        elif isinstance(node, ast.JoinedStr):  # an f-string: its fixed parts, each value as {}
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if text is not None and _SESSION_STATE.search(text):
            found.append(f"{path}:{node.lineno} {text[:60]!r}")
        elif isinstance(node, ast.keyword) and (node.arg == "prepare_threshold" or (
                node.arg == "prepare" and isinstance(node.value, ast.Constant) and node.value.value is True)):
            found.append(f"{path}:{node.value.lineno} {node.arg}=")
    return found


def test_nothing_outside_the_adapters_sets_session_state():
    found = []
    for path in sorted(BENCH.rglob("*.py")):
        found += session_state_breaches(path.read_text(), path.relative_to(BENCH.parent).as_posix())
    assert not found, "session state set outside the driver adapters:\n" + "\n".join(found)


def test_the_session_state_rule_catches_what_it_forbids():
    where = "bench/engines/postgres/monitor.py"
    for text in ("SET search_path = x", "SET SESSION innodb_lock_wait_timeout = 1", "PREPARE q AS SELECT 1",
                 "BEGIN; SET statement_timeout TO 5", "LISTEN chan", "SELECT pg_advisory_lock(1)",
                 "SELECT GET_LOCK('x', 0)", "DEALLOCATE q"):
        assert session_state_breaches(f"q = {text!r}\n", where), text
    assert session_state_breaches("q = f'SET {name} = {value}'\n", where)
    assert not session_state_breaches("q = f'UPDATE {t} SET status = 1'\n", where)
    assert session_state_breaches("c.execute('SELECT 1', prepare=True)\n", where)
    assert session_state_breaches("psycopg_like(prepare_threshold=5)\n", where)
    for text in ("SET LOCAL lock_timeout = 1", "UPDATE t SET status = 'done'", "SET TRANSACTION ISOLATION LEVEL x",
                 "SET STATEMENT max_statement_time = 1 FOR SELECT 1", "SET @id = NULL"):
        assert not session_state_breaches(f"q = {text!r}\n", where), text
    assert not session_state_breaches('def f():\n    """SET search_path = x"""\n', where)
    assert not session_state_breaches("q = 'SET search_path = x'\n", "bench/engines/mariadb/adapter/connection.py")
