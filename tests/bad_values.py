"""Values each run parameter must refuse, by its key in the parameter table
(:data:`bench.config.parameters.PARAMETERS`). tests/test_parameters.py checks that every parameter
has some (a new parameter without them fails) and that its parser refuses each one;
tests/test_bad_input.py gives each one on the command line, in a workload file and in a sweep file.
"""

from __future__ import annotations

from bench.config.choices import MAX_QUEUES, MAX_ROWS

BAD_VALUES: dict[str, tuple] = {
    "engine": ("oracle", "mysql"),
    "pg_version": (99, "17", "15", "latest"),
    "queue": ("no_such_queue", "../etc", "bad name!"),
    "library_mode": ("client",),
    "isolation": ("snapshot",),
    "policy": ("fastest", 1),
    "workers": (0, -3, "abc", 1001, 2.5),
    "processes": (0, 65, "two"),
    "batch": (0, 10_001),
    "txn": ("long",),
    "work_ms": (-5, "nan", "inf", 1e12),
    "index": ("btree",),
    "layout": ("sharded",),
    "fillfactor": (9, 101, "full", 70.5),
    "history": (-1, MAX_ROWS + 1),
    "backlog": (-1, "lots"),
    "named_queues": (0, -2, MAX_QUEUES + 1, "many", 2.5),
    "tenants": (0, MAX_QUEUES + 1, "all"),
    "tenant_flood": (-0.1, 1.5, "most"),
    "tenant_order": ("fair", "wfq"),
    "duration": ("soon", "0s", "2500ms", True, "9999999999s"),
    "warmup": ("500ms", "-5s", "2h"),
    "lease_s": (0, -1, 1e300),
    "work_dist": ("normal",),
    "work_sigma": (-0.1, 1e6),
    "work_slow_ms": (-1, 1e12),
    "slow_share": (1.5, "half"),
    "max_attempts": (0, 1001),
    "reaper_interval_s": (-1, 1e9),
    "fail_prob": (-0.1, 2),
    "poison_share": (1.01,),
    "retry_base_s": (-0.1, 1e300),
    "retry_cap_s": (-1, 1e300),
    "rate": (-1, "fast", 1e12),
    "arrival": ("bursty",),
    "producers": (0, 101),
    "priority_mix": ("0:1,0:1", "high", "0:inf", "0:1e308,1:1e308"),
    "future_share": (-1,),
    "future_delay_ms": (-1, 1e18),
    "bursts": ("5-2@100", "1-2@inf"),
    "faults": ("meltdown@1-2", "long_transaction@5-2"),
    "slo": ("pickup_p99<1s", "claim_p99<=50", "latency<=1s", "claim_p99<=1s,claim_p99<=2s", "error_rate<=150%"),
    "plan_cache": ("always",),
    "prepared": ("yes", 2),
    "autovacuum": ("sometimes", "off"),
    "wakeup": ("push",),
    "poll_ms": (0, "often", 1e9),
    "autovacuum_settings": ("vacuum_speed=3", "vacuum_scale_factor=-0.1", "vacuum_threshold=1.5",
                            "vacuum_cost_limit=0", "vacuum_threshold=10,autovacuum_vacuum_threshold=20",
                            "enabled=off", "vacuum_threshold"),
    "vacuum_every_s": (-1, "often", 1e9),
    "schema": ("Bad-Name", "public", "x" * 58, "qbench_state"),
    "results": ("/etc/passwd/runs", "/proc/qbench-results"),
}
BAD_VALUES["faults"] += ("migration@1-2:ddl=add_column,lock_timeout_ms=-1", "migration@1-2:ddl=drop_table",
                         "migration@1-2:ddl=add_column,retry_ms=soon")
