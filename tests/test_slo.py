"""SLOs (``bench.results.slo``) and the exit statuses a script can trust (``bench.errors``).

The rule is checked on the result files of real runs (a fixture run, and runs made here against
the real PostgreSQL); every exit status of ``qbench run`` is checked by running it.
"""

from __future__ import annotations

import copy
from pathlib import Path
import pytest

from bench import errors
from bench.config.run_config import build_config
from bench.errors import ConfigError
from bench.results import slo
from bench.results.model import outcomes
from conftest import CLEAN_INVARIANTS, run_and_load

SHORT = ("--duration", "3s", "--warmup", "1s", "--workers", "4")


@pytest.fixture(scope="module")
def clean_run(dsn, tmp_path_factory) -> dict:
    """A clean, complete, trusted closed-loop run's summary.json, made here."""
    _, data, _ = run_and_load(dsn, tmp_path_factory.mktemp("clean"), *SHORT, quiet=True)
    assert data["complete"] and not data["suspect"] and data["invariants"] == CLEAN_INVARIANTS
    return data


@pytest.fixture
def summary(clean_run) -> dict:
    """A copy of :func:`clean_run` a test may change."""
    return copy.deepcopy(clean_run)


def test_objectives_parse_into_base_units():
    parsed = slo.objectives("Pickup_p99 <= 1s, claim_p99<=50ms,complete_max<=800us,error_rate<=0.5%,"
                            "throughput_share>=0.99,age_slope<=0.01")
    assert [(o.key, o.op, o.threshold) for o in parsed] == [
        ("pickup_p99", "<=", 1.0), ("claim_p99", "<=", 0.05), ("complete_max", "<=", pytest.approx(800e-6)),
        ("error_rate", "<=", 0.005), ("throughput_share", ">=", 0.99), ("age_slope", "<=", 0.01)]
    assert slo.canonical("Pickup_p99 <= 1s, claim_p99<=50ms") == "pickup_p99<=1s,claim_p99<=50ms"
    assert slo.canonical("") == ""


@pytest.mark.parametrize("text, says", [
    ("claim_p99<1s", "claim_p99 is a ceiling"), ("throughput_share<=99%", "throughput_share is a floor"),
    ("claim_p99<=50", "needs a time unit"), ("age_max<=2%", "needs a time unit"), ("age_slope<=1s", "no unit"),
    ("pickup_p99<=1e400s", "not a finite number"),
    ("error_rate<=2ms", "% or as a fraction"), ("error_rate<=101%", "more than 100 %"),
    ("claim_p99<=0s", "cannot be met"), ("queue_p99<=1s", "unknown key 'queue_p99'"),
    ("claim_p99<=1s,claim_p99<=2s", "given twice"), ("claim_p99<=1s,", "empty objective"),
    ("claim_p99", "is not key<=value"),
])
def test_bad_objectives_are_refused_in_one_line(text, says):
    with pytest.raises(ConfigError) as err:
        slo.objectives(text)
    assert err.value.param == "SLO" and says in str(err.value) and "\n" not in str(err.value)


def test_open_loop_keys_need_a_rate():
    with pytest.raises(ConfigError, match="--slo: pickup_p99 needs arrivals"):
        build_config("default", {"slo": "pickup_p99<=1s"})
    with pytest.raises(ConfigError, match="--slo: throughput_share needs arrivals"):
        build_config("default", {"slo": "throughput_share>=99%"})
    for key in ("age_max<=5s", "age_slope<=0.05"):  # a drain's age is the seeded backlog's, its slope unmeasured
        with pytest.raises(ConfigError, match="needs arrivals"):
            build_config("default", {"slo": key})
    assert build_config("default", {"slo": "pickup_p99<=1s", "rate": "100"}).slo == "pickup_p99<=1s"
    assert build_config("default", {"slo": "claim_p99<=1s"}).slo == "claim_p99<=1s"


@pytest.mark.slow
def test_judge_reads_each_figure_from_the_summary(summary):
    p99_us, max_us = summary["claim_latency_us"]["p99"], summary["claim_latency_us"]["max"]
    above, below = f"claim_p99<={p99_us + 1:.0f}us", f"claim_max<={max_us - 1:.0f}us"
    passed = slo.judge(above, summary)
    assert passed["status"] == "pass" and passed["objectives"][0]["measured"] == pytest.approx(p99_us / 1e6)
    failed = slo.judge(f"{above},{below},complete_max<=1us", summary)
    assert failed["status"] == "fail" and slo.worst_ratio(failed) > 1 >= slo.worst_ratio(passed)
    assert [o["status"] for o in failed["objectives"]] == ["pass", "fail", "fail"]
    assert slo.judge("", summary) is None


