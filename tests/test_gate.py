"""The regression gate (``qbench compare A B --max-regression``, ``make gate``) on real runs' result files:
a regression beyond the limit and significant exits 4; a smaller one, an improvement or no change exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.analysis.regression import regresses
from conftest import qbench

RUNS = Path(__file__).parent / "fixtures" / "sweep_small" / "runs"
FAST, FAST_TOO = RUNS / "20261130T100600Z-skip_locked-w20-b1-partial-53db", RUNS / "20261130T100700Z-skip_locked-w20-b1-partial-7076"
SLOW = RUNS / "20261130T100000Z-skip_locked-w20-b1-none-d16e"


def _gate(a: Path, b: Path, tmp_path: Path, *args: str):
    return qbench("compare", str(a), str(b), "--out", str(tmp_path / "c.html"), *args)


def test_a_significant_regression_beyond_the_limit_exits_4(tmp_path):
    proc = _gate(FAST, SLOW, tmp_path, "--max-regression", "10%")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    found = [line for line in proc.stdout.splitlines() if line.startswith("gate: REGRESSION")]
    assert [line.split(":")[1].strip() for line in found] == ["REGRESSION throughput", "REGRESSION claim latency p99"]
    assert "97.7 %" in found[0] and "p < 0.0001" in found[0], found[0]  # (75.1 − 3,239) / 3,239


@pytest.mark.slow
def test_no_change_an_improvement_and_a_small_regression_pass(tmp_path):
    for a, b in ((FAST, FAST), (SLOW, FAST), (FAST, FAST_TOO)):  # FAST_TOO is 5.6 % slower than FAST
        proc = _gate(a, b, tmp_path, "--max-regression", "10%")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "gate: no regression beyond 10% on throughput, claim_p99" in proc.stdout
    proc = _gate(FAST, FAST_TOO, tmp_path, "--max-regression", "1%", "--gate-metrics", "throughput")
    assert proc.returncode == (4 if "REGRESSION throughput" in proc.stdout else 0), proc.stdout


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
    assert proc.returncode == 2 and proc.stderr.startswith(f"qbench: {says}:"), proc.stderr
    assert not (tmp_path / "c.html").exists()
