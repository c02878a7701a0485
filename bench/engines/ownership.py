"""The tool's schemas (databases on MariaDB), one flow on every engine over each engine's
:class:`SchemaOwnership`: which are its own (marked), when one is refused, locked, created, dropped and
cleaned (the rule: docs/running.md)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

from bench.config.connection_budget import ConnectionBudget
from bench.engines.common import ToolSchema
from bench.errors import ConfigError
from bench.usage import option

Conn = Any
#: The comment that marks a schema (a database on MariaDB) as the tool's, written when it creates one.
SCHEMA_MARK = "queue-bench schema: created and dropped by queue-bench"


@dataclasses.dataclass(frozen=True)
class SchemaOwnership:
    """One engine's SQL for its schemas (each callable takes an admin connection first), and the flows over it."""

    #: what a schema is called on this engine (``schema``, ``database``), and where its lock is known
    word: str
    lock_scope: str
    #: ``(conn, schema) -> "absent" | "ours" | "foreign"``
    state: Callable[[Conn, str], str]
    #: ``(conn, schema) -> [what outside it depends on it, as a phrase]``
    dependents: Callable[[Conn, str], list[str]]
    #: ``(conn, schema) -> bool``: take its lock for this session, True when taken; and release it
    try_lock: Callable[[Conn, str], bool]
    unlock: Callable[[Conn, str], None]
    #: create it, marked as the tool's; drop it (called only on the tool's own, with no dependent)
    create_marked: Callable[[Conn, str], None]
    drop_owned: Callable[[Conn, str], None]
    #: ``conn -> {"max_connections", "reserved", "in_use", "available"}``
    headroom: Callable[[Conn], dict]
    #: ``conn -> [ToolSchema]``: every schema carrying the mark
    listed: Callable[[Conn], list[ToolSchema]]
    #: the schema holding saved states for runs in a schema (its lock is the run schema's)
    state_schema_for: Callable[[str], str]

    def refuse_foreign(self, conn: Conn, schema: str) -> None:
        """Raise ConfigError (``SCHEMA``) when ``schema`` exists and is not the tool's."""
        if self.state(conn, schema) == "foreign":
            raise ConfigError("SCHEMA", f"{self.word} {schema!r} exists and was not created by queue-bench; allowed: "
                                        f"another {option('schema')} (the tool never touches a {self.word} it did "
                                        "not create)")

    def refuse_dependents(self, conn: Conn, schema: str) -> None:
        """Raise ConfigError (``SCHEMA``) naming what outside ``schema`` depends on it, if anything does."""
        dependents = self.dependents(conn, schema)
        if dependents:
            raise ConfigError("SCHEMA", f"objects outside {self.word} {schema!r} depend on it ({'; '.join(dependents)}); "
                                        f"queue-bench drops only its own {self.word}: remove them, or choose "
                                        f"another {option('schema')}")

    def check_usable(self, conn: Conn, schema: str) -> None:
        """ConfigError (``SCHEMA``) unless ``schema`` is absent, or the tool's with nothing outside depending on it."""
        self.refuse_foreign(conn, schema)
        if self.state(conn, schema) == "ours":
            self.refuse_dependents(conn, schema)

    def lock(self, conn: Conn, schema: str) -> None:
        """Take ``schema``'s lock on ``conn`` until it closes or :attr:`unlock`; ConfigError (``SCHEMA``) when held."""
        if not self.try_lock(conn, schema):
            raise ConfigError("SCHEMA", f"schema {schema!r} is in use by another queue-bench run on this "
                                        f"{self.lock_scope}; wait for it or choose another {option('schema')}")

    def check_capacity(self, conn: Conn, needed: int | ConnectionBudget) -> dict:
        """The server's connection headroom; the budget's refusal (ConfigError: ``WORKERS``, ``POOL_SIZE`` behind
        the embedded pooler) when fewer than ``needed`` are free (a :class:`ConnectionBudget`'s ``server``, or a
        count of direct connections)."""
        budget = needed if isinstance(needed, ConnectionBudget) else ConnectionBudget(needed, needed, 0)
        room = self.headroom(conn)
        if room["available"] < budget.server:
            raise budget.refusal(room)
        return room

    def check(self, conn: Conn, schema: str, connections: int | ConnectionBudget) -> dict:
        """:meth:`check_usable` and :meth:`check_capacity` (``connections`` free), without the lock."""
        self.check_usable(conn, schema)
        return self.check_capacity(conn, connections)

    def claim(self, conn: Conn, schema: str, connections: int | ConnectionBudget) -> dict:
        """:meth:`check_usable`, then the lock, held by ``conn`` until the run ends, then :meth:`check_capacity`."""
        self.check_usable(conn, schema)
        self.lock(conn, schema)
        return self.check_capacity(conn, connections)  # this admin connection is already counted

    def drop(self, conn: Conn, schema: str) -> None:
        """Drop ``schema`` only if it is the tool's; ConfigError (``SCHEMA``), dropping nothing, when objects
        outside depend on it."""
        if self.state(conn, schema) == "ours":
            self.refuse_dependents(conn, schema)
            self.drop_owned(conn, schema)

    def recreate(self, conn: Conn, schema: str) -> None:
        """The run's schema made afresh: checked (:meth:`check_usable`), dropped, created and marked."""
        self.check_usable(conn, schema)
        self.drop(conn, schema)
        self.create_marked(conn, schema)

    @contextlib.contextmanager
    def borrowed(self, conn: Conn, schema: str) -> Iterator[None]:
        """``schema`` checked, locked and created if absent for the block (a probe's), then dropped if created
        and unlocked. Raises ConfigError (``SCHEMA``)."""
        self.check_usable(conn, schema)
        self.lock(conn, schema)
        created = False
        try:
            if self.state(conn, schema) == "absent":
                self.create_marked(conn, schema)
                created = True
            yield
        finally:
            if created:
                self.drop(conn, schema)
            self.unlock(conn, schema)

    def clean(self, conn: Conn, *, dry_run: bool = False) -> list[ToolSchema]:
        """``qbench clean``: every schema :attr:`listed`, each dropped under its lock unless ``in_use`` (a
        saved-state schema with its run schema), with ``dependents``, or ``dry_run``; returns them all."""
        found = self.listed(conn)
        for schema in found:
            owners = [schema.name]
            base = schema.name[:-len("_state")]
            if schema.name.endswith("_state") and self.state_schema_for(base) == schema.name:
                owners.append(base)
            taken = []
            try:
                for owner in owners:
                    if not self.try_lock(conn, owner):
                        schema.in_use = True
                        break
                    taken.append(owner)
                if not schema.in_use:
                    schema.dependents = tuple(self.dependents(conn, schema.name))
                if not schema.in_use and not schema.dependents and not dry_run:
                    self.drop_owned(conn, schema.name)
            finally:
                for owner in taken:
                    self.unlock(conn, owner)
        return found
