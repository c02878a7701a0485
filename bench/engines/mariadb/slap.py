"""mariadb-slap (https://mariadb.com/kb/en/mariadb-slap/) for ``make calibrate ENGINE=mariadb``: find it,
write its script from the swarm's own statements, run it, count what it did. Its behaviour and how the
script differs from the swarm: docs/calibration.md (mariadb-slap).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench.engines.mariadb import db, policies
from bench.engines.mariadb.adapter import session_setup
from bench.engines.mariadb.dsn import connect_args
from bench.errors import ConfigError
from bench.measure.seconds import iso_at

__all__ = ["NAMES", "WORKER", "count_problems", "find_slap", "job_counts", "run_slap", "slap_argv",
           "slap_script", "slap_version"]

#: Names the binary goes by, in the order looked for (``mysqlslap`` is its older name).
NAMES = ("mariadb-slap", "mysqlslap")
#: ``locked_by`` of every job mariadb-slap claims.
WORKER = "mariadb-slap"
#: The script's query delimiter: one line of the script file = one query = one round trip.
DELIMITER = "\n"
#: The variables the read-back stores into (its columns, in order; ``@token`` fences the completion).
READ_BACK_VARS = ("@c_id", "@token", "@c_pickup_us", "@c_attempts", "@c_lease_until", "@c_claimed_at")
_SECONDS_RE = re.compile(r"Average number of seconds to run all queries: ([\d.]+) seconds")


def find_slap(path: str | None = None) -> str:
    """Path of mariadb-slap (or mysqlslap) on ``path`` (default ``$PATH``); ConfigError (``MARIADB_SLAP``) if none."""
    for name in NAMES:
        found = shutil.which(name, path=path)
        if found:
            return found
    raise ConfigError("MARIADB_SLAP", "no mariadb-slap (or mysqlslap) found on PATH; "
                                      "install mariadb-client (it ships mariadb-slap)")


def slap_version(slap: str) -> str:
    """The first line of ``slap --version`` (empty when it prints none)."""
    out = subprocess.run([slap, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return out.splitlines()[0] if out else ""


def slap_script(schema: str, policy: str, index: str, lease_s: float) -> list[str]:
    """The queries of one job (claim of batch 1, completion), one per round trip; KeyError for an unknown ``policy``."""
    job_id, token = policies.Var("@id"), policies.Var("@token")
    return [
        "SET @id = NULL;START TRANSACTION;" + policies.claim_select(schema, policy, index, 1) + " INTO @id",
        (policies.claim_update(schema, [job_id], WORKER, lease_s) + ";"
         + policies.claim_rows(schema, [job_id]) + " INTO " + ", ".join(READ_BACK_VARS) + ";COMMIT"),
        policies.complete_one(schema, job_id, token),
    ]


def _option_value(value: str) -> str:
    """``value`` as an option-file value: double-quoted, ``\\`` and ``"`` escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def slap_argv(slap: str, dsn: str, script_path: Path, *, n_queries: int, clients: int, per_client: int,
              schema: str, isolation: str | None, defaults_file: Path | None) -> list[str]:
    """mariadb-slap's argv: ``clients`` × ``per_client`` passes of ``n_queries`` queries on ``schema`` (never
    dropped); the password only in ``defaults_file``, else ``--no-defaults``."""
    args = connect_args(dsn)
    argv = [slap, f"--defaults-file={defaults_file}" if defaults_file else "--no-defaults"]
    if args.get("unix_socket"):
        argv += ["--protocol=socket", f"--socket={args['unix_socket']}"]
    else:
        argv += ["--protocol=tcp", f"--host={args['host']}", f"--port={args['port']}"]
    return argv + [
        f"--user={args['user']}", "--skip-ssl", f"--create-schema={schema}", "--no-drop",
        f"--concurrency={clients}", "--iterations=1", f"--number-of-queries={n_queries * per_client * clients}",
        f"--delimiter={DELIMITER}", f"--init-command={';'.join(session_setup(isolation))}",
        f"--query={script_path}",
    ]


