"""``qbench compare A B``: two runs or two sweeps side by side, and the regression gate."""

from __future__ import annotations

import argparse

from bench.analysis.regression import limit_text, parse_limit, parse_metrics
from bench.cli.checks import bad_input
from bench.errors import EXIT_SLO, ConfigError
from bench.usage import named, setting, via_make


def add_parser(sub) -> None:
    """The ``compare`` subcommand, with the regression gate's options."""
    cmp_ = sub.add_parser("compare", help="compare two runs or two sweeps (relative differences, Welch's t-test)")
    cmp_.add_argument("a", metavar="RUN_OR_SWEEP_A")
    cmp_.add_argument("b", metavar="RUN_OR_SWEEP_B")
    cmp_.add_argument("--out", help="HTML page to write (default: RUN_OR_SWEEP_B/compare_vs_<A's name>.html)")
    cmp_.add_argument("--max-regression", help="the regression gate: exit 4 when B is worse than A by more than this "
                                               "(e.g. 10%%) and significantly (p < 0.05) on a gated metric, judged on "
                                               "two sweeps' repetitions; one run a side: no verdict, exit 2 "
                                               "(default: none; make gate: 10%%)")
    cmp_.add_argument("--gate-metrics", help="what the gate checks, a comma list of throughput, claim_p50, claim_p95, "
                                             "claim_p99, age_max (default: throughput,claim_p99)")
    cmp_.set_defaults(func=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    """``qbench compare A B [--out PATH] [--max-regression 10%]``: prints the table and ``report: <path>``;
    returns 4 on a regression, 2 (nothing written) when no gated metric can be judged."""
    from bench.report.compare_page import CompareError, compare, gate  # here: matplotlib and pandas (~1 s)

    for name, value in (("RUN_OR_SWEEP_A", args.a), ("RUN_OR_SWEEP_B", args.b)):
        if not value.strip():
            raise ConfigError(name, "empty; allowed: a results/<run_id> or results/sweeps/<sweep_id> directory "
                                    + ("(make compare A=... B=...)" if via_make() else "(qbench compare A B)"))
    limit = None if args.max_regression is None else parse_limit(args.max_regression)
    metrics = parse_metrics(args.gate_metrics)
    if args.gate_metrics is not None and limit is None:
        raise ConfigError("GATE_METRICS", named("names what {max_regression} gates on; allowed: with {max_regression}"))
    try:
        found, untested, judged = gate(args.a, args.b, limit, metrics) if limit is not None else ([], [], 0)
        if limit is not None and not judged:  # refused before the page is written: nothing created
            raise ConfigError("MAX_REGRESSION", f"no gated metric can be judged (first: {untested[0].split(';')[0]}): "
                                                "seconds within a run do not hold the run-to-run spread; allowed: A "
                                                f"and B two sweeps run with {setting('repetitions', 2)} or more, or "
                                                + named("leave {max_regression} out to only compare"))
        text, page = compare(args.a, args.b, args.out)
    except CompareError as err:
        return bad_input(str(err))
    print(text)
    if limit is not None:
        for line in untested:
            print(f"gate: cannot judge {line}")
        for line in found:
            print(f"gate: REGRESSION {line}")
        if not found:
            print(f"gate: no regression beyond {limit_text(limit)} on {', '.join(metrics)}")
    print(f"report: {page.resolve()}")
    return EXIT_SLO if found else 0
