"""The rows of the parameter table for an emulated network between the application side and the server
(``NET_DELAY_MS``, ``NET_JITTER_MS``: the delay relay, docs/network.md), their range decided once, and which
connections cross the relay. Standard library only, as :mod:`bench.config.parameters`, which lists them."""

from __future__ import annotations

from typing import Any

from bench.config.parameter import Parameter

#: The most a relay may add each way, ms: beyond it a run's connections time out before it measures anything
#: (the adapter's connect timeout is seconds; the longest cross-continent round trips are a few hundred ms).
MAX_NET_DELAY_MS = 10_000

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
)


def relayed(net_delay_ms: float, net_jitter_ms: float) -> bool:
    """True when a run starts a delay relay: ``NET_DELAY_MS`` or ``NET_JITTER_MS`` above 0."""
    return net_delay_ms > 0 or net_jitter_ms > 0


def relay_parameter(net_delay_ms: float) -> str:
    """The parameter a refusal of the relay names: ``NET_DELAY_MS`` when it is set, else ``NET_JITTER_MS`` (which
    started the relay on its own)."""
    return "NET_DELAY_MS" if net_delay_ms > 0 else "NET_JITTER_MS"


def crossing(values: dict[str, Any]) -> list[str]:
    """The connections of a run of ``values`` that cross the relay (of :data:`THROUGH_RELAY`, those it opens)."""
    return [role for role in THROUGH_RELAY
            if role in ("workers", "round-trip probe") or (role == "producers" and values["rate"] > 0)
            or (role == "reaper" and values["reaper_interval_s"] > 0)]
