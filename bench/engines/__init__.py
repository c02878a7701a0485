"""``bench.engines``: the database engines behind one interface (:mod:`bench.engines.base`).

:func:`get_engine` is how the run and the sweep driver reach an engine; :func:`capabilities`,
:func:`embedded_server` and :func:`non_loopback_host` are what a command or the configuration asks of
an engine by its name. Only the engine's own package imports its driver (see docs/architecture.md);
an engine's package ``__init__`` (its ``CAPABILITIES``) imports none.
"""

from __future__ import annotations

import importlib

from bench.config.choices import ENGINES  # each a package bench/engines/<name>/
from bench.config.queue_definition import is_builtin, load_queue
from bench.errors import ConfigError

__all__ = ["ENGINES", "capabilities", "embedded_server", "engine_for", "get_engine", "non_loopback_host"]


def _module(name: str, module: str = ""):
    """``bench.engines.<name>[.<module>]``, imported. Raises ConfigError (``ENGINE``) for an unknown name."""
    if name not in ENGINES:
        raise ConfigError("ENGINE", f"unknown engine {name!r}; allowed: {', '.join(ENGINES)}")
    return importlib.import_module(f"bench.engines.{name}" + (f".{module}" if module else ""))


def capabilities(name: str):
    """The :class:`bench.engines.base.Capabilities` of engine ``name`` (no driver imported).
    Raises ConfigError (``ENGINE``) for an unknown name."""
    return _module(name).CAPABILITIES


def get_engine(name: str = "postgres"):
    """The :class:`bench.engines.base.Engine` called ``name``. Imported on first use (with its driver), after
    the entry point has applied gevent's monkey-patching (:mod:`bench.gevent_patch`). Raises ConfigError
    (``ENGINE``) for an unknown name."""
    return _module(name, "engine").ENGINE


def embedded_server(name: str, max_connections: int):
    """The context manager of engine ``name``'s throwaway server (yields its DSN), with
    ``max_connections`` (:mod:`bench.engines.embedded_base`)."""
    return _module(name, "embedded").embedded_server(max_connections=max_connections)


def non_loopback_host(name: str, dsn: str) -> str | None:
    """The host ``dsn`` (a DSN of engine ``name``) would load that is not this machine, or None;
    parsed, never connected. Raises ConfigError (``DSN``) when it cannot be parsed."""
    return _module(name, "dsn").non_loopback_host(dsn)


_DEFINED: dict = {}


def engine_for(cfg):
    """The :class:`bench.engines.base.Engine` a run of ``cfg`` (a RunConfig) uses: the engine of
    ``cfg.engine`` for ``QUEUE=builtin``, else the queue definition's
    (:class:`bench.engines.postgres.defined_engine.DefinedQueueEngine`, one per definition and process).
    Raises ConfigError (``ENGINE``, ``QUEUE``)."""
    if is_builtin(cfg.queue):
        return get_engine(cfg.engine)
    defined = _module("postgres", "defined_engine")  # through _module, as every engine module
    if cfg.queue not in _DEFINED:
        _DEFINED[cfg.queue] = defined.DefinedQueueEngine(_module("postgres", "libraries").resolve(load_queue(cfg.queue)))
    return _DEFINED[cfg.queue]
