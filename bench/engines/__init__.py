"""The database engines behind one interface (:mod:`bench.engines.base`), reached by name: :func:`get_engine`,
:func:`capabilities`, :func:`embedded_server`, :func:`non_loopback_host`."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from typing import Callable

from bench.config.choices import ENGINES  # each a package bench/engines/<name>/
from bench.config.queue_definition import is_builtin, load_queue
from bench.errors import ConfigError

__all__ = ["ENGINES", "capabilities", "require_pooler_binary", "embedded_pooler", "embedded_server", "engine_for", "get_engine",
           "non_loopback_host", "pooled", "relay_target", "round_trip_probe"]


def _module(name: str, module: str = ""):
    """``bench.engines.<name>[.<module>]``, imported. Raises ConfigError (``ENGINE``) for an unknown name."""
    if name not in ENGINES:
        raise ConfigError("ENGINE", f"unknown engine {name!r}; allowed: {', '.join(ENGINES)}")
    return importlib.import_module(f"bench.engines.{name}" + (f".{module}" if module else ""))


def capabilities(name: str):
    """Engine ``name``'s Capabilities (no driver imported). Raises ConfigError (``ENGINE``)."""
    return _module(name).CAPABILITIES


def round_trip_probe(name: str, dsn: str) -> tuple[list[str], dict[str, str], float]:
    """Engine ``name``'s round-trip probe over ``dsn``: its process's argv, added environment, and the time between
    its samples (s) (:mod:`bench.engines.round_trip`)."""
    from bench.engines import round_trip  # standard library only; here so `bench.engines` stays light
    return (*round_trip.command(name, dsn), round_trip.PERIOD_S)


def get_engine(name: str = "postgres"):
    """Engine ``name``, imported with its driver on first use (after gevent's patching); ConfigError (``ENGINE``)."""
    return _module(name, "engine").ENGINE


def embedded_server(name: str, max_connections: int, cfg=None):
    """Engine ``name``'s throwaway server, a context manager yielding its DSN; ``cfg`` (a RunConfig) gives the
    engine's choice of server where it has one (``PG_VERSION``)."""
    module = _module(name, "embedded")
    return module.embedded_server(max_connections=max_connections, **module.server_options_of(cfg))


def require_pooler_binary(name: str, cfg) -> None:
    """Refuse (ConfigError, ``POOLER``) ``cfg``'s embedded pooler when it cannot start on this machine (its binary
    missing), before any server is started; nothing for ``POOLER=none``."""
    if cfg.pooler != "none":
        _module(name, "pooler.binary").require_pooler_binary(cfg)  # finds the binary only: no server reached


def embedded_pooler(name: str, dsn_direct: str, cfg, clients: int, log: Callable[[str], None] = print):
    """Engine ``name``'s throwaway pooler (``cfg``'s ``POOLER``, ``POOL_MODE``, ``POOL_SIZE``) in front of
    ``dsn_direct`` for ``clients`` client connections, a context manager yielding its ``Pooler`` (``dsn``,
    ``dsn_direct``, ``admin_dsn``, ``mode``, ``pool_size``, ``max_client_conn``, ``pid``, ``version``)."""
    return _module(name, "pooler").embedded_pooler(dsn_direct, cfg, clients, log=log)


@contextlib.contextmanager
def pooled(cfg, dsn: str, clients: int | None = None, log: Callable[[str], None] = print):
    """(the RunConfig, the DSN, the pooler, the relay) one run of ``cfg`` on ``dsn`` uses: the application side's
    path to the server, started here and stopped after the block. The pooler: None with ``POOLER=none``; else
    ``cfg``'s embedded pooler for ``clients`` client connections (None: ``cfg.pooled_connections()``) with ``cfg``'s
    ``POOL_SIZE``, ``dsn`` then the config's ``dsn_direct`` for the tool's own connections
    (``RunConfig.direct_dsn``); its ``pid`` the run's own for the busy-machine meter, its console ``admin_dsn`` read
    for the pooler figures. The relay (:func:`relayed`): None without ``NET_DELAY_MS``/``NET_JITTER_MS``, else in
    front of the pooler or the server. The DSN is the workers', producers' and reaper's: the relay's, else the
    pooler's, else ``dsn``. Every command that runs starts them once per run this way (a sweep's cells, each with
    its own ``POOL_SIZE`` and ``NET_DELAY_MS``)."""
    with _pooler(cfg, dsn, clients, log) as (run_cfg, pooled_dsn, pooler), \
            relayed(run_cfg, pooled_dsn, "pooler" if pooler else "server", log) as (run_dsn, relay):
        yield run_cfg, run_dsn, pooler, relay


