"""The rows of the parameter table for the commit mode (``SYNC_COMMIT``) and its refusals (docs/failover.md).
Standard library only, as :mod:`bench.config.parameters`, which lists them."""

from __future__ import annotations

from typing import Any

from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.errors import ConfigError
from bench.usage import setting, switch

#: ``SYNC_COMMIT``: leave the server's ``synchronous_commit``, or one of PostgreSQL's values
#: (https://www.postgresql.org/docs/current/runtime-config-wal.html#GUC-SYNCHRONOUS-COMMIT).
SYNC_COMMIT_MODES = ("server", "off", "local", "remote_write", "on", "remote_apply")
#: The modes whose commit waits for a synchronous standby once ``synchronous_standby_names`` names one.
STANDBY_MODES = ("remote_write", "on", "remote_apply")
#: The modes that mean nothing more than ``local``/``on`` without a synchronous standby (PostgreSQL: with
#: ``synchronous_standby_names`` empty, "remote_apply, remote_write and local all provide the same local
#: synchronization level as on"): refused when the run has no standby.
NEEDS_STANDBY = ("remote_write", "remote_apply")
#: What the embedded primary's ``synchronous_standby_names`` is set to for :data:`STANDBY_MODES` with
#: ``REPLICA=1``: any one standby (the run has exactly one).
ANY_STANDBY = "*"

_P = Parameter
#: What the failover window's two delays (``PROMOTE_AFTER_S``, ``REPOINT_AFTER_S``) share: seconds, 0 to 600, a
#: sweep axis, PostgreSQL's only.
_FAILOVER_DELAY: dict[str, Any] = {
    "group": "faults", "unit": "s", "minimum": 0.0, "maximum": 600, "sweep": True, "engine_values": {"mariadb": ()},
    "engine_reasons": {"mariadb": "the failover fault is built for PostgreSQL's embedded standby only"}}
FAILOVER_PARAMETERS: tuple[Parameter, ...] = (
    _P("sync_commit", "choice", "server", "server | off | local | remote_write | on | remote_apply: "
                                          "synchronous_commit on every connection of the run",
       group="database", choices=SYNC_COMMIT_MODES, sweep=True, default_text="server (the server's own)",
       engine_values={"mariadb": ()},
       engine_reasons={"mariadb": "synchronous_commit is PostgreSQL's; MariaDB's durability settings "
                                  "(innodb_flush_log_at_trx_commit, semi-synchronous replication) are not built"},
       meaning="`synchronous_commit` set on every connection of the application side (workers, their effects' "
               "connections, producers, reaper; the tool's own instrument connections keep the server's), after a queue definition's `[settings]` and over a DSN's "
               "`options`, so it wins over both; behind a transaction pool with `SET LOCAL` in each transaction. "
               "With `REPLICA=1` on the embedded servers, `remote_write`, `on` and `remote_apply` also set the "
               "primary's `synchronous_standby_names` to `*` once the standby streams (reset before it stops), "
               "so commits wait for it; `off` and `local` leave it empty. `remote_write` and `remote_apply` are "
               "refused without `REPLICA=1` (with no synchronous standby they are `on`), and with a DSN whose "
               "server has no `synchronous_standby_names`. The value read back with `SHOW` on a session opened "
               "as a worker's is recorded in `run.json` `commit_mode` (docs/failover.md)"),
    _P("promote_after_s", "number", 10.0, "seconds from the primary's kill to the standby's promotion "
                                          "(FAULTS=failover)",
       **_FAILOVER_DELAY,
       meaning="with a `failover` fault window: how long after every process of the primary is killed the tool "
               "promotes the standby (`pg_promote()`), standing for the detection of a real HA manager (10 to "
               "120 s). The promotion must come before the window's end"),
    _P("repoint_after_s", "number", 0.0, "seconds from the promotion to the embedded pooler's re-point "
                                         "(FAULTS=failover with POOLER=pgbouncer)",
       **_FAILOVER_DELAY,
       meaning="with a `failover` fault window through the embedded pooler (`POOLER=pgbouncer`): how long after "
               "the standby's promotion the tool re-points the pooler at it on its console (`PAUSE`, its "
               "`[databases]` line rewritten for the promoted standby, `RELOAD`, `RESUME`), standing for the "
               "operator or the HA hook that does it; PgBouncer cannot fail over by itself, so until then the "
               "workers' queries fail or wait. The re-point must come before the window's end "
               "(docs/failover.md, \"Through the embedded pooler\")"),
)


