"""Queue libraries whose SQL their own code writes at run time (``[library] generated``): a module per
package whose ``generated(defn)`` returns ``{statement name or "ddl": text}`` with ``:name`` parameters."""

from __future__ import annotations

import dataclasses
import importlib

from bench.config.queue_definition import QueueDefinition
from bench.config.sql_text import scan_parameters
from bench.errors import ConfigError


def resolve(defn: QueueDefinition) -> QueueDefinition:
    """``defn`` with its library's generated statements (and DDL). Raises ConfigError (``QUEUE``) unless they
    are exactly the statements and parameters declared."""
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
