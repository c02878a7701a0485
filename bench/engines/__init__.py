"""``bench.engines``: the database engines behind one interface (:mod:`bench.engines.base`).

:func:`get_engine` is how the run and the sweep driver reach an engine; only the engine's own
package imports its driver (see docs/architecture.md).
"""

from __future__ import annotations

#: Engines queue-bench can run, by name.
ENGINES = ("postgres", "mariadb")


def get_engine(name: str = "postgres"):
    """The :class:`bench.engines.base.Engine` called ``name``. Imported on first use, after
    :mod:`bench.load.swarm` has applied gevent's monkey-patching. Raises ConfigError (``ENGINE``)
    for an unknown name."""
    if name == "postgres":
        from bench.engines.postgres.engine import ENGINE

        return ENGINE
    if name == "mariadb":
        from bench.engines.mariadb.engine import ENGINE

        return ENGINE
    from bench.errors import ConfigError

    raise ConfigError("ENGINE", f"unknown engine {name!r}; allowed: {', '.join(ENGINES)}")


_DEFINED: dict = {}


def engine_for(cfg):
    """The :class:`bench.engines.base.Engine` a run of ``cfg`` (a RunConfig) uses: the engine of
    ``cfg.engine`` for ``QUEUE=builtin``, else the queue definition's
    (:class:`bench.engines.postgres.defined_engine.DefinedQueueEngine`, one per definition and process).
    Raises ConfigError (``ENGINE``, ``QUEUE``)."""
    from bench.config.queue_definition import is_builtin, load_queue

    if is_builtin(cfg.queue):
        return get_engine(cfg.engine)
    if cfg.queue not in _DEFINED:
        from bench.engines.postgres.defined_engine import DefinedQueueEngine
        from bench.engines.postgres.libraries import resolve

        _DEFINED[cfg.queue] = DefinedQueueEngine(resolve(load_queue(cfg.queue)))
    return _DEFINED[cfg.queue]