def run_slap(slap: str, dsn: str, queries: list[str], out_dir: Path, *, clients: int, per_client: int, schema: str,
             isolation: str | None, during: Callable[[Callable[[], float], int], Callable[[], None]] | None = None,
             monitor_seconds: int = 86_400) -> dict:
    """Run mariadb-slap (``clients`` × ``per_client`` passes of ``queries``), wall-clock timed, with the
    monitor ``during(now_s, monitor_seconds)`` beside it; writes ``claim_complete.sql``, ``slap.out``,
    ``slap.err`` into ``out_dir`` (must not exist). CPU seconds: growth of ``RUSAGE_CHILDREN``.

    Returns ``{"jobs_expected", "per_client", "clients", "queries_per_job", "wall_s", "started", "ended"
    (ISO), "slap_reported_s" (or None), "exit_code", "cpu_s", "user_s", "system_s", "argv" (no password),
    "problems" (strings)}``; the caller counts the jobs on the table (:func:`job_counts`).
    """
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True)
    script_path = out_dir / "claim_complete.sql"
    script_path.write_text("".join(q + DELIMITER for q in queries))
    password = connect_args(dsn)["password"]
    defaults = None
    if password:  # an option file only this user can read, deleted after the run
        fd, name = tempfile.mkstemp(prefix="qbench-slap-", suffix=".cnf")
        with os.fdopen(fd, "w") as fh:
            fh.write(f"[client]\npassword={_option_value(password)}\n")
        defaults = Path(name)
    argv = slap_argv(slap, dsn, script_path, n_queries=len(queries), clients=clients, per_client=per_client,
                     schema=schema, isolation=isolation, defaults_file=defaults)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_unix = time.time()
    started = time.perf_counter()
    try:
        with open(out_dir / "slap.out", "w") as out, open(out_dir / "slap.err", "w") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=out_dir)
        stop = during(lambda: time.time() - started_unix, monitor_seconds) if during else (lambda: None)
        try:
            exit_code = proc.wait()
            wall_s = time.perf_counter() - started
        finally:
            stop()
    finally:
        if defaults:
            defaults.unlink(missing_ok=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, err = (out_dir / "slap.out").read_text(), (out_dir / "slap.err").read_text()
    seconds = _SECONDS_RE.search(out)
    problems = []
    if exit_code != 0:
        problems.append(f"mariadb-slap exited with status {exit_code}")
    if err.strip():
        problems.append(f"mariadb-slap reported: {err.strip().splitlines()[0][:300]}")
    if not seconds:
        problems.append("mariadb-slap printed no summary (it stops at an SQL error)")
    user_s, system_s = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "jobs_expected": clients * per_client, "per_client": per_client, "clients": clients,
        "queries_per_job": len(queries), "wall_s": wall_s,
        "started": iso_at(started_unix), "ended": iso_at(started_unix + wall_s),
        "slap_reported_s": float(seconds.group(1)) if seconds else None,
        "exit_code": exit_code, "cpu_s": user_s + system_s, "user_s": user_s, "system_s": system_s,
        "argv": [a for a in argv if not a.startswith("--defaults-file=")], "problems": problems,
    }


def job_counts(conn, schema: str) -> dict[str, int]:
    """``{status: rows}`` of the queue table (every status present, ``done`` and ``running`` always)
    and ``"attempts_done"``: the sum of ``attempts`` over the ``done`` rows."""
    rows = db.query(conn, f"SELECT status, COUNT(*), COALESCE(SUM(attempts), 0) FROM "
                          f"{policies.ident(schema, 'jobs')} GROUP BY status")
    counts = {"done": 0, "running": 0}
    counts.update({str(status): int(n) for status, n, _ in rows})
    counts["attempts_done"] = sum(int(a) for status, _, a in rows if status == "done")
    return counts


def count_problems(counts: dict[str, int], expected: int) -> list[str]:
    """What the table says went wrong when ``expected`` jobs should each have been claimed once
    and completed (``counts`` from :func:`job_counts` on a table seeded with pending rows only)."""
    problems = []
    if counts["done"] != expected:
        problems.append(f"{counts['done']:,} jobs done, {expected:,} expected"
                        + (" (the backlog ran out)" if not counts.get("pending") else ""))
    if counts["running"]:
        problems.append(f"{counts['running']:,} jobs left running (a claim without its completion)")
    if counts["attempts_done"] != counts["done"]:
        problems.append(f"{counts['attempts_done'] - counts['done']:,} claims beyond one per done job")
    return problems
