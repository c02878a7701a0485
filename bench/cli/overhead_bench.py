"""What the tool's measurement costs (``make overhead-bench``, a benchmark, not a test; docs/measurements/overhead.md).

On one database, in rounds (A B C, then C B A, ...): each queue library's own worker from its own command line on
``--jobs`` pre-inserted jobs (:mod:`bench.engines.postgres.library_workers.own_cli`), then the same worker run
through the tool (``LIBRARY_MODE=worker``) at the measurement's default and at its minimum
(:data:`MINIMUM_OPTIONS`); the built-in queue at both measurements. A library's jobs/s is read from its own
tables for every side alike (its jobs finished between the 10th and the 90th percentile of their finish
times, :func:`middle_rate`); the built-in queue's is the tool's own figure. Prints one line per side and one
ratio line per library and round."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.config.run_config import build_config
from bench.engines import engine_for
from bench.engines.common import with_connection
from bench.engines.postgres.library_workers import own_cli
from bench.errors import ConfigError
from bench.run_summary.measurement_cost import measurement_line

#: The run options that put the tool's measurement at its minimum (docs/measurements/overhead.md says what
#: each leaves out).
MINIMUM_OPTIONS = ("--monitor=stats",)
#: The share of a library's finish times its jobs/s is read over: the middle, without the start and the tail.
MIDDLE_SHARE = (0.1, 0.9)
LIBRARIES = ("procrastinate", "pgqueuer")


def middle_rate(times: list[float]) -> float | None:
    """Jobs/s over the middle :data:`MIDDLE_SHARE` of sorted finish times ``times`` (epoch s); None with fewer
    than 10 or no time between them."""
    if len(times) < 10:
        return None
    lo, hi = int(len(times) * MIDDLE_SHARE[0]), int(len(times) * MIDDLE_SHARE[1]) - 1
    span = times[hi] - times[lo]
    return (hi - lo) / span if span > 0 else None


def _cfg(args, queue: str, backlog: int):
    return build_config(overrides={"queue": queue, "workers": args.workers, "work_ms": args.work_ms,
                                   "backlog": backlog, "schema": args.schema, "batch": args.batch.get(queue)},
                        dsn=args.dsn)


def own_side(args, package: str) -> dict:
    """``package``'s own command line on a freshly seeded table: its jobs/s, wall time and CPU (user + system s)."""
    cfg = _cfg(args, package, args.jobs)
    engine = engine_for(cfg)
    with_connection(lambda: engine.connect(args.dsn, "queue-bench overhead"),
                    lambda conn: engine.prepare(conn, cfg, args.jobs, log=lambda _m: None, state_schema=None))
    env = own_cli.environment(args.dsn, cfg.schema, args.work_ms)
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(own_cli.command(package, cfg.workers, cfg.batch), env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{package}'s own worker exited with status {proc.returncode}: "
                             f"{err.read().decode(errors='replace')[-400:]}")
    times = own_cli.finish_times(args.dsn, cfg.schema, package)
    return {"side": "own", "jobs": len(times), "jobs_per_s": middle_rate(times), "wall_s": wall_s,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def tool_side(args, queue: str, side: str, duration_s: int) -> dict:
    """One ``qbench run`` of ``queue`` (``side``: ``default`` or ``minimum``); its figures from its summary.json,
    with a library's jobs/s read from its tables as :func:`own_side` reads them."""
    results = tempfile.mkdtemp(prefix="qbench-overhead-")
    argv = [sys.executable, "-m", "bench.cli.main", "run", f"--queue={queue}", f"--workers={args.workers}",
            f"--work-ms={args.work_ms:g}", f"--duration={duration_s}s", f"--warmup={0 if queue != 'builtin' else 2}s",
            f"--dsn={args.dsn}", f"--schema={args.schema}", f"--results={results}",
            *([f"--backlog={args.jobs}"] if queue != "builtin" else []),
            *([f"--batch={args.batch[queue]}"] if args.batch.get(queue) else []),
            *(MINIMUM_OPTIONS if side == "minimum" else ())]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 5):
        raise SystemExit(f"qbench run ({queue}, {side}) exited {proc.returncode}: {proc.stderr[-600:]}")
    summary = json.loads(next(Path(results).glob("*/summary.json")).read_text())
    out = {"side": side, "tool_jobs_per_s": summary["throughput_jobs_per_s"], "suspect": summary["suspect"],
           "cost": summary["measurement_cost"]}
    if queue in own_cli.FINISHED_SQL:
        times = own_cli.finish_times(args.dsn, args.schema, queue)
        out.update(jobs=len(times), jobs_per_s=middle_rate(times))
    else:
        out["jobs_per_s"] = summary["throughput_jobs_per_s"]
    return out


