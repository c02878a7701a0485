"""``qbench capacity``: the highest arrival rate one design sustains (``make capacity``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.cli.checks import check_results_dir
from bench.cli.database import database, step_runner
from bench.config.run_config import RunConfig
from bench.engines import get_engine
from bench.errors import Interrupted, exit_status
from bench.results.model import utc_stamp
from bench.sweep import capacity_search


def capacity_command(args: argparse.Namespace, cfg: RunConfig) -> int:
    """Run ``qbench capacity`` for ``cfg`` (its ``rate`` is ``RATE_START``); returns the exit status."""
    start_rate = cfg.rate  # RATE_START, checked by the caller
    check_results_dir(cfg.results)
    out_dir = Path(cfg.results) / "capacity" / f"{utc_stamp()}-{cfg.policy}-w{cfg.workers}-b{cfg.batch}-{cfg.index}"
    db_context, _ = database(cfg.dsn, args.allow_remote, cfg.connections_needed(), cfg.engine, cfg, pooler=True)
    state_schema = get_engine(cfg.engine).state_schema_for(cfg.schema)
    with db_context as dsn:
        print(f"capacity search for {capacity_search.describe_design(cfg)} with {cfg.workers} workers, "
              f"from {start_rate:g} jobs/s -> {out_dir}")
        try:
            result = capacity_search.search(cfg, step_runner(out_dir, dsn, state_schema), start_rate, out_dir)
        except (Interrupted, KeyboardInterrupt) as err:
            sys.stderr.write(f"qbench: {err or 'capacity search interrupted'}; the steps measured so far are in "
                             f"{out_dir / 'capacity.json'}\n")
            return exit_status(err)
        finally:
            get_engine(cfg.engine).drop_schema_at(dsn, state_schema)
    print(result["sentence"])
    print(f"capacity: {(out_dir / 'capacity.json').resolve()}")
    return 0
