"""The rows of the parameter table for the network between the application side and the server: an emulated one
(``NET_DELAY_MS``, ``NET_JITTER_MS``: the delay relay, docs/network.md) and how the application side's connections
notice a dead one (``TCP_USER_TIMEOUT_MS``: TCP keepalives and the user timeout), their ranges decided once, which
connections cross the relay and when a run starts it. Standard library only, as :mod:`bench.config.parameters`,
which lists them."""

from __future__ import annotations

from typing import Any

from bench.config import parsers
from bench.config.parameter import Parameter
from bench.errors import ConfigError
from bench.usage import named, setting

#: The most a relay may add each way, ms: beyond it a run's connections time out before it measures anything
#: (the adapter's connect timeout is seconds; the longest cross-continent round trips are a few hundred ms).
MAX_NET_DELAY_MS = 10_000

#: ``TCP_USER_TIMEOUT_MS``: its default, the least above 0 (keepalives are set in whole seconds) and the most.
#: 30 s bounds a worker blocked in a read on a connection whose peer vanished (the kernel's own bound is its
#: retransmission limit, about 15 minutes: ``tcp_retries2`` = 15) and is never reached by a slow query, whose
#: server still acknowledges every segment and keepalive probe (docs/network.md, "Partitions and keepalives").
DEFAULT_TCP_USER_TIMEOUT_MS, MIN_TCP_USER_TIMEOUT_MS, MAX_TCP_USER_TIMEOUT_MS = 30_000, 1_000, 3_600_000
#: Keepalive probes a connection sends before it is ended (the user timeout usually ends it first).
KEEPALIVE_PROBES = 3

#: What crosses the relay (the application side) and what goes direct (the instrument), as run.json records it.
THROUGH_RELAY = ("workers", "producers", "reaper", "round-trip probe")
DIRECT = ("admin (preparation, plan capture, statistics)", "monitor", "audit", "archive mover", "VACUUM",
          "fault windows", "standby sampler and readers", "the pooler's console")

_P = Parameter
NETWORK_PARAMETERS: tuple[Parameter, ...] = (
    _P("net_delay_ms", "number", 0.0, "ms added to every chunk each way by a delay relay in front of the server "
                                      "(or the pooler); 0 = no relay unless NET_JITTER_MS",
       group="database", unit="ms", minimum=0.0, maximum=MAX_NET_DELAY_MS, sweep=True,
       default_text="0 (no relay)",
       meaning="an emulated network between the application side (workers, producers, reaper) and the server, "
               "or the pooler when there is one: a relay the tool starts for each run holds every chunk of bytes "
               "this long **each way** (a round trip gains twice it), released by a timer whose resolution the "
               "relay measures at start-up (refused below it). Connection set-up (TCP's handshake) is not "
               "delayed; every byte after it is, the protocol's start-up and authentication included. The "
               "tool's own connections (admin, monitor, audit) go direct. What the report shows is the round "
               "trip measured through it, not this setting (docs/network.md). A sweep axis: each run of a cell "
               "starts its own relay"),
    _P("net_jitter_ms", "number", 0.0, "ms of uniform random delay added to NET_DELAY_MS per chunk, each way "
                                       "(bytes of each connection kept in order)",
       group="database", unit="ms", minimum=0.0, maximum=MAX_NET_DELAY_MS, default_text="0",
       meaning="each chunk's delay is `NET_DELAY_MS` plus a uniform draw from 0 to this, except that a chunk never "
               "leaves before the one read before it on the same connection and direction (TCP keeps order): a "
               "mean one-way delay of `NET_DELAY_MS` + half this. On its own (with `NET_DELAY_MS` 0) it starts the "
               "relay too; refused below the relay's measured timer resolution"),
    _P("tcp_user_timeout_ms", "int", DEFAULT_TCP_USER_TIMEOUT_MS,
       "ms a worker's, producer's or reaper's connection may go unanswered (TCP_USER_TIMEOUT, with keepalives) "
       "before its kernel ends it; 0 = the kernel's defaults",
       group="database", unit="ms", minimum=0, maximum=MAX_TCP_USER_TIMEOUT_MS,
       parse_value=lambda value: parse_tcp_user_timeout_ms(value),
       allowed=f"0, or {MIN_TCP_USER_TIMEOUT_MS:,}–{MAX_TCP_USER_TIMEOUT_MS:,}",
       meaning="how long the application side's connections (workers, producers, reaper) wait for a peer that has "
               "gone silent (a partition, a host that vanished: no reset) before their kernel ends them with "
               "ETIMEDOUT: `TCP_USER_TIMEOUT` on each connection's socket, with TCP keepalives (idle and interval "
               "a third of it, whole seconds, at least 1 s; 3 probes) so an idle connection or one blocked in a "
               "read notices too. A slow query never trips it: the server's kernel acknowledges every segment and "
               "probe. On PostgreSQL libpq's `keepalives`, `keepalives_idle`, `keepalives_interval`, "
               "`keepalives_count`, `tcp_user_timeout`; on MariaDB the same socket options once connected. 0 sets "
               "none: a blocked read then waits out the kernel's retransmissions, about 15 minutes. run.json's "
               "`tcp_liveness` records what was applied (docs/network.md, \"Partitions and keepalives\")"),
)


