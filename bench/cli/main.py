"""``qbench``: the command line; bad input is one line naming the parameter, exit 2."""

from __future__ import annotations

import argparse
import difflib
import contextlib
import importlib
import signal
import sys
from pathlib import Path

from bench import __version__
from bench.config.lookup import how_given
from bench.config.run_config import build_config, choose_engine
from bench.config.parameters import PARAMETERS
from bench.engines import capabilities, get_engine, relay_target, require_relay_resolution
from bench.gevent_patch import patch
from bench.results.model import RunResult, outcomes, read_result
from bench.errors import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, ConfigError, QBenchError,
                          exit_status, first_status)
from bench.cli.checks import check_loopback, check_results_dir, chosen_dsn
from bench.config.parsers import parse_number
from bench.cli.database import check_room, database as _database, finish_first as _finish_first, pooled, render_run
from bench.cli.compare import add_parser as _add_compare
from bench.cli.run_options import ALLOW_REMOTE_HELP, add_database_options, add_run_options, switch_message
from bench.cli.web_ui_options import add_web_ui_options, web_ui_options
from bench.cli.distributed import master_command, worker_command
from bench.cli import experiments as experiments_cli
from bench.cli.capacity import capacity_command
from bench.cli.clean import clean_command
from bench.cli.plan import add_parser as add_plan_parser, plan_command
from bench.sweep.driver import Sweep, run_sweep, server_key
from bench.usage import named, option, setting