def _line(queue: str, r: dict, load: str) -> str:
    rate = "-" if r.get("jobs_per_s") is None else f"{r['jobs_per_s']:,.1f}"
    extra = (f"cpu {r['cpu_s']:.1f} s, wall {r['wall_s']:.1f} s" if r["side"] == "own" else
             f"tool's figure {r['tool_jobs_per_s']:,.1f} jobs/s; {measurement_line(r['cost'])}"
             f"{'; suspect' if r['suspect'] else ''}")
    return f"{queue:<13} {r['side']:<8} {rate:>9} jobs/s  ({extra}; loadavg {load})"


def bench(args) -> dict:
    """Run the rounds, the sides in reverse order every second round (A B C, C B A: a drift of the machine
    falls on both); print each side and each ratio; returns every figure."""
    figures: dict[str, list] = {q: [] for q in args.queues}
    own_wall_s: dict[str, float] = {}
    for round_ in range(1, args.rounds + 1):
        for queue in args.queues:
            order = ("own", "default", "minimum") if queue != "builtin" else ("default", "minimum")
            sides = []
            for side in order if round_ % 2 else order[::-1]:
                if side == "own":
                    r = own_side(args, queue)
                    own_wall_s[queue] = r["wall_s"]
                else:  # a library's run lasts until its backlog is surely drained (the first round's own first)
                    duration_s = (int(own_wall_s[queue] * 1.3) + 4 if queue in own_wall_s
                                  else args.builtin_duration_s)
                    r = tool_side(args, queue, side, duration_s)
                sides.append(r)
                print(_line(queue, r, _load()), flush=True)
            figures[queue].append(sides)
            print(_ratio_line(queue, round_, sides), flush=True)
    for queue, rounds in figures.items():
        print(_median_line(queue, rounds), flush=True)
    return figures


def _ratio_line(queue: str, round_: int, sides: list[dict]) -> str:
    by = {s["side"]: s.get("jobs_per_s") for s in sides}
    base = by.get("own") or by.get("minimum")
    parts = [f"{k}/{'own' if 'own' in by else 'minimum'} {v / base:.3f}" for k, v in by.items()
             if v and base and k != ("own" if "own" in by else "minimum")]
    return f"{queue:<13} round {round_}: {', '.join(parts)}"


def _median_line(queue: str, rounds: list[list[dict]]) -> str:
    def ratio(r: list[dict], side: str) -> float | None:
        by = {s["side"]: s.get("jobs_per_s") for s in r}
        base = by.get("own") or by.get("minimum")
        return by[side] / base if by.get(side) and base else None
    sides = ("default", "minimum") if queue != "builtin" else ("default",)
    base = "own worker" if queue != "builtin" else "minimum"
    meds = [f"{s}/{base} median {statistics.median(v):.3f}" for s in sides
            if (v := [x for r in rounds if (x := ratio(r, s)) is not None])]
    return f"{queue}: {', '.join(meds)} over {len(rounds)} rounds"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def parse(argv: list[str]):
    """The options; ConfigError names a bad one."""
    p = argparse.ArgumentParser(prog="python -m bench.cli.overhead_bench", description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True, help="the PostgreSQL database every side runs on")
    p.add_argument("--queues", default="procrastinate,pgqueuer,builtin")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=20)
    p.add_argument("--work-ms", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--builtin-duration-s", type=int, default=15)
    p.add_argument("--schema", default="qbench_overhead")
    args = p.parse_args(argv)
    args.queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    for q in args.queues:
        if q not in (*LIBRARIES, "builtin"):
            raise ConfigError("--queues", f"{q!r}; allowed: {', '.join((*LIBRARIES, 'builtin'))}")
    for name in ("jobs", "workers", "rounds"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", f"{getattr(args, name)}; allowed: 1 or more")
    args.batch = {"pgqueuer": 10}
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 2 on a bad option."""
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        for queue in args.queues:  # the run's own refusals, before anything runs
            _cfg(args, queue, args.jobs)
    except ConfigError as err:
        print(f"overhead-bench: {err}", file=sys.stderr)
        return 2
    bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
