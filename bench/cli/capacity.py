"""``qbench capacity``: the highest arrival rate one design sustains (``make capacity``)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
from pathlib import Path

from bench.cli.checks import check_results_dir
from bench.config.run_config import RunConfig
from bench.engines import get_engine
from bench.errors import exit_status
from bench.sweep import capacity_search


def capacity_command(args: argparse.Namespace, cfg: RunConfig, database) -> int:
    """Run ``qbench capacity`` for ``cfg`` (its ``rate`` is ``RATE_START``) in ``database`` (see
    :func:`bench.cli.main._database`); returns the exit status."""
    start_rate = cfg.rate  # RATE_START, checked by the caller
    check_results_dir(cfg.results)

    from bench import runner  # here, after the checks: Locust takes ~1 s, which a refusal does not pay
    from bench.report.run_page import render_report  # here: matplotlib (~1 s), likewise

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(cfg.results) / "capacity" / f"{stamp}-{cfg.policy}-w{cfg.workers}-b{cfg.batch}-{cfg.index}"
    db_context, _ = database(cfg.dsn, args.allow_remote, cfg.connections_needed(), cfg.engine)
    state_schema = get_engine(cfg.engine).state_schema_for(cfg.schema)
    with db_context as dsn:
        def run_step(step_cfg):
            run_dir = runner.run(dataclasses.replace(step_cfg, results=str(out_dir / "runs")), dsn,
                                 log=lambda line: None, state_schema=state_schema)
            render_report(run_dir)
            return run_dir

        print(f"capacity search for {capacity_search.describe_design(cfg)} with {cfg.workers} workers, "
              f"from {start_rate:g} jobs/s -> {out_dir}")
        try:
            result = capacity_search.search(cfg, run_step, start_rate, out_dir)
        except (capacity_search.SearchStopped, KeyboardInterrupt) as err:
            sys.stderr.write(f"qbench: {err or 'capacity search interrupted'}; the steps measured so far are in "
                             f"{out_dir / 'capacity.json'}\n")
            return exit_status(err)
        finally:
            get_engine(cfg.engine).drop_schema_at(dsn, state_schema)
    print(result["sentence"])
    print(f"capacity: {(out_dir / 'capacity.json').resolve()}")
    return 0
