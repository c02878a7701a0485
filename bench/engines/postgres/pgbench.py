"""pgbench for ``make calibrate`` (:mod:`bench.cli.calibrate`; docs/calibration.md): its script from the
built-in queue's definition, find it, run it, read its output, aggregate log and CPU. pgbench (``--log``,
``--aggregate-interval``, the aggregate log's columns): https://www.postgresql.org/docs/15/pgbench.html#PGBENCH-LOGGING"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import gevent
import psutil

from bench.config.queue_definition import QueueDefinition
from bench.config.sql_text import render
from bench.engines.postgres.defined_sql import claim_body
from bench.engines.postgres.embedded_binaries import find_server_binaries
from bench.errors import ConfigError
from bench.measure.seconds import iso_at

__all__ = ["PGBENCH_TAIL_S", "claim_complete_script", "find_pgbench", "per_job_us", "processed_transactions", "read_aggregate_log",
           "run_pgbench"]

#: pgbench runs this long past the measured window, so that its last measured second
#: is complete and written (pgbench 15 does not write the interval it stops in).
PGBENCH_TAIL_S = 2

_FAILED_RE = re.compile(r"number of failed transactions: (\d+)")
_PROCESSED_RE = re.compile(r"number of transactions actually processed: (\d+)")
#: pgbench 15 aggregate log columns (0-based): interval_start, num_transactions, ...,
#: serialization_failures and deadlock_failures last.
_AGG_START, _AGG_TRANSACTIONS = 0, 1

#: pgbench variable for each parameter of the calibration script (``client_id`` is pgbench's own).
_VARIABLES = {"batch": "batch", "worker": "client_id", "lease_s": "lease_s", "id": "id",
              "token": "attempt_token", "ids": "ids", "tokens": "tokens"}

#: With batch > 1 the claim's rows gathered into one for ``\\gset`` (docs/calibration.md); ``coalesce``: an
#: empty claim completes nothing.
_GATHER = ("WITH claimed AS ({claim}) SELECT coalesce(array_agg(id), '{{}}') AS ids, "
           "coalesce(array_agg(attempt_token), '{{}}') AS tokens, count(*) AS claimed FROM claimed")


def claim_complete_script(defn: QueueDefinition, policy: str, lease_s: float, batch: int = 1) -> str:
    """``make calibrate``'s pgbench script over ``defn`` (the built-in queue's definition): one transaction
    claims up to ``batch`` jobs and completes them, a pgbench variable where the workers bind each
    parameter, so under ``-M prepared`` the server prepares the workers' claim byte for byte
    (docs/calibration.md). Raises KeyError for an unknown policy or a parameter without a pgbench
    variable (several queue names)."""
    def variable(_i: int, param: str) -> str:
        return f":{_VARIABLES[param]}"

    claim = render(claim_body(defn, policy), variable)[0]
    head = f"\\set batch {int(batch)}\n\\set lease_s {float(lease_s)!r}\n"
    if batch == 1:
        return f"{head}{claim}\\gset\n{render(defn.statements['complete'].strip(), variable)[0]};\n"
    complete = render(defn.statements["complete_many"].strip(), variable)[0]
    return f"{head}{_GATHER.format(claim=claim)}\\gset\n{complete};\n"


def find_pgbench() -> str:
    """Path of a pgbench binary (PATH, then the server binaries'). Raises ConfigError (``PGBENCH``)."""
    found = shutil.which("pgbench")
    if found:
        return found
    try:
        candidate = Path(find_server_binaries().bindir) / "pgbench"
        if candidate.exists():
            return str(candidate)
    except Exception:  # noqa: BLE001 - any failure here means "not found"
        pass
    raise ConfigError("PGBENCH", "no pgbench found on PATH; install postgresql-client (it ships pgbench)")


def read_aggregate_log(paths: list[Path]) -> dict[int, dict[str, int]]:
    """pgbench's per-second aggregate logs (one per thread) summed: ``{interval_start (Unix s):
    {"transactions", "failures" (serialization + deadlock: pgbench 15's last two columns), "threads"}}``."""
    out: dict[int, dict[str, int]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            cols = line.split()
            if len(cols) < 6:
                continue
            entry = out.setdefault(int(cols[_AGG_START]), {"transactions": 0, "failures": 0, "threads": 0})
            entry["transactions"] += int(cols[_AGG_TRANSACTIONS])
            entry["failures"] += int(cols[-1]) + int(cols[-2]) if len(cols) >= 15 else 0
            entry["threads"] += 1
    return out


def run_pgbench(pgbench: str, dsn: str, script: str, out_dir: Path, *, clients: int, warmup_s: int, duration_s: int,
                during: Callable[[Callable[[], float], int], Callable[[], None]] | None = None) -> dict:
    """Run pgbench (``script``, ``clients``) and measure the ``duration_s`` whole Unix seconds from the first
    at least ``warmup_s`` after its start (docs/calibration.md); ``during(now_s, n_seconds)`` starts the
    monitor and returns its stop. Writes the script, output and logs into ``out_dir``. Returns ``{"tps",
    "transactions", "measured_s", "measured_start", "measured_end", "per_second", "failed", "exit_code",
    "cpu_s", "cpu_us_per_job", "user_s", "system_s", … "calibrate_cpu_s", "argv", "problems"}``."""
    out_dir = out_dir.resolve()  # pgbench runs in it: its paths must not be relative to the caller's
    out_dir.mkdir(parents=True)
    script_path = out_dir / "claim_complete.sql"
    script_path.write_text(script)
    threads = min(2, clients)
    started = time.time()
    window_start = math.ceil(started + warmup_s)
    window = (window_start, window_start + duration_s)
    seconds = int(math.ceil(window[1] - started)) + PGBENCH_TAIL_S
    argv = [pgbench, "-n", "-M", "prepared", "-f", str(script_path), "-c", str(clients), "-j", str(threads),
            "-T", str(seconds), "--log", "--aggregate-interval=1", f"--log-prefix={out_dir / 'aggregate'}", dsn]
    with open(out_dir / "pgbench.out", "w") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=out_dir)
    stop = during(lambda: time.time() - started, seconds) if during else (lambda: None)
    try:
        cpu = _cpu_in_window(proc.pid, window)
    finally:
        exit_code = proc.wait()
        stop()
    result, problems = _window_figures(out_dir, window, threads, exit_code)
    jobs = result["transactions"]
    result.update(cpu_s=cpu["cpu_s"], cpu_us_per_job=per_job_us(cpu["cpu_s"], jobs), user_s=cpu["user_s"],
                  system_s=cpu["system_s"], user_us_per_job=per_job_us(cpu["user_s"], jobs),
                  system_us_per_job=per_job_us(cpu["system_s"], jobs), calibrate_cpu_s=cpu["calibrate_cpu_s"],
                  argv=argv[:-1] + ["<dsn>"], problems=problems)
    return result


def _cpu_in_window(pid: int, window: tuple[int, int]) -> dict[str, float | None]:
    """CPU s of ``pid`` over ``window`` (Unix s; slept until each end): ``{"cpu_s" (user + system), "user_s",
    "system_s", "calibrate_cpu_s" (this process's)}``, all None when ``pid`` ended before the window."""
    own, cpu = psutil.Process(), []
    try:
        ps = psutil.Process(pid)
        for at in window:
            gevent.sleep(max(0.0, at - time.time()))
            times, mine = ps.cpu_times(), own.cpu_times()
            cpu.append((times.user + times.system, times.user, times.system, mine.user + mine.system))
    except psutil.NoSuchProcess:  # pgbench ended early: reported by the caller
        pass
    names = ("cpu_s", "user_s", "system_s", "calibrate_cpu_s")
    if len(cpu) < 2:
        return dict.fromkeys(names)
    return {name: end - start for name, start, end in zip(names, *cpu)}


def _window_figures(out_dir: Path, window: tuple[int, int], threads: int, exit_code: int) -> tuple[dict, list[str]]:
    """(:func:`run_pgbench`'s figures up to ``exit_code``, problems) over ``window`` (Unix s), from ``out_dir``."""
    out = (out_dir / "pgbench.out").read_text()
    failed_match = _FAILED_RE.search(out)
    failed = int(failed_match.group(1)) if failed_match else 0
    intervals = read_aggregate_log(sorted(out_dir.glob("aggregate.*")))
    measured = [intervals.get(t, {"transactions": 0, "failures": 0, "threads": 0}) for t in range(*window)]
    transactions, duration_s = sum(m["transactions"] for m in measured), window[1] - window[0]
    problems = []
    if exit_code != 0:
        last = out.strip().splitlines()[-1] if out.strip() else "no output"
        problems.append(f"pgbench exited with status {exit_code} ({last})")
    if failed or any(m["failures"] for m in measured):
        problems.append(f"pgbench reported {failed} failed transactions")
    missing = sum(1 for m in measured if m["threads"] < threads)
    if missing:
        problems.append(f"pgbench's aggregate log lacks {missing} of the {duration_s} measured seconds")
    return {"tps": transactions / duration_s, "transactions": transactions, "measured_s": duration_s,
            "measured_start": iso_at(window[0]), "measured_end": iso_at(window[1]),
            "per_second": [m["transactions"] for m in measured], "failed": failed, "exit_code": exit_code}, problems


def processed_transactions(out_dir: Path) -> int | None:
    """Transactions pgbench processed over its whole run (``out_dir/pgbench.out``); None without the line."""
    match = _PROCESSED_RE.search((out_dir / "pgbench.out").read_text())
    return int(match.group(1)) if match else None


def per_job_us(cpu_s: float | None, jobs: int) -> float | None:
    """CPU µs per job: ``cpu_s`` seconds over ``jobs`` jobs; None when ``cpu_s`` is None or ``jobs`` is 0."""
    return 1e6 * cpu_s / jobs if cpu_s is not None and jobs else None
