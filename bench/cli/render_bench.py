"""What a long run's result files cost to read: a benchmark of the report (``make report-bench``).

Stretches RUN_DIR's measured seconds to ``--seconds`` in a copy, then times ``qbench report`` and a full read
of the claim ``.hlog``, each in a fresh process: wall time and peak RSS (``VmHWM``, proc(5): Linux only)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from hdrh.log import HistogramLogReader

from bench.measure import metrics
from bench.results import run_files
from bench.results.histograms import sum_log
from bench.results.model import RunResult

#: The files copied as they are (the ones the report reads besides intervals.csv).
COPIED_FILES = ("run.json", "summary.json", "claim_plan.txt")


def _log_reader(path: Path) -> HistogramLogReader:
    # The widest histogram as reference: its range covers every name's.
    return HistogramLogReader(str(path), metrics.new_histogram("pickup_latency_us"))


def _tiled(df: pd.DataFrame, n_source: int, seconds: int) -> pd.DataFrame:
    """``df``'s rows (keyed by ``t_s`` in 0..n_source-1) repeated, ``t_s`` renumbered, up to ``seconds``."""
    blocks = [df.assign(t_s=df["t_s"] + block * n_source) for block in range(math.ceil(seconds / n_source))]
    out = pd.concat(blocks, ignore_index=True)
    return out[out["t_s"] < seconds]


def check_run_dir(source: Path) -> int:
    """The measured seconds of the run directory ``source``. Raises ValueError (naming RUN_DIR) when it lacks a
    file the report reads or has no measured second."""
    for name in (*COPIED_FILES, "intervals.csv"):
        if not (source / name).is_file():
            raise ValueError(f"RUN_DIR: {source} has no {name}; allowed: a results/<run_id> directory")
    n_source = len(RunResult.load(source).table("intervals.csv"))
    if n_source == 0:
        raise ValueError(f"RUN_DIR: {source} has no measured second; allowed: a run with a measured window")
    return n_source


def stretch_run(source: Path, out: Path, seconds: int) -> int:
    """Write ``out``: ``source``'s result files with its measured seconds repeated to ``seconds``; returns
    ``source``'s measured seconds. Raises ValueError as :func:`check_run_dir`."""
    n_source = check_run_dir(source)
    result = RunResult.load(source)
    intervals = result.table("intervals.csv")  # upgraded: written again in this format
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FILES:
        shutil.copy(source / name, out / name)
    tiled = _tiled(intervals, n_source, seconds).astype(object)
    run_files.write_intervals(out / "intervals.csv", tiled.where(tiled.notna(), None).to_dict("records"))
    if (source / "priority_ages.csv").is_file():
        _tiled(result.table("priority_ages.csv"), n_source, seconds).to_csv(
            out / "priority_ages.csv", index=False)
    names = [p.stem for p in sorted((source / "histograms").glob("*.hlog"))]
    base_s = dt.datetime.fromisoformat(json.loads((source / "run.json").read_text())["measured_start"]).timestamp()
    with run_files.HistogramLogs(out / "histograms", names, base_s) as logs:
        t_s = 0
        while t_s < seconds:
            readers = {name: _log_reader(source / "histograms" / f"{name}.hlog") for name in names}
            while t_s < seconds:
                hists = {name: reader.get_next_interval_histogram() for name, reader in readers.items()}
                if any(h is None for h in hists.values()):
                    break
                second = metrics.Interval(t_s, float(t_s), t_s + 1.0, hists, Counter(), Counter())
                logs.write(second)
                second.release()
                t_s += 1
            if t_s == 0:
                raise ValueError(f"RUN_DIR: {source}/histograms holds no interval; allowed: a run with a measured window")
    return n_source


#: Runs a module as ``python -m`` would and, at exit, writes the process's peak RSS (VmHWM of
#: /proc/self/status, Linux) to stderr. Not getrusage: after fork + exec a child's ru_maxrss starts
#: from the parent's high-water mark (the kernel keeps it across exec), which would hide its own.
_PEAK_WRAPPER = """\
import atexit, runpy, sys
def _peak():
    with open('/proc/self/status') as fh:
        sys.stderr.write(''.join(line for line in fh if line.startswith('VmHWM:')))
atexit.register(_peak)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""


def _timed(module: str, *args: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stdout) of ``python -m MODULE ARGS`` in a fresh process; raises on failure."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, module, *args], capture_output=True, text=True)
    wall = time.monotonic() - start
    peaks = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("VmHWM:")]
    if proc.returncode or not peaks:
        raise RuntimeError(f"python -m {module} {' '.join(args)} exited with {proc.returncode}: {proc.stderr.strip()}")
    return wall, int(peaks[-1]) / 1024, proc.stdout  # VmHWM is in kB


def main(argv: list[str] | None = None) -> int:
    """Entry point: stretch RUN_DIR, then time ``qbench report`` and a full read of the claim log."""
    parser = argparse.ArgumentParser(prog="python -m bench.cli.render_bench", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--seconds", default="3600", help="measured seconds of the stretched copy (default 3600)")
    parser.add_argument("--out", help="directory to write (default: a new temporary directory)")
    parser.add_argument("--sum-log", help=argparse.SUPPRESS)  # the timed child: sum one .hlog
    args = parser.parse_args(argv)
    if args.sum_log:
        n, total = sum_log(Path(args.sum_log))
        print(f"{n} {total.get_total_count()} {total.get_value_at_percentile(99)}")
        return 0
    if not args.seconds.isdigit() or int(args.seconds) < 1:
        print(f"--seconds: {args.seconds!r} is not allowed; allowed: a whole number of seconds >= 1", file=sys.stderr)
        return 2
    source, seconds = Path(args.run_dir), int(args.seconds)
    if args.out and Path(args.out).exists() and any(Path(args.out).iterdir()):
        print(f"--out: {args.out} is not empty; allowed: a new or empty directory", file=sys.stderr)
        return 2
    try:
        check_run_dir(source)
    except ValueError as err:
        print(str(err), file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="qbench-render-bench-"))
    n_source = stretch_run(source, out, seconds)
    size_mb = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    print(f"{out}: {source.name}'s {n_source} measured seconds repeated to {seconds} s "
          f"(intervals.csv {seconds} rows, one interval per second in each .hlog; {size_mb:,.1f} MB)")
    wall, rss, _ = _timed("bench.cli.main", "report", str(out))
    print(f"qbench report: {wall:.2f} s wall, peak RSS {rss:,.1f} MB")
    log = out / "histograms" / "claim_latency_us.hlog"
    wall, rss, text = _timed("bench.cli.render_bench", source.name, "--sum-log", str(log))
    n, count, p99 = (int(v) for v in text.split())
    print(f"sum of claim_latency_us.hlog with hdrh's HistogramLogReader ({n} intervals, {count:,} claims, "
          f"p99 {p99 / 1000:.3f} ms): {wall:.2f} s wall, peak RSS {rss:,.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
