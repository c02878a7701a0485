"""Queue libraries whose SQL is written by their own code at run time (``[library] generated`` in a
queue definition): one module per library, named after its package, with a ``generated(defn)`` that
returns ``{statement name or "ddl": text}`` in the definition's form (``:name`` parameters).

A library whose schema is a file and whose claim path is SQL functions (procrastinate) needs no module
here: its definition names the file and calls the functions. Imported only by the engine, after
gevent's monkey-patching (a library may import a database driver).
"""

from __future__ import annotations

import dataclasses
import importlib

from bench.config.queue_definition import QueueDefinition
from bench.config.sql_text import scan_parameters
from bench.errors import ConfigError


def resolve(defn: QueueDefinition) -> QueueDefinition:
    """``defn`` with the statements (and DDL) its library generates filled in. Raises ConfigError
    (``QUEUE``) when the library's code does not give exactly the statements and parameters the
    definition declares (a new release of the library changed them)."""
    if not defn.generated:
        return defn
    package = defn.library["package"]
    made = importlib.import_module(f"{__name__}.{package}").generated(defn)
    if set(made) != set(defn.generated):
        raise ConfigError("QUEUE", f"queue {defn.name!r}: {package} generated {sorted(made)}, the definition "
                                   f"declares {sorted(defn.generated)}; allowed: the declared statements")
    declared = defn.library.get("parameters", {})
    for key, text in made.items():
        used = {p for _, _, p in scan_parameters(text)} if key != "ddl" else set()
        if used != set(declared.get(key, [])):
            raise ConfigError("QUEUE", f"queue {defn.name!r}: {package}'s {key} takes "
                                       f"{sorted(used)}, the definition declares {sorted(declared.get(key, []))}; "
                                       "allowed: the declared parameters")
    return dataclasses.replace(defn, ddl=made.get("ddl", defn.ddl),
                               statements={**defn.statements, **{k: v for k, v in made.items() if k != "ddl"}})
