"""``qbench plan`` (``make plan``): check every input, run or resume the capacity plan, render ``plan.html``.
Exit: 0 met (confirmed, or no confirmation run asked for), 4 nothing meets the SLO or the confirmation failed,
5 a step could not be measured (the plan stopped there), 130 interrupted."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

from bench.analysis.plan_answer import answer_lines
from bench.cli.checks import check_results_dir
from bench.cli.database import check_room, database, step_runner
from bench.cli.run_options import add_run_options
from bench.config.choices import MAX_WORKERS
from bench.config.run_config import RunConfig, build_config, mask_dsn
from bench.engines import get_engine
from bench.plan.steps import design_id
from bench.errors import ConfigError, Interrupted, exit_status
from bench.plan.planner import Design, Planner, least_workers
from bench.plan.options import (EMBEDDED_MAX_WORKERS, LISTABLE, PLAN_OPTIONS, PLAN_RATE, SET_BY_PLAN, STEP_DURATION,
                                STEP_WARMUP, candidates, plan_options, varied)
from bench.results.model import newest_unfinished, read_result, utc_stamp
from bench.usage import setting


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``plan`` subcommand: its options, then every run parameter (a comma list where :data:`LISTABLE` allows)."""
    plan = sub.add_parser("plan", help="the capacity plan: the fewest workers that meet an SLO at a target RATE, "
                                       "the headroom above it, across candidate designs",
                          description="A comma list of " + ", ".join(k.upper() for k in LISTABLE) + " (e.g. --policy "
                                      "skip_locked,nowait) gives candidate designs, each planned; the plan sets "
                                      + ", ".join(k.upper() for k in SET_BY_PLAN) + " itself.")
    for p in PLAN_OPTIONS:
        plan.add_argument(p.option, dest=p.key, metavar=p.name, help=p.help_text())
    plan.add_argument("--fresh", action="store_true", help="start a new plan instead of resuming an unfinished one "
                                                           "(default: no, resume one with the same inputs)")
    add_run_options(plan, set_by_command=SET_BY_PLAN, required=("rate", "slo"),
                    defaults={"duration": f"{STEP_DURATION} a step", "warmup": f"{STEP_WARMUP} a step"},
                    helps={"rate": f"the target arrival rate the plan answers for, jobs/s: {PLAN_RATE.allowed_words()}",
                           "slo": "the objectives the answer must meet: key<=value,..., e.g. pickup_p99<=1s",
                           "results": "directory the plan's directory, plans/<stamp>-rate<RATE>-<n>design(s)/, is "
                                      "written in"})
    return plan


def _design_builder(workload: str, overrides: dict[str, Any], dsn: str | None) -> Callable[[int | None, float | None], RunConfig]:
    """``config(workers, rate)``: the design's validated step configuration (None: the given value)."""
    step = {"duration": overrides.get("duration") or STEP_DURATION, "warmup": overrides.get("warmup") or STEP_WARMUP}

    def config(workers: int | None, rate: float | None) -> RunConfig:
        chosen = {k: v for k, v in (("workers", workers), ("rate", rate)) if v is not None}
        cfg = build_config(workload, {**overrides, **step, **{k: str(v) for k, v in chosen.items()}}, dsn=dsn)
        return dataclasses.replace(cfg, backlog=0)  # open loop: no seeded backlog, a workload file's included
    return config


def _no_rate() -> ConfigError:
    """The refusal of a plan without a target arrival rate (what is allowed: :data:`PLAN_RATE`)."""
    return ConfigError("RATE", f"a plan needs the target arrival rate; allowed: {PLAN_RATE.allowed_words()} jobs/s, "
                               f"e.g. {setting('rate', 500)}")


def _first(builder) -> RunConfig:
    """The first design at its given values. Raises ConfigError (``RATE``) for an open-loop-only SLO key without RATE."""
    try:
        return builder(None, None)
    except ConfigError as err:
        if err.param == "SLO" and "needs arrivals" in str(err):
            raise _no_rate() from None
        raise


def _label(design: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k.upper()}={design[k]}" for k in keys) or "the design"


@dataclasses.dataclass
class _Checked:
    """A plan's inputs, every one checked before anything is created."""

    designs: list
    rate: float
    options: Any
    first: RunConfig
    most: int
    inputs: dict[str, Any]
    out_dir: Path
    done: dict[str, str]