@pytest.mark.slow
def test_error_rate_leaves_nowait_refusals_out(summary):
    s = copy.deepcopy(summary)
    claims = s["claims"]  # counted, not claims_per_s x measured_s (rounded, it can be one off)
    s["errors"], s["nowait_retries"] = {"55P03": 40, "40P01": 2}, 40
    assert slo.measured(s, "error_rate") == pytest.approx(2 / claims)


@pytest.mark.slow
def test_an_untrusted_run_is_inconclusive_never_pass(summary):
    s = copy.deepcopy(summary)
    s["suspect"], s["suspect_reasons"] = True, ["load generator CPU reached 97 % of a core"]
    verdict = slo.judge("claim_max<=1000s,complete_max<=1us", s)
    assert verdict["status"] == "inconclusive"
    assert {o["status"] for o in verdict["objectives"]} == {"inconclusive"}
    assert "load generator CPU" in verdict["inconclusive_because"][0]


def test_the_first_status_wins_in_the_documented_order():
    assert errors.first_status([]) == errors.EXIT_OK
    assert errors.first_status([5, 4, 3]) == 3
    assert errors.first_status([5, 4]) == 4
    assert errors.first_status([4, 1, 130]) == 130
    assert errors.first_status([2, 3]) == 2
    with pytest.raises(ValueError):
        errors.first_status([7])


def exit_status_of(summary: dict, strict: bool = False) -> int:
    """The exit status ``qbench run`` gives a finished run: the first of its outcomes' statuses."""
    return errors.first_status(status for status, _ in outcomes(summary, strict))


@pytest.mark.slow
def test_outcomes_of_a_summary(summary):
    assert outcomes(summary) == [] and exit_status_of(summary, strict=True) == 0
    s = copy.deepcopy(summary)
    s["suspect"], s["suspect_reasons"] = True, ["the backlog ran dry"]
    assert exit_status_of(s) == 0 and exit_status_of(s, strict=True) == errors.EXIT_SUSPECT
    s["slo"] = slo.judge("claim_max<=1000s", s)  # inconclusive: not shown to hold
    assert exit_status_of(s, strict=True) == errors.EXIT_SLO
    s["invariants"] = {**CLEAN_INVARIANTS, "lost_jobs": 2}
    assert exit_status_of(s, strict=True) == errors.EXIT_INVARIANTS
    assert "invariants broken: lost_jobs = 2" in outcomes(s)[0][1]


@pytest.mark.slow
def test_a_run_that_meets_its_slo_exits_0_and_one_that_misses_exits_4(dsn, tmp_path):
    _, met, _ = run_and_load(dsn, tmp_path / "a", *SHORT, "--rate", "100", "--work-ms", "2",
                             "--slo", "pickup_p99<=5s,claim_p99<=5s,throughput_share>=50%,error_rate<=1%")
    assert met["slo"]["status"] == "pass", met["slo"]
    assert met["slo"]["objectives"][2]["measured"] == pytest.approx(met["jobs_completed"] / met["jobs_produced"])
    _, missed, proc = run_and_load(dsn, tmp_path / "b", *SHORT, "--slo", "claim_p99<=5s,claim_p50<=1us",
                                   expect=errors.EXIT_SLO)
    assert missed["slo"]["status"] == "fail"
    assert [o["status"] for o in missed["slo"]["objectives"]] == ["pass", "fail"]
    line = [x for x in proc.stderr.splitlines() if "(exit 4)" in x]
    assert len(line) == 1 and "claim_p50<=1us measured" in line[0], proc.stderr
    assert "SLO: fail (claim_p50<=1us measured" in proc.stdout


@pytest.mark.slow
def test_a_suspect_run_exits_5_only_under_strict(dsn, tmp_path):
    args = (*SHORT, "--backlog", "30")  # the backlog runs dry: a suspect run
    _, summary, _ = run_and_load(dsn, tmp_path / "a", *args)
    assert summary["suspect"] and "the backlog ran dry" in " ".join(summary["suspect_reasons"])
    _, _, proc = run_and_load(dsn, tmp_path / "b", *args, "--strict", expect=errors.EXIT_SUSPECT)
    assert "suspect run (--strict)" in proc.stderr
    # An SLO measured in it is inconclusive, and the SLO's status comes before the suspect one.
    _, summary, _ = run_and_load(dsn, tmp_path / "c", *args, "--strict", "--slo", "claim_max<=1000s",
                                 expect=errors.EXIT_SLO)
    assert summary["slo"]["status"] == "inconclusive"


def test_the_docs_show_the_exit_status_table():
    running = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text()
    assert errors.exit_status_table() in running
    assert [s for s, _ in errors.EXIT_MEANINGS][1:] == list(errors.PRECEDENCE)
