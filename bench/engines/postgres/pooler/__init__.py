"""The embedded connection pooler (``POOLER=pgbouncer``): a throwaway PgBouncer in front of the run's server
(:mod:`.pgbouncer`), its settings (:mod:`.settings`), its binary (:mod:`.binary`) and its console (:mod:`.console`).
docs/poolers.md, "The embedded pooler"."""

from __future__ import annotations

from typing import Any, Callable

from bench.engines.postgres.pooler.binary import require_pooler_binary
from bench.engines.postgres.pooler.console import console_rows
from bench.engines.postgres.pooler.pgbouncer import Pooler, embedded_pgbouncer

__all__ = ["Pooler", "require_pooler_binary", "console_rows", "embedded_pooler"]


def embedded_pooler(dsn_direct: str, cfg: Any, clients: int, log: Callable[[str], None] = print):
    """``cfg``'s pooler (``POOLER``, ``POOL_MODE``, ``POOL_SIZE``) in front of ``dsn_direct`` for ``clients`` client
    connections: a context manager yielding its :class:`Pooler` (:func:`.pgbouncer.embedded_pgbouncer`)."""
    return embedded_pgbouncer(dsn_direct, cfg.pool_mode, cfg.pool_size, clients, log=log)
