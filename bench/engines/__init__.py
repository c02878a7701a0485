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