def sync_commit_settings(sync_commit: str) -> dict[str, str]:
    """``{"synchronous_commit": sync_commit}`` for a session's settings, or nothing for ``server`` / n/a."""
    if sync_commit in ("server", NOT_APPLICABLE):
        return {}
    return {"synchronous_commit": sync_commit}


def check_sync_commit(values: dict[str, Any]) -> None:
    """Refuse (ConfigError ``SYNC_COMMIT``) a mode that needs a synchronous standby in a run without one."""
    mode = values["sync_commit"]
    if mode in NEEDS_STANDBY and values["replica"] is not True:
        raise ConfigError("SYNC_COMMIT", f"{mode} waits for a synchronous standby, and without "
                                         f"{switch('replica')} there is none, so it would measure {setting('sync_commit', 'on')} "
                                         f"under another name; allowed: {mode} with {switch('replica')}, or server, off, "
                                         "local or on")


def check_standby_names(sync_commit: str, standby_names: str) -> None:
    """Refuse (ConfigError ``SYNC_COMMIT``) a mode of :data:`NEEDS_STANDBY` on a server (a DSN's) whose
    ``synchronous_standby_names`` is empty: its commits would not wait for any standby."""
    if sync_commit in NEEDS_STANDBY and not standby_names.strip():
        raise ConfigError("SYNC_COMMIT", f"{sync_commit} on a server whose synchronous_standby_names is empty waits "
                                         "for no standby (it is on under another name), and the tool does not change "
                                         "a DSN's server settings; allowed: server, off, local or on, or set "
                                         "synchronous_standby_names on that server")


def check_failover(values: dict[str, Any], dsn: str | None) -> None:
    """Refuse (ConfigError ``FAULTS``) a ``failover`` window the run cannot carry out: without ``REPLICA=1``, with
    a pooler of the user's (the tool never changes it) or a DSN (the tool never stops a user's server), more than
    one, with the delay relay (it points at the old primary), several processes or a library's own worker, its
    promotion, WAL stop or the embedded pooler's re-point outside it."""
    windows = [f for f in values["faults"] if f.kind == "failover"]
    if not windows:
        return
    fault = windows[0]
    label = f"failover@{fault.start_s:g}-{fault.end_s:g}"
    why = None
    pooler = values["pooler"] not in ("none", NOT_APPLICABLE)
    if values["replica"] is not True:
        why = f"needs the embedded standby to promote; allowed: {label} with {switch('replica')} and no DSN"
    elif not pooler and values["pool_mode"] not in ("none", NOT_APPLICABLE):
        why = ("would need a pooler of yours re-pointed at the promoted standby, and the tool never changes a "
               f"user's pooler; allowed: failover through the embedded one ({setting('pooler', 'pgbouncer')}, no DSN) "
               "or without a pooler")
    elif dsn is not None:
        why = ("stops the primary, and the tool never stops a user's server; allowed: failover on the embedded "
               f"servers (no DSN, {switch('replica')})")
    elif len(windows) > 1:
        why = "one failover per run: the first promotes the only standby; allowed: one failover window"
    elif values["net_delay_ms"] > 0 or values["net_jitter_ms"] > 0:
        why = "the delay relay forwards to the old primary only; allowed: failover without NET_DELAY_MS/NET_JITTER_MS"
    elif values["processes"] > 1 or values.get("library_mode") == "worker":
        why = (f"is built for the tool's own workers in one process; allowed: failover with {setting('processes', 1)} "
               "and the tool's workers")
    elif fault.wal_stop_s > fault.start_s:
        why = (f"wal_stop_s={fault.wal_stop_s:g} stops the WAL receiver before the measured window; allowed: "
               f"wal_stop_s <= {fault.start_s:g} (the window's start)")
    elif fault.start_s + values["promote_after_s"] >= fault.end_s:
        why = (f"the promotion {values['promote_after_s']:g} s after the kill ({setting('promote_after_s', format(values['promote_after_s'], 'g'))}) "
               f"comes at or after the window's end; allowed: an end after {fault.start_s + values['promote_after_s']:g} s")
    elif pooler and fault.start_s + values["promote_after_s"] + values["repoint_after_s"] >= fault.end_s:
        at = fault.start_s + values["promote_after_s"] + values["repoint_after_s"]
        why = (f"the pooler's re-point {values['repoint_after_s']:g} s after the promotion "
               f"({setting('repoint_after_s', format(values['repoint_after_s'], 'g'))}) comes at or after the "
               f"window's end; allowed: an end after {at:g} s")
    if why is not None:
        raise ConfigError("FAULTS", f"{label}: {why}")
