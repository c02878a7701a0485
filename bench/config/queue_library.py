"""A queue definition's ``[library]`` and ``[library.worker]`` tables. Standard library only; never imports it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from bench.config.definition_fields import fail as _fail, only as _only, text as _text

#: ``[library]`` keys: a queue library's own schema and SQL (see :func:`library_of`).
_LIBRARY_KEYS = {"package", "version", "ddl_file", "generated", "parameters", "measurement", "plans", "worker"}
#: ``[library.worker]`` keys: how ``LIBRARY_MODE=worker`` runs the library's own worker (see :func:`library_of`).
_WORKER_KEYS = {"requires", "install", "defaults", "wakeup", "workers_per_batch", "measurement"}
#: Run parameters that do not apply with ``LIBRARY_MODE=worker``: the library's own worker decides them.
WORKER_NOT_APPLICABLE = {
    "isolation": "the library's own connections run at the server's default isolation",
    "policy": "the library's own worker sends its own claim",
    "txn": "the library's own worker commits each claim on its own",
    "prepared": "the library's own driver decides how its statements are sent",
    "plan_cache": "the library's own driver decides how its statements are sent",
    "sync_commit": "the library's own connections commit at the server's synchronous_commit",
    "reaper_interval_s": "the library's own recovery runs: see LEASE_S",
    "bursts": "not built for the library's own producers (library mode sql has them)",
    "future_share": "not built for the library's own producers (library mode sql has them)",
    "future_delay_ms": "not built for the library's own producers (library mode sql has them)",
    "priority_mix": "not built for the library's own producers (library mode sql has them)",
}
#: What a run's plan figures are under ``LIBRARY_MODE=worker`` (the report's plan section says it).
WORKER_PLANS = ("Under LIBRARY_MODE=worker the library's own worker sends its own statements on its own connections, "
                "which the tool does not EXPLAIN: the plans shown are the definition's claim prepared on the tool's "
                "own session, not the worker's statement.")
#: What worker mode takes back from the definition's SQL-path rules: the library's worker maps them.
WORKER_APPLIES = ("lease_s", "wakeup")


def library_of(data: Any, defn: str, statements: dict) -> dict | None:
    """The ``[library]`` table, checked (keys: docs/queues.md); None when ``data`` is None. ``statements``: the
    statement names and their parameters. Raises ConfigError (``QUEUE``), e.g. for another installed version."""
    from importlib import metadata  # here: it imports email, zipfile, csv (~10 ms), which --help does not pay

    if data is None:
        return None
    library = dict(_only(data, _LIBRARY_KEYS, defn, "library"))
    for key in ("package", "version", "measurement"):
        _text(library, key, defn, "library.", required=True)
    package = library["package"]
    if _missing(package):
        raise _fail(defn, f"it drives {package} {library['version']}, which is not installed", install_extra(package))
    try:
        installed = metadata.version(package)
    except metadata.PackageNotFoundError:
        installed = None
    if installed != library["version"]:
        raise _fail(defn, f"it drives {package} {library['version']}, and {installed or 'no release'} is installed",
                    f"{install_extra(package)} (it pins {package}=={library['version']})")
    library["worker"] = _worker_of(library.get("worker"), defn)
    generated = library.get("generated", [])
    if not isinstance(generated, list) or not set(generated) <= set(statements) | {"ddl"}:
        raise _fail(defn, f"library.generated is {generated!r}", "a list of statement names (and ddl)")
    parameters = library.get("parameters", {})
    for key, names in parameters.items():
        if key not in generated or not isinstance(names, list) or not set(names) <= set(statements[key]):
            raise _fail(defn, f"library.parameters.{key} is {names!r}",
                        "for a generated statement, a list of its parameters")
    return library


def _worker_of(data: Any, defn: str) -> dict:
    """``[library.worker]``, checked: ``requires``, ``install``, ``defaults``, ``wakeup``, ``workers_per_batch``,
    ``measurement``. Raises ConfigError (``QUEUE``)."""
    if not isinstance(data, dict):
        raise _fail(defn, "[library.worker] is missing", "a [library.worker] table (docs/queues.md)")
    worker = dict(_only(data, _WORKER_KEYS, defn, "library.worker"))
    for key in ("install", "measurement"):
        _text(worker, key, defn, "library.worker.", required=True)
    worker.setdefault("requires", [])
    worker.setdefault("defaults", {})
    worker.setdefault("wakeup", ["notify"])
    worker.setdefault("workers_per_batch", 0)
    return worker


def install_extra(package: str) -> str:
    """The command that installs queue library ``package`` at its definition's release: the extra of the same
    name (``pyproject.toml``), or from a checkout ``make install EXTRAS=…``."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "Makefile").is_file() and (checkout / "pyproject.toml").is_file():
        return f"make install EXTRAS={package} (in {checkout}; elsewhere pip install 'queue-bench[{package}]')"
    return f"pip install 'queue-bench[{package}]'"


def _missing(name: str) -> bool:
    """True when module ``name`` cannot be located here (located, not imported)."""
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def missing_worker_module(library: dict) -> str | None:
    """The first import name ``LIBRARY_MODE=worker`` needs (the package, then ``requires``) missing here, or None."""
    return next((name for name in (library["package"], *library["worker"]["requires"]) if _missing(name)), None)


def library_file(library: dict, defn: str) -> str:
    """The text of ``library["ddl_file"]`` inside the installed package (located, not imported)."""
    spec = importlib.util.find_spec(library["package"])
    path = Path(spec.origin).parent / library["ddl_file"] if spec and spec.origin else None
    if path is None or not path.is_file():
        raise _fail(defn, f"library.ddl_file {library['ddl_file']!r} is not in the installed {library['package']}",
                    "a file of the installed package, e.g. sql/schema.sql")
    return path.read_text()
