"""What the run asks of Locust's ``MasterRunner`` that Locust has no option for: which Locust workers
take part in the run. Used by :class:`bench.load.distributed.DistributedDriver`.

Locust's master hands a share of the users to every worker that connects, at once, even while a
test runs (``locust.runners.MasterRunner.client_listener``, ``client_ready``): a worker the run
refuses must get none, nor take any from the run's processes.
"""

from __future__ import annotations

from typing import Callable, Iterable

import gevent

__all__ = ["drop_workers", "keep_out_latecomers"]


def drop_workers(master, client_ids: Iterable[str]) -> None:
    """Remove the Locust workers ``client_ids`` from ``master``'s list, so that no dispatch counts them."""
    for client_id in list(client_ids):
        master.clients.pop(client_id, None)


def keep_out_latecomers(master, unwanted: Callable[[str], bool]) -> None:
    """From now on, a Locust worker that connects while ``unwanted(client_id)`` is true gets no users.
    Locust fires ``worker_connect`` just before it files the newcomer and redispatches, so the
    master's dispatcher is hidden until Locust has done so, then the newcomer is dropped
    (:func:`drop_workers`) and the dispatcher restored: the run's users stay where they are."""

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
