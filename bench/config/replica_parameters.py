"""The rows of the parameter table for ``REPLICA=1``: a streaming standby and the readers on it (docs/replicas.md).
Standard library only, as :mod:`bench.config.parameters`, which lists them."""

from __future__ import annotations

from bench.config import parsers
from bench.config.parameter import Parameter

#: Their engine rules: PostgreSQL's streaming standby (MariaDB's replication is not built).
_REPLICA_PG = {"engine_values": {"mariadb": (False,)},
               "engine_reasons": {"mariadb": "not built: a MariaDB replica needs its own binlog replication "
                                             "(a second mariadbd, CHANGE MASTER TO), which the tool does not start"}}
_REPLICA_PG_ONLY = {"engine_values": {"mariadb": ()},
                    "engine_reasons": {"mariadb": "REPLICA is built for PostgreSQL only"}}
_REPLICA_MEANING = ("with no DSN, a streaming standby of the embedded PostgreSQL server: the same binaries, "
                    "`pg_basebackup -R` from the seeded primary, its own port and directory, `hot_standby` on, "
                    "removed with the primary however the run ends; with a DSN, the standby given as "
                    "`DSN_REPLICA` (refused without it). Per second `intervals.csv` gets its replay lag "
                    "(bytes and seconds), its query cancellations by cause, the readers' latency and "
                    "cancellations, the stale reads and the xmin horizon it holds on the primary; "
                    "`summary.json` `replica` the run's figures (docs/replicas.md). Not built on MariaDB")

_P = Parameter
REPLICA_PARAMETERS: tuple[Parameter, ...] = (
    _P("replica", "flag", False, "a streaming standby of the database, its replay lag and conflicts measured",
       group="database", sweep=True, **_REPLICA_PG, meaning=_REPLICA_MEANING),
    _P("dsn_replica", "text", "", "the standby of a DSN's server (with REPLICA=1 and a DSN)", group="database",
       parse_value=parsers.parse_dsn_replica, **_REPLICA_PG_ONLY, default_text="none",
       allowed="a `postgresql://` URL or libpq key=value DSN of a hot standby of `DSN`'s server",
       meaning="the hot standby the readers use and the sampler reads when the run is given a `DSN` (loopback "
               "included): the tool starts a standby only of its own embedded server. Its `hot_standby_feedback` "
               "and `max_standby_streaming_delay` are the server's own, read and recorded"),
    _P("replica_readers", "int", 0, "readers on the standby, each in REPEATABLE READ transactions",
       group="load", minimum=0, maximum=64, sweep=True, **_REPLICA_PG_ONLY,
       meaning="readers on the standby, each its own connection: one REPEATABLE READ transaction of "
               "`REPLICA_READER_S` after another, running the queries a team runs on a standby (counts by "
               "status, the oldest eligible jobs, a dashboard scan of the queue table) again and again"),
    _P("replica_reader_s", "number", 10.0, "seconds each reader transaction lasts", group="load", unit="s",
       minimum=0.0, strict=True, maximum=3600, sweep=True, **_REPLICA_PG_ONLY,
       meaning="how long each reader's REPEATABLE READ transaction (and so its snapshot) lasts; a new one "
               "starts at once. Longer than the standby's `max_standby_streaming_delay` with "
               "`HOT_STANDBY_FEEDBACK=off`, the standby cancels them (conflict with recovery)"),
    _P("hot_standby_feedback", "choice", "off", "off | on: the standby's hot_standby_feedback",
       group="database", choices=("off", "on"), sweep=True, **_REPLICA_PG_ONLY,
       meaning="the embedded standby's `hot_standby_feedback`: `on` sends its oldest snapshot's xmin to the "
               "primary, which then keeps the dead row versions those snapshots may read (the primary's "
               "queue table bloats); `off` (PostgreSQL's default) lets the primary remove them and the standby "
               "cancels the readers whose snapshots the replayed removal conflicts with. With `DSN_REPLICA`: "
               "the server's own, recorded"),
    _P("replica_max_delay_s", "number", 30.0, "the standby's max_standby_streaming_delay, seconds",
       group="database", unit="s", minimum=0.0, maximum=3600, sweep=True, **_REPLICA_PG_ONLY,
       default_text="30 (PostgreSQL's default)",
       meaning="the embedded standby's `max_standby_streaming_delay`: how long replay waits for a reader's "
               "query that conflicts with it before cancelling it. Set it below `REPLICA_READER_S` to get "
               "cancellations in a short run. With `DSN_REPLICA`: the server's own, recorded"),
)