def parse_tcp_user_timeout_ms(value: Any) -> int:
    """``TCP_USER_TIMEOUT_MS`` parsed: 0, or :data:`MIN_TCP_USER_TIMEOUT_MS` to :data:`MAX_TCP_USER_TIMEOUT_MS` (the
    keepalives it sets are whole seconds). Raises ConfigError (``TCP_USER_TIMEOUT_MS``)."""
    allowed = f"0 (the kernel's defaults), or {MIN_TCP_USER_TIMEOUT_MS:,}–{MAX_TCP_USER_TIMEOUT_MS:,}"
    try:
        value_ms = parsers.parse_int("TCP_USER_TIMEOUT_MS", value, minimum=0, maximum=MAX_TCP_USER_TIMEOUT_MS)
    except ConfigError as err:
        raise ConfigError("TCP_USER_TIMEOUT_MS", f"{err.problem.split('; allowed:')[0]}; allowed: {allowed}") from None
    if 0 < value_ms < MIN_TCP_USER_TIMEOUT_MS:
        raise ConfigError("TCP_USER_TIMEOUT_MS", f"{value_ms} ms is below {MIN_TCP_USER_TIMEOUT_MS:,} ms, and the "
                                                 f"keepalives it sets are whole seconds; allowed: {allowed}")
    return value_ms


def tcp_liveness(tcp_user_timeout_ms: int) -> dict[str, int] | None:
    """What the application side's connections get for ``TCP_USER_TIMEOUT_MS`` (the one rule): None for 0 (the
    kernel's defaults), else ``tcp_user_timeout_ms``, ``keepalives_idle_s`` and ``keepalives_interval_s`` (a
    third of it, whole seconds, at least 1: an idle connection probes its peer well before the timeout),
    ``keepalives_count`` (:data:`KEEPALIVE_PROBES`)."""
    if tcp_user_timeout_ms <= 0:
        return None
    every_s = max(1, tcp_user_timeout_ms // 3000)
    return {"tcp_user_timeout_ms": int(tcp_user_timeout_ms), "keepalives_idle_s": every_s,
            "keepalives_interval_s": every_s, "keepalives_count": KEEPALIVE_PROBES}


def partitioned(faults) -> bool:
    """True when ``faults`` (a run's ``FAULTS``) hold a ``partition`` window, which needs the relay."""
    return any(f.kind == "partition" for f in faults)


def relayed(net_delay_ms: float, net_jitter_ms: float, faults=()) -> bool:
    """True when a run starts a delay relay: ``NET_DELAY_MS`` or ``NET_JITTER_MS`` above 0, or a ``partition``
    window in ``faults`` (the relay then at 0 ms)."""
    return net_delay_ms > 0 or net_jitter_ms > 0 or partitioned(faults)


def relay_parameter(net_delay_ms: float, net_jitter_ms: float = 0.0) -> str:
    """The parameter a refusal of the relay names: ``NET_DELAY_MS`` when it is set, else ``NET_JITTER_MS`` when it
    is (it started the relay on its own), else ``FAULTS`` (a partition started it)."""
    return "NET_DELAY_MS" if net_delay_ms > 0 else "NET_JITTER_MS" if net_jitter_ms > 0 else "FAULTS"


def crossing(values: dict[str, Any]) -> list[str]:
    """The connections of a run of ``values`` that cross the relay (of :data:`THROUGH_RELAY`, those it opens)."""
    return [role for role in THROUGH_RELAY
            if role in ("workers", "round-trip probe") or (role == "producers" and values["rate"] > 0)
            or (role == "reaper" and values["reaper_interval_s"] > 0)]


def liveness_roles(values: dict[str, Any]) -> list[str]:
    """The connections of a run of ``values`` that get ``TCP_USER_TIMEOUT_MS``'s settings: the tool's workers (not
    a queue library's own worker processes), producers and reaper, those it opens, and the round-trip probe (the
    workers' path)."""
    return [role for role, opened in (("workers", values["library_mode"] != "worker"),
                                      ("producers", values["rate"] > 0),
                                      ("reaper", values["reaper_interval_s"] > 0),
                                      ("round-trip probe", True)) if opened]


def check_partitions(values: dict[str, Any]) -> None:
    """Refuse (ConfigError, ``FAULTS``) overlapping ``partition`` windows (the relay has one partition at a time) and
    a partition with ``PROCESSES`` > 1 (each worker is measured in the process that runs the relay)."""
    cuts = sorted((f.start_s, f.end_s) for f in values["faults"] if f.kind == "partition")
    if any(later[0] < earlier[1] for earlier, later in zip(cuts, cuts[1:])):
        raise ConfigError("FAULTS", "partition windows overlap, and the relay has one partition at a time; allowed: "
                                    "partition windows one after another (each start at or after the end before)")
    if cuts and values["processes"] > 1:
        raise ConfigError("FAULTS", named("partition measures each worker in the process that runs the relay, and with "
                                          "{processes} > 1 the workers are in other processes; allowed: partition ")
                                    + f"with {setting('processes', 1)}")
