"""The regression gate (``qbench compare A B --max-regression``, ``make gate``) on real runs' result files:
a regression beyond the limit and significant on repetitions exits 4; a smaller one, an improvement or no change
exits 0; one run on each side cannot be judged: refused (exit 2)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from bench.analysis.regression import regresses
from bench.usage import typed
from conftest import qbench

RUNS = Path(__file__).parent / "fixtures" / "sweep_small" / "runs"
FAST, FAST_TOO = RUNS / "20261130T100600Z-skip_locked-w20-b1-partial-53db", RUNS / "20261130T100700Z-skip_locked-w20-b1-partial-7076"
SLOW = RUNS / "20261130T100000Z-skip_locked-w20-b1-none-d16e"


def _gate(a: Path, b: Path, tmp_path: Path, *args: str):
    return qbench("compare", str(a), str(b), "--out", str(tmp_path / "c.html"), *args)


SWEEP = Path(__file__).parent / "fixtures" / "sweep_small"  # 6 cells, 2 repetitions each


def _slower_sweep(tmp_path: Path, name: str, factor: float) -> Path:
    """A copy of SWEEP whose repetitions all ran ``factor`` times the throughput and 1 / ``factor`` times the
    claim p99 (its runs' files are A's: only cells.csv, what a sweep comparison reads, changes)."""
    out = Path(shutil.copytree(SWEEP, tmp_path / name))
    with (out / "cells.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in (r for r in rows if r["throughput_jobs_per_s"]):  # a failed repetition has no figures
        row["throughput_jobs_per_s"] = str(float(row["throughput_jobs_per_s"]) * factor)
        row["claim_p99_us"] = str(float(row["claim_p99_us"]) / factor)
    with (out / "cells.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_a_significant_regression_beyond_the_limit_exits_4(tmp_path):
    """Two sweeps with repetitions: B's every repetition at 60 % of A's throughput and 1/0.6 of its claim p99."""
    proc = _gate(SWEEP, _slower_sweep(tmp_path, "slower", 0.6), tmp_path, "--max-regression", "10%")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    found = [line for line in proc.stdout.splitlines() if line.startswith("gate: REGRESSION")]
    assert any("throughput" in line and "(-40.0 %" in line for line in found), found
    assert any("claim p99" in line and "(+66.7 %" in line for line in found), found


def test_no_change_an_improvement_and_a_small_regression_pass(tmp_path):
    for b in (SWEEP, _slower_sweep(tmp_path, "faster", 1.5), _slower_sweep(tmp_path, "a_little_slower", 0.97)):
        proc = _gate(SWEEP, b, tmp_path, "--max-regression", "10%")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "gate: no regression beyond 10% on throughput, claim_p99" in proc.stdout


def test_one_run_on_each_side_cannot_be_judged(tmp_path):
    """Two single runs, even 97.7 % apart: their seconds miss the run-to-run spread, so the gate is refused in
    one line (exit 2) and nothing is written; without the gate, compare still shows the difference."""
    proc = _gate(FAST, SLOW, tmp_path, "--max-regression", "10%")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("qbench: --max-regression: no gated metric can be judged (first: throughput: one run "
                               "on each side") and "--repetitions 2 or more" in lines[0], lines[0]
    assert not (tmp_path / "c.html").exists()
    shown = _gate(FAST, SLOW, tmp_path)
    assert shown.returncode == 0 and "97.7 %" in shown.stdout  # (75.1 - 3,239) / 3,239


def test_the_rule_needs_both_size_and_significance():
    assert regresses(-0.2, True, True, 0.1) and regresses(0.2, True, False, 0.1)
    assert not regresses(-0.2, False, True, 0.1) and not regresses(-0.2, None, True, 0.1)
    assert not regresses(-0.05, True, True, 0.1) and not regresses(0.5, True, True, 0.1)


@pytest.mark.parametrize("args, says", [(("--max-regression", "0"), "MAX_REGRESSION"),
                                        (("--max-regression", "10"), "MAX_REGRESSION"),  # would be 1,000 %
                                        (("--max-regression", "ten"), "MAX_REGRESSION"),
                                        (("--max-regression=-5%",), "MAX_REGRESSION"),
                                        (("--max-regression", "5%", "--gate-metrics", "p99"), "GATE_METRICS"),
                                        (("--gate-metrics", "throughput"), "GATE_METRICS")])
def test_bad_gate_input_is_refused(args, says, tmp_path):
    proc = _gate(FAST, SLOW, tmp_path, *args)
    assert proc.returncode == 2 and proc.stderr.startswith(f"qbench: {typed(says)}:"), proc.stderr
    assert not (tmp_path / "c.html").exists()