#: Run parameters the capacity search sets itself, with why (given, they are refused).
CAPACITY_SETS = {
    "rate": "the capacity search sets the arrival rate itself; allowed: leave {rate} unset (use {rate_start})",
    "backlog": "the capacity search's steps are open-loop, with no seeded backlog; allowed: leave {backlog} unset",
    "bursts": "the capacity search offers one constant rate per step; allowed: leave {bursts} unset",
}
#: The commands that run load: main() applies gevent's monkey-patching before calling them
#: (:mod:`bench.gevent_patch`), before any of them imports a database driver.
LOAD_COMMANDS = frozenset({"run", "sweep", "master", "worker", "capacity", "plan", "calibrate", "experiments"})


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error, exit status 2, and no abbreviated options."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - extras refused in error()'s one line
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            message = switch_message(f"unrecognized arguments: {' '.join(extras)}", argv, extras)
            if message.startswith("unrecognized"):
                message += self._allowed_options(getattr(parsed, "command", None), extras)
            self.error(message)
        return parsed

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        """The subcommands' parsers by name ({} for a parser without subcommands)."""
        actions = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(actions[0].choices) if actions else {}

    def _allowed_options(self, command: str | None, extras: list[str]) -> str:
        """'; allowed: ...' for the first unknown option: the nearest known one, and where all are listed."""
        parser = self._commands().get(command, self)
        prog = parser.prog
        unknown = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
        if unknown is None:
            return f"; allowed: the options and arguments {prog} --help lists"
        known = [o for a in parser._actions for o in a.option_strings]
        close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.8)
        return f"{f' (did you mean {close[0]}?)' if close else ''}; allowed: the options {prog} --help lists"

    @contextlib.contextmanager
    def _required_shown(self):
        """While the help is written: the options marked ``shown_required`` (required, though a workload file
        may hold them, so argparse does not insist) shown as required, without brackets in the usage line."""
        marked = [a for a in self._actions if getattr(a, "shown_required", False) and not a.required]
        for action in marked:
            action.required = True
        try:
            yield
        finally:
            for action in marked:
                action.required = False

    def format_usage(self) -> str:  # noqa: D102
        with self._required_shown():
            return super().format_usage()

    def format_help(self) -> str:  # noqa: D102
        with self._required_shown():
            return super().format_help()

    def error(self, message: str) -> None:  # noqa: D102
        message = switch_message(message, [], [])
        if message.startswith("the following arguments are required: command"):
            message = f"a command is required; allowed: {', '.join(self._commands())} ({self.prog} --help)"
        if "expected one argument" in message:
            message += " (a value starting with '-' must be written as --option=VALUE)"
        sys.stderr.write(f"{self.prog}: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def _workload(args: argparse.Namespace) -> str:
    """``--workload``: absent means ``default``; an explicitly empty value is refused (ConfigError)."""
    if args.workload is not None and not args.workload.strip():
        raise ConfigError("WORKLOAD", f"empty; allowed: {how_given('WORKLOAD')} "
                                      + named("(leave {workload} out for default)"))
    return args.workload or "default"


def check_relay(cfg, master: bool) -> None:
    """Refuse (ConfigError, ``NET_DELAY_MS``) a delay relay the run's workers could not reach (``qbench master``'s
    are on other hosts, the relay listens on 127.0.0.1), or in front of a DSN it cannot forward (parsed only)."""
    if not cfg.relayed():
        return
    if master:
        given = ("partition window" if cfg.relay_parameter() == "FAULTS"
                 else f"{option('net_delay_ms')} or {option('net_jitter_ms')}")
        raise ConfigError(cfg.relay_parameter(), f"starts a delay relay on 127.0.0.1 of this host, which the workers "
                                                 f"of qbench master (on other hosts) cannot reach; allowed: no "
                                                 f"{given} with qbench master (their network is a real one)")
    if cfg.dsn:
        relay_target(cfg.engine, cfg.dsn, cfg.relay_parameter())


def _run(args: argparse.Namespace, external_workers: tuple[str, int, float] | None = None) -> int:
    overrides = _overrides(args)
    cfg = build_config(_workload(args), overrides, dsn=chosen_dsn(args.dsn))  # validates before any heavy import
    check_results_dir(cfg.results)
    if cfg.library_mode == "worker" and (external_workers or getattr(args, "ui", False)):
        what = "qbench master" if external_workers else "the web UI"
        raise ConfigError("LIBRARY_MODE", f"worker runs the library's own worker processes, which {what} cannot "
                                          f"drive; allowed: {setting('library_mode', 'sql')} with {what}, or run without {what}")
    check_relay(cfg, external_workers is not None)

    from bench import runner  # here, not at the top: Locust takes ~1 s, which --help and refusals do not pay
    from bench.report.run_page import render_report  # here: matplotlib (~1 s), likewise

    web_ui = web_ui_options(args, cfg)
    extra = web_ui[2] - cfg.workers if web_ui else 0  # the workers the web UI may add need connections too
    database, embedded = _database(cfg.dsn, args.allow_remote, cfg.connections_needed(extra), cfg.engine, cfg,
                                   pooler=True)
    with database as dsn, pooled(cfg, dsn, cfg.pooled_connections(extra)) as (run_cfg, run_dsn, pooler, relay):
        run_dir = runner.run(run_cfg, run_dsn, embedded=embedded, external_workers=external_workers, web_ui=web_ui,
                             pooler=pooler, relay=relay)
    with _finish_first("writing the report first"):  # the report is one of the run's files
        report = render_report(run_dir)
    result = RunResult.load(run_dir)
    print(f"report: {report.resolve()}")
    found = outcomes(result.summary, strict=getattr(args, "strict", False))
    for status, sentence in found:
        if status != EXIT_INTERRUPTED:  # the run's own last lines said it stopped
            sys.stderr.write(f"qbench: {sentence} (exit {status})\n")
    return first_status(status for status, _ in found)


def _rerender(path: str, param: str, allowed: str, render, error: type[Exception]) -> int:
    """Re-render a report from result files: ``report: <path>``. Raises ConfigError naming ``param``."""
    if not path.strip():
        raise ConfigError(param, f"empty; allowed: {allowed}")
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(param, f"{directory} is not a directory; allowed: {allowed}")
    try:
        report = render(directory)
    except error as err:
        raise ConfigError(param, str(err).removeprefix(f"{param}: ")) from None
    print(f"report: {report.resolve()}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from bench.report.run_page import ReportError, render_report  # here: matplotlib (~1 s)

    return _rerender(args.run_dir, "RUN_DIR", "a results/<run_id> directory", render_report, ReportError)


#: The calibration of each tool an engine's capabilities name (``calibrator``): (module, function), imported
#: when used (it imports the run, and the run Locust: ~1 s).
_CALIBRATORS = {"pgbench": ("bench.cli.calibrate", "calibrate"),
                "mariadb-slap": ("bench.cli.calibrate_mariadb", "calibrate_mariadb")}


def _calibrate(args: argparse.Namespace) -> int:
    dsn = chosen_dsn(args.dsn)
    engine = choose_engine(args.engine, dsn)
    check_loopback(dsn, args.allow_remote)
    check_results_dir(args.results)
    module, function = _CALIBRATORS[capabilities(engine).calibrator]
    calibrate = getattr(importlib.import_module(module), function)
    return calibrate(workers=args.workers, duration=args.duration, warmup=args.warmup, pairs=args.pairs,
                     dsn=dsn, schema=args.schema, results=args.results, batch=args.batch, processes=args.processes)


def _sweep_report(args: argparse.Namespace) -> int:
    """``qbench sweep-report SWEEP_DIR``: re-render compare.html from the sweep's files."""
    from bench.report.sweep_page import render_sweep_report  # here: matplotlib and pandas (~1 s)
    from bench.results.sweep import CompareError  # here: pandas

    return _rerender(args.sweep_dir, "SWEEP_DIR", "a results/sweeps/<sweep_id> directory",
                     render_sweep_report, CompareError)


def _overrides(args: argparse.Namespace) -> dict:
    """The run parameters given as options. Raises ConfigError naming a parameter given an empty value."""
    given = {p.key: getattr(args, p.key, None) for p in PARAMETERS}
    for p in PARAMETERS:
        value = given.get(p.key)
        if value is not None and not str(value).strip():
            raise ConfigError(p.name, f"empty; allowed: {p.allowed_text().replace('`', '') or p.help} "
                                      f"(leave {p.option} out for the default, {p.default_shown().replace('`', '')})")
    return given


def _sweep(args: argparse.Namespace) -> int:
    sweep = Sweep.load(args.sweep, _overrides(args), repetitions=args.repetitions, dsn=chosen_dsn(args.dsn))  # validates every cell
    require_relay_resolution([cell for _cid, _params, cell in sweep.cells])  # every cell's relay, before anything
    results = Path(sweep.base.results)
    check_results_dir(str(results))

    servers = {}  # server_key -> a cell run on it (its DSN given, or from the environment), in cell order
    for _cid, _params, cell in sweep.cells:
        servers.setdefault(server_key(cell), cell)
    with contextlib.ExitStack() as stack:  # the sweep's Interrupted reaches main(): its line says how to resume
        dsns, embedded = {}, set()
        for key, cell in servers.items():
            database, started = _database(cell.dsn, args.allow_remote, sweep.max_connections(), cell.engine, cell,
                                          pooler=True)  # each run through its own embedded pooler (POOLER)
            dsns[key] = stack.enter_context(database)
            embedded.update([key] if started else [])
            # every cell must be able to run: refuse before anything is created
            check_room(get_engine(cell.engine), dsns[key], sweep.base.schema, sweep.largest_budget(),
                       "queue-bench sweep", cell)
        sweep_dir = run_sweep(sweep, dsns, results, fresh=args.fresh, on_run=render_run, embedded=embedded)
    from bench.report.sweep_page import render_sweep_report  # here: matplotlib (~1 s)

    print(f"report: {render_sweep_report(sweep_dir).resolve()}")
    if not read_result(sweep_dir / "sweep.json")["complete"]:
        sys.stderr.write("qbench: some runs of the sweep failed (status in cells.csv); run it again to retry them\n")
        return EXIT_FAILED
    return 0


def _capacity(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    for key, why in CAPACITY_SETS.items():
        if overrides.get(key) not in (None, ""):
            raise ConfigError(key.upper(), named(why))
    start_rate = parse_number("RATE_START", args.rate_start, minimum=0, strict=True)
    # The first step's rate stands in for RATE, so rules that need arrivals (a pickup SLO) hold.
    cfg = build_config(_workload(args), {**overrides, "rate": repr(start_rate)}, dsn=chosen_dsn(args.dsn))
    return capacity_command(args, cfg)


def _plan(args: argparse.Namespace) -> int:
    return plan_command(args, _overrides(args), _workload(args), chosen_dsn(args.dsn))


def _add_run_commands(sub) -> None:
    """``run``, ``sweep``, ``capacity``, ``master`` and ``plan``: the run parameters and each command's options."""
    run = sub.add_parser("run", help="run one benchmark and render its report")
    groups = add_run_options(run)
    groups["output"].add_argument("--strict", action="store_true", help="exit 5 when the run is suspect (its figures "
                                                                        "cannot be trusted), as a CI script wants "
                                                                        "(default: no)")
    add_web_ui_options(run)
    run.set_defaults(func=_run)

    swp = sub.add_parser("sweep", help="run (or resume) a sweep: a matrix of runs with repetitions")
    swp.add_argument("sweep", metavar="SWEEP", help=how_given("SWEEP"))
    swp.add_argument("--repetitions", help="runs per cell, 1-100 (default: the sweep file's repetitions, else 1)")
    swp.add_argument("--fresh", action="store_true", help="start a new sweep directory instead of resuming "
                                                          "(default: no, resume the newest unfinished one)")
    add_run_options(swp, workload=False,  # a sweep file names its workload
                    helps={"results": "directory the sweep's directory, sweeps/<name>-<stamp>/ (its runs in runs/), "
                                      "is written in"})
    swp.set_defaults(func=_sweep)

    mst = sub.add_parser("master", help="run one benchmark whose load comes from qbench worker processes "
                                        "started elsewhere (Locust's distributed mode)")
    mst.add_argument("--expect-workers", required=True, help="how many qbench worker processes to wait for, 1-64 "
                                                             "(default: none, required)")
    mst.add_argument("--master-bind-host", default="0.0.0.0", help="interface to listen on (default: all, 0.0.0.0)")
    mst.add_argument("--master-port", default="5557", help="port to listen on (default: 5557, Locust's)")
    mst.add_argument("--worker-wait-s", default="300", help="how long to wait for the workers before giving up "
                                                            "(exit 1, no load) (default: 300)")
    add_run_options(mst)
    add_web_ui_options(mst)
    mst.set_defaults(func=lambda a: master_command(a, _run))

    wrk = sub.add_parser("worker", help="one load generator process for a qbench master on another host")
    wrk.add_argument("--master-host", required=True, help="the host qbench master runs on (default: none, required)")
    wrk.add_argument("--master-port", default="5557", help="its port (default: 5557)")
    wrk.add_argument("--dsn", help="the database as this host reaches it, postgresql://… or mysql://… "
                                   "(default: $DATABASE_URL; one is required)")
    wrk.add_argument("--allow-remote", action="store_true", help=ALLOW_REMOTE_HELP)
    wrk.set_defaults(func=worker_command)

    cap = sub.add_parser("capacity", help="search the highest arrival rate a design sustains",
                         description="Open-loop steps at rising rates, from RATE_START; the search sets RATE, "
                                     "BACKLOG and BURSTS itself.")
    groups = add_run_options(cap, set_by_command=CAPACITY_SETS,
                             helps={"results": "directory the search's directory, capacity/<stamp>-<design>/, is "
                                               "written in"})
    groups["load"].add_argument("--rate-start", default="100", help="first step's arrival rate, jobs/s, doubled per "
                                                                    "step (default: 100)")
    cap.set_defaults(func=_capacity)
    add_plan_parser(sub).set_defaults(func=_plan)


def _add_calibrate(sub) -> None:
    """The ``calibrate`` subcommand: pgbench (mariadb-slap) against the swarm on the same SQL."""
    cal = sub.add_parser("calibrate", help="pgbench (or mariadb-slap) vs queue-bench on the same claim SQL")
    cal.add_argument("--engine", help="postgres (pgbench) or mariadb (mariadb-slap) (default: the DSN's, else "
                                      "postgres)")
    cal.add_argument("--workers", default="50", help="pgbench / mariadb-slap clients = queue-bench workers; a comma "
                                                      "list (50,200): each, against pgbench (default: 50)")
    cal.add_argument("--batch", default="1", help="jobs per claim (and per pgbench transaction); a comma list "
                                                  "(default: 1)")
    cal.add_argument("--processes", help="load generator process counts to compare with pgbench, e.g. 1,2,4 "
                                         "(each round: pgbench, then queue-bench with each) (default: 1)")
    cal.add_argument("--duration", default="20s", help="measured window of each side (default: 20s)")
    cal.add_argument("--warmup", default="5s", help="warm-up dropped from each side (default: 5s)")
    cal.add_argument("--pairs", default="3", help="pgbench (mariadb-slap) / queue-bench pairs, A B A B ... "
                                                  "(default: 3)")
    cal.add_argument("--results", default="results", help="calibration-<stamp>/ is written here (default: results)")
    cal.add_argument("--schema", default="qbench", help="the tool's own schema (default: qbench)")
    add_database_options(cal)
    cal.set_defaults(func=_calibrate)


def build_parser() -> argparse.ArgumentParser:
    """The ``qbench`` argument parser (``--version`` and the subcommands)."""
    parser = _Parser(prog="qbench", description="Benchmark a database-table job queue.")
    parser.add_argument("--version", action="version", version=f"qbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run_commands(sub)

    rep = sub.add_parser("report", help="re-render report.html from a run directory's files")
    rep.add_argument("run_dir", metavar="RUN_DIR")
    rep.set_defaults(func=_report)
    _add_compare(sub)
    swr = sub.add_parser("sweep-report", help="re-render compare.html from a sweep directory's files")
    swr.add_argument("sweep_dir", metavar="SWEEP_DIR")
    swr.set_defaults(func=_sweep_report)

    cln = sub.add_parser("clean", help="drop the schemas queue-bench created in a database (and only those)")
    cln.add_argument("--dsn", help="the database: postgresql://… or mysql://… / mariadb://… (default: $DATABASE_URL; "
                                   "one is required, the embedded server keeps nothing)")
    cln.add_argument("--allow-remote", action="store_true", help="confirm a DSN that is not loopback (default: refused)")
    cln.add_argument("--dry-run", action="store_true", help="list what would be dropped, drop nothing (default: no)")
    cln.set_defaults(func=clean_command)
    _add_calibrate(sub)
    experiments_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``qbench`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command in LOAD_COMMANDS:
        patch()  # once, here: after parsing (so --help stays fast), before a command imports a driver
    # SIGTERM before the load behaves like Ctrl-C (the run installs its own handlers for the load).
    # SIGINT too, even when the shell started us with it ignored (a background job of a script):
    # the load honours it, so seeding must as well.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except QBenchError as err:  # bad input, an interruption, a run that could not be measured
        sys.stderr.write(f"qbench: {err}\n")
        return exit_status(err)
    except KeyboardInterrupt as err:
        sys.stderr.write("qbench: interrupted outside a run's load (preparing the database, or between runs); "
                         "the run in preparation wrote no directory\n")
        return exit_status(err)


if __name__ == "__main__":
    sys.exit(main())