@contextlib.contextmanager
def _pooler(cfg, dsn: str, clients: int | None, log: Callable[[str], None]):
    if cfg.pooler == "none":
        yield cfg, dsn, None
        return
    clients = cfg.pooled_connections() if clients is None else clients
    with embedded_pooler(cfg.engine, dsn, cfg, clients, log) as pooler:
        run_cfg = dataclasses.replace(cfg, dsn_direct=pooler.dsn_direct)
        run_cfg.connection_budget(max_client_conn=pooler.max_client_conn).check_clients()
        yield run_cfg, pooler.dsn, pooler


@contextlib.contextmanager
def relayed(cfg, dsn: str, what: str = "server", log: Callable[[str], None] = print):
    """(the DSN through the relay, the relay) for ``cfg``'s ``NET_DELAY_MS``/``NET_JITTER_MS`` (or a ``partition``
    window, at 0 ms) in front of ``dsn``
    (``what`` it is: server or pooler, for its line): (``dsn``, None) without them. The relay's ``upstream_dsn`` is
    ``dsn``: where the tool's own connections go. Raises ConfigError (``NET_DELAY_MS``, ``NET_JITTER_MS``: a DSN the
    relay cannot stand in front of, a setting below its timer's resolution)."""
    if not cfg.relayed():
        yield dsn, None
        return
    from bench.engines.relay import delay_relay  # here: a run without a relay does not pay its import

    module = _module(cfg.engine, "dsn")
    with delay_relay(module.relay_target(dsn, cfg.relay_parameter()), cfg.net_delay_ms, cfg.net_jitter_ms) as relay:
        relay.upstream_dsn, relay.started_by = dsn, cfg.relay_parameter()
        log(relay.line(cfg.crossing_relay(), what))
        yield module.through(dsn, "127.0.0.1", relay.port), relay


def relay_target(name: str, dsn: str, key: str = "NET_DELAY_MS") -> tuple[str, int]:
    """The (host, port) a delay relay in front of ``dsn`` forwards to (parsed only). Raises ConfigError (``key``,
    the relay's parameter given: a DSN it cannot stand in front of; ``DSN``)."""
    return _module(name, "dsn").relay_target(dsn, key)


def require_relay_resolution(cfgs) -> None:
    """Refuse (ConfigError, ``NET_DELAY_MS`` or ``NET_JITTER_MS``) a setting of any of ``cfgs`` (RunConfigs: a run's,
    a sweep's cells, a plan's designs) above 0 but below the delay relay's timer resolution, measured once here, as
    the relay measures it, before anything is started or created; nothing to measure without a relay."""
    settings = [(key, getattr(cfg, key)) for cfg in cfgs for key in ("net_delay_ms", "net_jitter_ms")
                if getattr(cfg, key) > 0]
    if not settings:
        return
    from bench.engines.relay import check_setting, measured_resolution_ms  # here: only a run with a relay pays it

    resolution_ms = measured_resolution_ms()
    for key, value in settings:
        check_setting(key, value, resolution_ms)


def non_loopback_host(name: str, dsn: str) -> str | None:
    """The host ``dsn`` would load that is not this machine, or None (parsed only). Raises ConfigError (``DSN``)."""
    return _module(name, "dsn").non_loopback_host(dsn)


_DEFINED: dict = {}


def engine_for(cfg):
    """The Engine a run of ``cfg`` uses: ``cfg.engine``'s for ``QUEUE=builtin``, else a DefinedQueueEngine (one
    per definition and process). Raises ConfigError (``ENGINE``, ``QUEUE``)."""
    if is_builtin(cfg.queue):
        return get_engine(cfg.engine)
    defined = _module("postgres", "defined_engine")  # through _module, as every engine module
    if cfg.queue not in _DEFINED:
        _DEFINED[cfg.queue] = defined.DefinedQueueEngine(_module("postgres", "libraries").resolve(load_queue(cfg.queue)))
    return _DEFINED[cfg.queue]
