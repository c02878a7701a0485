"""Which Locust workers take part in a run: a latecomer the run refuses gets none of its users
(docs/architecture.md)."""

from __future__ import annotations

from typing import Callable, Iterable

import gevent

__all__ = ["drop_workers", "keep_out_latecomers"]


def drop_workers(master, client_ids: Iterable[str]) -> None:
    """Remove the Locust workers ``client_ids`` from ``master``'s list, so that no dispatch counts them."""
    for client_id in list(client_ids):
        master.clients.pop(client_id, None)


def keep_out_latecomers(master, unwanted: Callable[[str], bool]) -> None:
    """From now on a Locust worker that connects while ``unwanted(client_id)`` gets no users: the dispatcher is
    hidden while Locust files the newcomer (``worker_connect`` fires first), then it is dropped."""

    def on_connect(client_id, **_):
        dispatcher = master._users_dispatcher  # noqa: SLF001 - Locust has no switch for this
        if dispatcher is None or not unwanted(client_id):
            return
        master._users_dispatcher = None

        def restore():
            drop_workers(master, [client_id])
            master._users_dispatcher = dispatcher
        gevent.spawn(restore)  # runs once Locust's handler has finished with this message

    master.environment.events.worker_connect.add_listener(on_connect)
