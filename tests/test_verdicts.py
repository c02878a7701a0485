"""The verdict rules (bench.analysis.verdicts) on fixture figures, both sides of each threshold."""

from __future__ import annotations

import pytest

from bench.analysis.verdicts import CLOSE_CALL, Figure, Threshold, decide


def fig(values, holds_if="<= 1.3", name="f"):
    return Figure(name, Threshold.parse(holds_if), list(values))


@pytest.mark.parametrize("holds_if, value, met", [
    ("<= 1.3", 1.0, True), ("<= 1.3", 1.6, False), ("< 2", 1.0, True), ("< 2", 3.0, False),
    (">= 0.7", 0.9, True), (">= 0.7", 0.5, False), ("> 0", 3, True), ("> 0", 0, False),
    ("== 0", 0, True), ("== 0", 2, False),
])
def test_threshold_sides(holds_if, value, met):
    assert Threshold.parse(holds_if).met(value) is met
    assert fig([value], holds_if).outcome()[0] == ("holds" if met else "does not hold")


@pytest.mark.parametrize("text", ["1.3", "<=1.3", "~ 1", "<= x", "<= inf", "", "<= 1 2"])
def test_bad_thresholds_are_refused(text):
    with pytest.raises(ValueError):
        Threshold.parse(text)


def test_all_figures_hold():
    v = decide([fig([1.0, 1.1]), fig([0.9], ">= 0.7")])
    assert v.verdict == "holds" and len(v.reasons) == 2


def test_one_figure_failing_in_every_repetition_does_not_hold():
    v = decide([fig([1.0]), fig([0.4, 0.5], ">= 0.7", name="waiters")])
    assert v.verdict == "does not hold"
    assert "waiters" in v.reasons[0]


def test_repetitions_on_both_sides_are_noisy():
    v = decide([fig([1.0, 1.6])])
    assert v.verdict == "inconclusive" and "noisy" in v.reasons[0]


def test_a_value_within_the_close_call_is_too_close():
    near = 1.3 * (1 + CLOSE_CALL / 2)  # on the wrong side, but within the margin
    assert decide([fig([near])]).verdict == "inconclusive"
    far = 1.3 * (1 + 2 * CLOSE_CALL)
    assert decide([fig([far])]).verdict == "does not hold"
    # counts against 0 or ==: no margin
    assert decide([fig([1], "> 0")]).verdict == "holds"
    assert decide([fig([0], "== 0")]).verdict == "holds"


def test_a_failure_outweighs_an_unclear_figure():
    v = decide([fig([1.0, 1.6]), fig([5.0])])
    assert v.verdict == "does not hold"


def test_missing_values_untrusted_runs_budget_and_engine():
    assert decide([fig([None])]).verdict == "inconclusive"
    assert decide([]).verdict == "inconclusive"
    untrusted = decide([fig([1.0])], untrusted=["c001 (run): suspect run: harness CPU 97 %"])
    assert untrusted.verdict == "inconclusive" and "suspect" in untrusted.reasons[0]
    budget = decide([fig([1.0])], unfinished="the budget of 60 s ran out after 1 of 2 runs")
    assert budget.verdict == "inconclusive" and "budget" in budget.reasons[0]
    na = decide([fig([1.0])], not_applicable="MariaDB has no LISTEN/NOTIFY")
    assert na.verdict == "not applicable" and na.reasons == ["MariaDB has no LISTEN/NOTIFY"]


def test_a_ci95_figure_is_decided_on_its_interval_over_at_least_three_repetitions():
    """``decide_by = "ci95"``: the 95 % interval of the mean, wholly above (holds), wholly below
    (does not hold), across the threshold (inconclusive), or from fewer than 3 repetitions."""
    grows = lambda values: Figure("ratio", Threshold.parse(">= 1.5"), values, decide_by="ci95")  # noqa: E731
    assert grows([2.1, 2.2, 2.3]).outcome()[0] == "holds"
    assert grows([1.1, 1.2, 1.15]).outcome()[0] == "does not hold"
    # every repetition above 1.5, but the spread puts the interval's low end below it
    kind, why = grows([1.55, 2.4, 3.3]).outcome()
    assert kind == "inconclusive" and "straddles" in why, why
    kind, why = grows([2.1, 2.3]).outcome()
    assert kind == "inconclusive" and "at least 3" in why, why
    kind, why = grows([2.1, 2.2, 2.3]).outcome()
    assert "95 % CI [1.952, 2.448]" in why, why  # 2.2 ± t(0.975, 2) = 4.303 × 0.1/√3
