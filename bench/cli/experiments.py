"""``qbench experiments [NAME…]`` (``make experiments``): run the catalogue, decide each verdict, render
``experiments.html``. Exit: 0 every verdict reached, 1 the catalogue could not run, 2 bad input, 130
interrupted."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench.cli.checks import check_results_dir, chosen_dsn
from bench.cli.database import check_room, database, render_run
from bench.cli.run_options import DSN_SCHEMES, add_database_options
from bench.config.run_config import build_config
from bench.engines import require_pooler_binary, get_engine


def add_parser(sub) -> None:
    """Add the ``experiments`` subcommand to ``sub`` (argparse subparsers)."""
    exp = sub.add_parser(
        "experiments", help="run the experiments catalogue (known queue rules, each with a verdict)",
        description="Run the experiments of the catalogue (docs/experiments.md in the source repository). Each "
                    "states a rule about queues kept in a table, runs what tests it on this database, and gives a "
                    "verdict: holds, does not hold, inconclusive (with the reasons) or not applicable. The page is "
                    "RESULTS/experiments/<tier>-<stamp>/experiments.html, beside experiments.json; running the same "
                    "selection again resumes an interrupted catalogue.")
    exp.add_argument("names", nargs="*", metavar="NAME",
                     help="an experiment by file name (convoy) or number (1), or a path to an experiment file of "
                          "your own (default: the whole catalogue)")
    exp.add_argument("--full", action="store_true",
                     help="run each experiment's long version (its [full] table: soaks, big histories, wider "
                          "matrices) instead of the quick one (default: no)")
    exp.add_argument("--fresh", action="store_true", help="start a new catalogue run instead of resuming "
                                                          "(default: no)")
    exp.add_argument("--results", default="results", help="experiments/<tier>-<stamp>/ is written here "
                                                          "(default: results)")
    add_database_options(exp, f"{DSN_SCHEMES} (default: $DATABASE_URL, else an embedded throwaway PostgreSQL)")
    exp.set_defaults(func=experiments_command)


def _require_pooler_binaries(experiments, sweeps, base) -> None:
    """Refuse (ConfigError, ``POOLER``) before any server starts when a chosen experiment needs the embedded
    pooler (a probe through PgBouncer, a cell with ``POOLER``) and its binary is missing."""
    from bench.experiments.catalogue import POOLER_PROBES

    needs = [cfg for s in sweeps for _, _, cfg in s.cells if cfg.pooler != "none"]
    if any(e.probe in POOLER_PROBES and not e.reason_not_applicable(base.engine) for e in experiments):
        needs.append(dataclasses.replace(base, pooler="pgbouncer"))
    for cfg in needs[:1]:
        require_pooler_binary(base.engine, cfg)


def experiments_command(args: argparse.Namespace) -> int:
    """Validate the selection, start or reuse the database, run the catalogue, render the page."""
    from bench.experiments.catalogue import load_catalogue  # here: pandas and scipy (~1 s), not for --help

    dsn_given = chosen_dsn(args.dsn)
    experiments = load_catalogue(args.names, full=args.full, dsn=dsn_given)  # validates every file and run
    check_results_dir(args.results)
    base = build_config("default", {}, dsn=dsn_given)
    sweeps = [s for s in (e.sweep(dsn_given) for e in experiments if not e.reason_not_applicable(base.engine))
              if s is not None]
    needs = [s.max_connections() for s in sweeps] + [base.connections_needed()]
    connections = max(needs)  # the embedded server is started with room for the largest cell
    _require_pooler_binaries(experiments, sweeps, base)

    from bench.experiments.driver import run_catalogue  # here, after the checks: Locust (~1 s)
    from bench.report.experiments_page import render_experiments_page  # here: matplotlib (~1 s)

    engine = get_engine(base.engine)
    context, embedded = database(dsn_given, args.allow_remote, connections, base.engine, base)
    with context as dsn:
        # before anything is created; on a server of yours, room for the smallest experiment: a cell that does not
        # fit (experiment 23's 300 direct workers on a default max_connections) is refused by its run, and only
        # its experiment is inconclusive
        check_room(engine, dsn, base.schema, connections if embedded else min(needs), "queue-bench experiments", base)

        def probe(kind: str) -> dict:
            run_probe = getattr(engine, f"{kind}_probe", None)
            if run_probe is None:
                return {"not_applicable": f"the {base.engine} engine has no {kind} probe"}
            return run_probe(dsn, base.schema)

        catalogue_dir = run_catalogue(experiments, dsn, base.engine, Path(args.results), probe_runner=probe,
                                      fresh=args.fresh, on_run=render_run, embedded=embedded)
    page = render_experiments_page(catalogue_dir)
    print(f"report: {page.resolve()}")
    return 0