def _check(args: argparse.Namespace, overrides: dict[str, Any], workload: str, dsn: str | None) -> _Checked:
    """Every input of ``qbench plan`` checked (ConfigError) and the plan directory chosen (an unfinished one with
    the same inputs unless ``--fresh``)."""
    options = plan_options({p.key: getattr(args, p.key) for p in PLAN_OPTIONS})
    given = {k: v for k, v in overrides.items() if v not in (None, "")}
    designs_given = candidates(given)
    keys = varied(designs_given)
    if given.get("rate") is not None:
        PLAN_RATE.parse(given["rate"])  # the plan's rule (> 0), named before the missing SLO
    builders = [_design_builder(workload, d, dsn) for d in designs_given]
    first = _first(builders[0])  # validates RATE, SLO (given or from the workload file) and every other value
    if not first.slo:
        raise ConfigError("SLO", f"a plan needs the objective it plans for; allowed: e.g. {setting('slo', 'pickup_p99<=1s')}")
    if first.rate <= 0:
        raise _no_rate()
    ids = [design_id(b(None, first.rate)) for b in builders]
    if len(set(ids)) < len(ids):
        raise ConfigError(keys[0].upper() if keys else "POLICY", "the lists give the same design twice (e.g. 1 and 01); "
                                                                 "allowed: distinct values")
    # The ceiling: PLAN_MAX_WORKERS, else with a DSN what the server's free connections allow (read later),
    # else the embedded server's default, which it is started with room for.
    most = options.max_workers or (MAX_WORKERS if first.dsn else EMBEDDED_MAX_WORKERS)
    designs = [Design(_label(d, keys), d, b) for d, b in zip(designs_given, builders)]
    for design in designs:  # every design must be able to run: refuse before anything is created
        least_workers(design, first.rate, most)
    check_results_dir(first.results)
    inputs = {"workload": workload, "database": mask_dsn(first.dsn) if first.dsn else "embedded",
              "overrides": {k: v for k, v in given.items() if k != "results"},
              "options": {"max_workers": options.max_workers, "repetitions": options.repetitions,
                          "confirm_s": options.confirm_s}}
    plans_dir = Path(first.results) / "plans"
    out_dir = None if args.fresh else newest_unfinished(plans_dir, "*/plan.json", lambda s: s.get("inputs") == inputs)
    out_dir = out_dir or plans_dir / f"{utc_stamp()}-rate{first.rate:g}-{len(designs)}design{'s' if len(designs) > 1 else ''}"
    done = read_result(out_dir / "plan.json")["runs"] if (out_dir / "plan.json").is_file() else {}
    return _Checked(designs, first.rate, options, first, most, inputs, out_dir, done)


def plan_command(args: argparse.Namespace, overrides: dict[str, Any], workload: str, dsn: str | None) -> int:
    """Run ``qbench plan``."""
    c = _check(args, overrides, workload, dsn)
    from bench.report.plan_page import render_plan  # here, after the checks: matplotlib (~1 s)

    overhead, most = c.first.connections_needed() - c.first.workers, c.most  # a connection per worker: no pooler
    context, embedded = database(c.first.dsn, args.allow_remote, most + overhead, c.first.engine, c.first)
    engine = get_engine(c.first.engine)  # after the database's refusals (POOLER), which need no driver
    with context as db_dsn:
        if c.first.dsn:
            free = check_room(engine, db_dsn, c.first.schema, 0, "queue-bench plan", c.first)["available"] - overhead
            if c.options.max_workers is not None and c.options.max_workers > free:
                raise ConfigError("PLAN_MAX_WORKERS", f"{c.options.max_workers} workers need more connections than the "
                                                      f"server has free ({free} beside the run's own {overhead}); "
                                                      f"allowed: at most {max(free, 1)}, or leave it out")
            most = max(1, min(most, free))
        state_schema = engine.state_schema_for(c.first.schema)
        n = len(c.designs)
        print(f"capacity plan for {c.rate:g} jobs/s under SLO {c.first.slo}, {n} design{'s' if n > 1 else ''}, up to "
              f"{most} workers, {c.options.repetitions} repetition{'s' if c.options.repetitions > 1 else ''} per step "
              f"-> {c.out_dir}")
        try:
            state = Planner(c.designs, c.rate, c.options, most_workers=most,
                            run=step_runner(c.out_dir, db_dsn, state_schema, embedded), out_dir=c.out_dir,
                            inputs=c.inputs, done=c.done).run()
        except (KeyboardInterrupt, Interrupted) as err:
            sys.stderr.write(f"qbench: {'plan interrupted' if isinstance(err, KeyboardInterrupt) else err}; what was "
                             f"measured is in {c.out_dir / 'plan.json'} (run the same command again to resume)\n")
            with contextlib.suppress(Exception):
                render_plan(c.out_dir)
            return exit_status(err)
        finally:
            engine.drop_schema_at(db_dsn, state_schema)
    page = render_plan(c.out_dir)
    print("\n".join(answer_lines(state["answer"])))
    print(f"plan: {(c.out_dir / 'plan.json').resolve()}")
    print(f"report: {page.resolve()}")
    return state["answer"]["exit_status"]

