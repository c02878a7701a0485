"""How many connections a run needs from the server, and from a pooler in front of it: the one rule every command
reads (docs/poolers.md, "Connections behind a pool"). Without a pooler each worker, producer and the reaper holds a
server connection; behind one they are the pooler's clients and the server sees its pool, so the server's budget is
the pool size plus the tool's own direct connections. Standard library only."""

from __future__ import annotations

import dataclasses

from bench.errors import ConfigError
from bench.usage import named, option

#: Where the run's clients connect: no pooler (direct), the embedded pooler (``POOLER``: its pool size and
#: ``max_client_conn`` are the tool's), or a user's (``DSN`` through it, ``DSN_DIRECT``: its sizes are its own).
NO_POOLER, EMBEDDED, YOURS = "none", "embedded", "yours"


@dataclasses.dataclass(frozen=True)
class ConnectionBudget:
    """A run's connections (:func:`connection_budget`): ``workers``; ``clients`` the connections its workers, producers
    and reaper open (direct without a pooler, else the pooler's clients); ``direct`` the tool's own besides the admin
    connection (the monitor's two, VACUUM, the archive mover, fault windows, the standby sampler), which always go to
    the server; ``pooler`` :data:`NO_POOLER`, :data:`EMBEDDED` or :data:`YOURS`; ``pool_size`` the pooler's server
    connections when the tool knows it (the embedded pooler's ``POOL_SIZE``; a user's only when read from its
    console), else None; ``max_client_conn`` the pooler's client limit when known, else None."""

    workers: int
    clients: int
    direct: int
    pooler: str = NO_POOLER
    pool_size: int | None = None
    max_client_conn: int | None = None

    @property
    def server(self) -> int:
        """Connections the server must have free besides the admin one: one per client and the direct ones without
        a pooler; behind one, its pool size (0 when unknown: a user's pooler opens its server connections
        itself, under its own limits, which the tool does not check) and the direct ones."""
        if self.pooler == NO_POOLER:
            return self.clients + self.direct
        return self.pooled + self.direct

    @property
    def pooled(self) -> int:
        """The pool's server connections the run can use: its size, or fewer clients (a client holds at most one
        server connection at a time: https://www.pgbouncer.org/config.html#default_pool_size); 0 when unknown."""
        return min(self.pool_size, self.clients) if self.pool_size else 0

    def sentence(self) -> str:
        """The connection line of a run: ``"500 workers need 23 server connections through the pool (pool size 20 +
        3 direct)"``, the admin connection counted among the direct ones; without a pooler, one per client."""
        workers, direct = f"{self.workers} worker{'s' if self.workers != 1 else ''}", self.direct + 1
        if self.pooler == NO_POOLER:
            return f"{workers} need {self.server + 1} server connections ({self.clients} clients + {direct} direct)"
        if self.pool_size is None:
            return (f"{workers} need {self.clients} client connections to the pooler and {direct} direct ones to the "
                    "server; the pooler's own server connections are not checked (its pool size is unknown)")
        pool = (f"pool size {self.pool_size}" if self.pooled == self.pool_size
                else f"at most {self.pooled} of the pool of {self.pool_size}, one per client")
        return f"{workers} need {self.server + 1} server connections through the pool ({pool} + {direct} direct)"

    def refusal(self, room: dict[str, int]) -> ConfigError:
        """The refusal when the server has fewer than :attr:`server` free (``room``: the engine's headroom,
        ``{"max_connections", "reserved", "in_use", "available"}``): naming ``WORKERS`` without a pooler,
        ``POOL_SIZE`` behind the embedded one, ``DSN_DIRECT`` behind a user's (only the tool's own go there)."""
        reserved = f" - reserved {room['reserved']}" if room["reserved"] else ""
        free = (f"the server has {room['available']} free (max_connections {room['max_connections']}{reserved} - "
                f"in use {room['in_use']})")
        if self.pooler == NO_POOLER:
            return ConfigError("WORKERS", f"the run needs {self.server} more connections but {free}; " + named(
                "allowed: fewer {workers} (or {producers}), or a server with a larger max_connections"))
        if self.pooler == EMBEDDED:
            most = room["available"] - self.direct
            allowed = (f"{option('pool_size')} from 1 to {most}" if most >= 1 else "a server with more free connections")
            return ConfigError("POOL_SIZE", f"{self.pool_size} server connections for the pool and the tool's "
                                            f"{self.direct} direct ones need {self.server}, and {free}; allowed: "
                                            f"{allowed}")
        pool = f"your pooler's pool of {self.pool_size} and " if self.pool_size else ""
        return ConfigError("DSN_DIRECT", f"{pool}the tool's own {self.direct} direct connections (the monitor, the "
                                         f"audit, ...) need {self.server}, and {free}; allowed: a server with more "
                                         "free connections" + (", or a smaller pool" if pool else ""))

    def check_clients(self) -> None:
        """Refuse (ConfigError ``WORKERS``) more clients than the pooler's ``max_client_conn`` when it is known (the
        embedded pooler's, which it is sized from; a user's once read from its console); nothing is checked
        when it is not: PgBouncer then refuses the clients past it as they connect, and the run starts short."""
        if self.max_client_conn is None or self.clients <= self.max_client_conn:
            return
        raise ConfigError("WORKERS", f"the run opens {self.clients} client connections through the pooler (workers, "
                                     f"reaper, producers, the round-trip probe) and its max_client_conn is {self.max_client_conn}; allowed: "
                                     + named("fewer {workers} (or {producers}), or a pooler with a larger "
                                             "max_client_conn"))


def connection_budget(workers: int, clients: int, direct: int, pooler: str, pool_size: int | None = None,
                      max_client_conn: int | None = None) -> ConnectionBudget:
    """The :class:`ConnectionBudget` of a run (``RunConfig.connection_budget`` gives the arguments): ``pool_size``
    and ``max_client_conn`` kept only behind a pooler. For a user's pooler they are None until read from its
    console (``SHOW CONFIG``'s ``default_pool_size`` and ``max_client_conn``: pass them here, then the server is
    checked for the pool too and the clients against its limit)."""
    if pooler == NO_POOLER:
        return ConnectionBudget(workers, clients, direct)
    return ConnectionBudget(workers, clients, direct, pooler, pool_size, max_client_conn)


def connections_needed(budget: ConnectionBudget) -> dict:
    """run.json's ``connections_needed``: the server connections the run needs, the admin one counted
    (``server``), the clients (workers, producers, reaper, the round-trip probe, effects; a pooler's clients behind
    one), the tool's direct ones with the admin (``direct``), ``pooler``, ``pool_size`` and :meth:`ConnectionBudget.sentence`."""
    return {"server": budget.server + 1, "clients": budget.clients, "direct": budget.direct + 1,
            "pooler": budget.pooler, "pool_size": budget.pool_size, "sentence": budget.sentence()}
