"""gevent's monkey-patching, applied once at each entry point of a process that runs load, before any driver is
imported (psycopg picks its wait function on import: ``psycopg/waiting.py``, ``_is_select_patched``;
docs/architecture.md). Imports nothing from queue-bench."""

from __future__ import annotations


def patch() -> None:
    """Monkey-patch for gevent (no-op when done), and let a Ctrl-C through gevent's hub unprinted (it still
    reaches the main greenlet as KeyboardInterrupt)."""
    import gevent  # here, not at the top: qbench imports this module for every command, --help too, and
    from gevent import monkey  # gevent takes ~0.2 s to import, which only the commands that run load pay

    if not monkey.is_module_patched("select"):
        monkey.patch_all()
    hub = gevent.get_hub()
    if KeyboardInterrupt not in hub.NOT_ERROR:
        hub.NOT_ERROR = (*hub.NOT_ERROR, KeyboardInterrupt)
