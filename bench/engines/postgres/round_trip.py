"""PostgreSQL's part of the round-trip probe (:mod:`bench.engines.round_trip`): its connection and its empty
round trip."""

from __future__ import annotations

from typing import Callable

from bench.engines.postgres.adapter import connect, empty_round_trip


def open_probe(dsn: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(ping, close) on a new connection to ``dsn``: ping sends the empty query, one round trip. Raises
    :class:`bench.engines.base.ConnectFailed`."""
    conn = connect(dsn, application_name="queue-bench round trip")
    return (lambda: empty_round_trip(conn)), conn.close
