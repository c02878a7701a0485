"""The rule that turns an experiment's measured figures into its verdict (the rule: docs/experiments.md,
"Verdicts"). Pure functions on plain values: no database, no files."""

from __future__ import annotations

import math
import operator
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from bench.analysis.statistics import mean_ci

#: Comparison operators a threshold may use.
OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
#: A figure closer than this share of its threshold to the threshold is too close to call:
#: the run-to-run spread of one short run on a shared machine is of this order.
CLOSE_CALL = 0.05
#: How a figure may be decided: every repetition on one side (default) or its 95 % interval.
DECIDE_BY = ("repetitions", "ci95")
#: The fewest repetitions a ``ci95`` figure is decided on.
CI_MIN_REPETITIONS = 3


@dataclass(frozen=True)
class Threshold:
    """``value <op> number``, from text such as ``"<= 1.3"``; raises ValueError on other text."""

    op: str
    number: float

    @classmethod
    def parse(cls, text: str) -> "Threshold":
        """``"<= 1.3"`` -> Threshold("<=", 1.3). Raises ValueError naming what is allowed."""
        parts = str(text).split()
        if len(parts) != 2 or parts[0] not in OPERATORS:
            raise ValueError(f"{text!r} is not a threshold; allowed: an operator ({' '.join(OPERATORS)}) "
                             "and a number, e.g. \"<= 1.3\"")
        try:
            number = float(parts[1])
        except ValueError:
            raise ValueError(f"{text!r}: {parts[1]!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{text!r}: the threshold must be a finite number")
        return cls(parts[0], number)

    def met(self, value: float) -> bool:
        """Whether ``value`` is on the right side."""
        return OPERATORS[self.op](value, self.number)

    def close(self, value: float) -> bool:
        """Within :data:`CLOSE_CALL` of the threshold (never for ``==`` or a zero threshold,
        where the figure is a count that is either that number or not)."""
        if self.op == "==" or self.number == 0:
            return False
        return abs(value - self.number) <= CLOSE_CALL * abs(self.number)

    def __str__(self) -> str:
        return f"{self.op} {self.number:g}"


@dataclass
class Figure:
    """One measured figure: ``values`` has one entry per repetition (None where it could not be
    measured, with the reason in ``missing``); ``value`` is their median."""

    name: str
    threshold: Threshold
    values: list[float | None]
    missing: str = ""
    decide_by: str = "repetitions"

    @property
    def value(self) -> float | None:
        """The median over repetitions, None when any is missing."""
        if not self.values or any(v is None for v in self.values):
            return None
        return float(statistics.median(self.values))

    def outcome(self) -> tuple[str, str]:
        """(``holds`` | ``does not hold`` | ``inconclusive``, why) for this figure alone."""
        if not self.values:
            return "inconclusive", f"{self.name}: not measured" + (f" ({self.missing})" if self.missing else "")
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in self.values):
            return "inconclusive", f"{self.name}: could not be measured ({self.missing or 'no value'})"
        if self.decide_by == "ci95":
            return self._ci_outcome()
        met = [self.threshold.met(v) for v in self.values]
        shown = ", ".join(f"{v:.4g}" for v in self.values)
        if any(met) and not all(met):
            return "inconclusive", (f"{self.name}: noisy, its repetitions ({shown}) fall on both sides of "
                                    f"{self.threshold}")
        if any(self.threshold.close(v) for v in self.values):
            return "inconclusive", (f"{self.name} = {shown} is within {CLOSE_CALL:.0%} of its threshold "
                                    f"{self.threshold}: too close to call")
        if all(met):
            return "holds", f"{self.name} = {shown} {self.threshold.op} {self.threshold.number:g}"
        return "does not hold", f"{self.name} = {shown}, not {self.threshold}"

    def _ci_outcome(self) -> tuple[str, str]:
        """The ``ci95`` rule: the 95 % interval of the mean, wholly on one side or not."""
        shown = ", ".join(f"{v:.4g}" for v in self.values)
        if len(self.values) < CI_MIN_REPETITIONS:
            return "inconclusive", (f"{self.name}: {len(self.values)} repetition(s) ({shown}); its 95 % interval "
                                    f"needs at least {CI_MIN_REPETITIONS}")
        mean, low, high = mean_ci(self.values)
        told = f"{self.name}: mean {mean:.4g}, 95 % CI [{low:.4g}, {high:.4g}] over {len(self.values)} repetitions ({shown})"
        if self.threshold.met(low) and self.threshold.met(high):
            return "holds", f"{told}, wholly {self.threshold}"
        if not self.threshold.met(low) and not self.threshold.met(high):
            return "does not hold", f"{told}, wholly outside {self.threshold}"
        return "inconclusive", f"{told} straddles {self.threshold}"


@dataclass
class Verdict:
    """An experiment's verdict (``holds``, ``does not hold``, ``inconclusive``, ``not applicable``), with reasons."""

    verdict: str
    reasons: list[str] = field(default_factory=list)


def decide(figures: Sequence[Figure], untrusted: Sequence[str] = (), unfinished: str = "",
           not_applicable: str = "") -> Verdict:
    """The verdict from ``figures``. ``untrusted``: one sentence per run problem the experiment does not accept;
    ``unfinished``: why not every run was measured, or ""; ``not_applicable``: why the engine cannot run it, or ""."""
    if not_applicable:
        return Verdict("not applicable", [not_applicable])
    blockers = [*([unfinished] if unfinished else []), *untrusted]
    if blockers:
        return Verdict("inconclusive", blockers)
    if not figures:
        return Verdict("inconclusive", ["the experiment measured no figure"])
    outcomes = [f.outcome() for f in figures]
    failed = [why for kind, why in outcomes if kind == "does not hold"]
    if failed:
        return Verdict("does not hold", failed + [why for kind, why in outcomes if kind != "does not hold"])
    unclear = [why for kind, why in outcomes if kind == "inconclusive"]
    if unclear:
        return Verdict("inconclusive", unclear + [why for kind, why in outcomes if kind == "holds"])
    return Verdict("holds", [why for _, why in outcomes])
