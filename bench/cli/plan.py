"""``qbench plan``: the capacity plan (``make plan``). Checks every input before anything runs, starts
or checks the database, runs (or resumes) the plan, renders ``plan.html`` and exits with the answer's
status (0 met and confirmed, 4 nothing meets the SLO or the confirmation failed, 130 interrupted)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import Any, Callable

from bench.config.run_config import RunConfig, build_config
from bench.errors import ConfigError, exit_status
from bench.plan.options import (EMBEDDED_MAX_WORKERS, PLAN_OPTIONS, STEP_DURATION, STEP_WARMUP, candidates,
                                plan_options, varied)
from bench.results.model import read_result


def add_parser(sub, run_options, workload_help: str) -> argparse.ArgumentParser:
    """The ``plan`` subcommand: every run parameter (lists allowed for candidates) and the plan's own options."""
    plan = sub.add_parser("plan", help="the capacity plan: the fewest workers that meet an SLO at a target RATE, "
                                       "the headroom above it, across candidate designs")
    plan.add_argument("--workload", help=workload_help)
    for p in PLAN_OPTIONS:
        plan.add_argument(p.option, dest=p.key, help=p.help)
    plan.add_argument("--fresh", action="store_true", help="start a new plan instead of resuming an unfinished one")
    for option, key, text in run_options:
        plan.add_argument(option, dest=key, help=text)
    plan.add_argument("--dsn", help="PostgreSQL or MariaDB (mysql://) DSN; default $DATABASE_URL, else an "
                                    "embedded throwaway server")
    plan.add_argument("--allow-remote", action="store_true", help="confirm a DSN that is not loopback")
    return plan


def _design_builder(workload: str, overrides: dict[str, Any], dsn: str | None) -> Callable[[int | None, float | None], RunConfig]:
    """``config(workers, rate)``: the design's validated step configuration (None: the given value)."""
    step = {"duration": overrides.get("duration") or STEP_DURATION, "warmup": overrides.get("warmup") or STEP_WARMUP}

    def config(workers: int | None, rate: float | None) -> RunConfig:
        chosen = {k: v for k, v in (("workers", workers), ("rate", rate)) if v is not None}
        return build_config(workload, {**overrides, **step, **{k: str(v) for k, v in chosen.items()}}, dsn=dsn)
    return config


def _label(design: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k.upper()}={design[k]}" for k in keys) or "the design"


def _resumable(plans_dir: Path, inputs: dict[str, Any]) -> Path | None:
    """The newest unfinished plan directory with the same inputs, or None."""
    for directory in sorted(plans_dir.glob("*/"), reverse=True):
        try:
            state = read_result(directory / "plan.json")
        except Exception:  # noqa: BLE001 - a directory that is not a plan's is not resumed
            continue
        if not state.get("complete") and state.get("inputs") == inputs:
            return directory
    return None


def plan_command(args: argparse.Namespace, overrides: dict[str, Any], workload: str, dsn: str | None,
                 database: Callable[[str | None, bool, int, str], Any], check_results_dir) -> int:
    """Run ``qbench plan``; ``database(dsn, allow_remote, connections, engine)`` gives the CLI's (context
    manager for the database, embedded?): the DSN after the loopback check, or an embedded server."""
    from bench.plan.planner import Design, Planner, least_workers

    options = plan_options({p.key: getattr(args, p.key) for p in PLAN_OPTIONS})
    given = {k: v for k, v in overrides.items() if v not in (None, "")}
    if "slo" not in given:
        raise ConfigError("SLO", "a plan needs the objective it plans for; allowed: e.g. SLO='pickup_p99<=1s'")
    if "rate" not in given:
        raise ConfigError("RATE", "a plan needs the target arrival rate; allowed: RATE > 0 jobs/s, e.g. RATE=500")
    designs_given = candidates(given)
    keys = varied(designs_given)
    builders = [_design_builder(workload, d, dsn) for d in designs_given]
    first = builders[0](None, None)  # validates RATE, SLO and every other given value
    rate = first.rate
    if rate <= 0:
        raise ConfigError("RATE", "a plan needs the target arrival rate; allowed: RATE > 0 jobs/s")
    most = options.max_workers or EMBEDDED_MAX_WORKERS
    designs = [Design(_label(d, keys), d, b) for d, b in zip(designs_given, builders)]
    for design in designs:  # every design must be able to run: refuse before anything is created
        least_workers(design, rate, most)
    check_results_dir(first.results)
    overhead = first.connections_needed() - first.workers
    inputs = {"workload": workload, "overrides": {k: v for k, v in given.items() if k != "results"},
              "options": {"max_workers": options.max_workers, "repetitions": options.repetitions,
                          "confirm_s": options.confirm_s}}
    plans_dir = Path(first.results) / "plans"
    out_dir = None if args.fresh else _resumable(plans_dir, inputs)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = out_dir or plans_dir / f"{stamp}-rate{rate:g}-{len(designs)}design{'s' if len(designs) > 1 else ''}"
    done = read_result(out_dir / "plan.json")["runs"] if (out_dir / "plan.json").is_file() else {}

    from bench.load import swarm  # noqa: F401  - gevent monkey-patching, before a driver is imported
    from bench import runner
    from bench.engines import get_engine
    from bench.report.plan_page import render_plan
    from bench.report.run_page import render_report

    engine = get_engine(first.engine)
    with database(first.dsn, args.allow_remote, most + overhead, first.engine)[0] as db_dsn:
        if options.max_workers is None and first.dsn:
            conn = engine.connect(db_dsn, "queue-bench plan")
            try:
                most = max(1, min(most, engine.check_schema(conn, first.schema, 0)["available"] - overhead))
            finally:
                conn.close()
        state_schema = engine.state_schema_for(first.schema)

        def run_step(cfg: RunConfig) -> Path:
            run_dir = runner.run(_in(cfg, out_dir / "runs"), db_dsn, log=lambda line: None, state_schema=state_schema)
            render_report(run_dir)
            return run_dir

        print(f"capacity plan for {rate:g} jobs/s under SLO {first.slo}, {len(designs)} design"
              f"{'s' if len(designs) > 1 else ''}, up to {most} workers, {options.repetitions} repetition"
              f"{'s' if options.repetitions > 1 else ''} per step -> {out_dir}")
        planner = Planner(designs, rate, options, most, run_step, out_dir, inputs, done)
        try:
            state = planner.run()
        except KeyboardInterrupt as err:
            sys.stderr.write(f"qbench: plan interrupted; what was measured is in {out_dir / 'plan.json'} "
                             "(run the same command again to resume)\n")
            with contextlib.suppress(Exception):
                render_plan(out_dir)
            return exit_status(err)
        except Exception as err:  # SearchStopped is an Interrupted
            if hasattr(err, "run_dir"):
                sys.stderr.write(f"qbench: {err}; what was measured is in {out_dir / 'plan.json'} "
                                 "(run the same command again to resume)\n")
                with contextlib.suppress(Exception):
                    render_plan(out_dir)
                return exit_status(err)
            raise
        finally:
            get_engine(first.engine).drop_schema_at(db_dsn, state_schema)
    page = render_plan(out_dir)
    answer = state["answer"]
    print(answer["sentence"])
    if answer.get("harness_note"):
        print(f"note: {answer['harness_note']}")
    print(f"plan: {(out_dir / 'plan.json').resolve()}")
    print(f"report: {page.resolve()}")
    return answer["exit_status"]


def _in(cfg: RunConfig, results: Path) -> RunConfig:
    return dataclasses.replace(cfg, results=str(results))
