"""The wait events of the workers' active backends, per second (docs/network.md, "Where the server's time goes:
wait events"): the intervals.csv columns, one per wait event type, and the type each one counts. PostgreSQL's
wait event types: https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE."""

from __future__ import annotations

#: What an active backend with no wait event is doing: on a core, or runnable and waiting for one (the server
#: cannot tell those apart).
CPU = "CPU"
#: The wait event types with a column of their own (PostgreSQL's names), and the column of each; a type not
#: listed (Activity, InjectionPoint, a later server's) is counted in ``wait_other_backends``.
TYPE_COLUMNS = {CPU: "wait_cpu_backends", "Lock": "wait_lock_backends", "LWLock": "wait_lwlock_backends",
                "IO": "wait_io_backends", "IPC": "wait_ipc_backends", "Client": "wait_client_backends",
                "Timeout": "wait_timeout_backends", "BufferPin": "wait_bufferpin_backends",
                "Extension": "wait_extension_backends"}
OTHER_COLUMN = "wait_other_backends"
#: intervals.csv's columns: each type's mean active backends over the second's samples (the samples in a second
#: with any; each sample counts the backends in that state then), the samples taken in the second, and the time
#: their queries took (µs; inside ``monitor_query_us`` too).
WAIT_EVENT_COLUMNS = (*TYPE_COLUMNS.values(), OTHER_COLUMN, "wait_samples", "wait_query_us")


def type_column(wait_type: str) -> str:
    """The intervals.csv column that counts ``wait_type`` (:data:`CPU` for none)."""
    return TYPE_COLUMNS.get(wait_type, OTHER_COLUMN)
