"""queue-bench's error hierarchy and the exit status of each, decided here and nowhere else (the table:
docs/running.md). Imports only :mod:`bench.usage` (how a refusal names its parameter)."""

from __future__ import annotations

from bench.usage import typed

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: The audit found a lost, doubled or over-claimed job (or another invariant broken).
EXIT_INVARIANTS = 3
#: An SLO was missed or could not be shown to hold, a plan found nothing that meets it, or a gate
#: found a regression.
EXIT_SLO = 4
#: The run was suspect (its figures cannot be trusted), and ``--strict`` was given; or a plan stopped at a step
#: that could not be measured (it failed only by the harness or a busy machine, measured twice).
EXIT_SUSPECT = 5
#: Interrupted (SIGINT/SIGTERM): the shell convention 128 + SIGINT.
EXIT_INTERRUPTED = 130


#: When several statuses apply, the first of these wins: interrupted, failed, bad input,
#: invariants, SLO, suspect.
PRECEDENCE = (EXIT_INTERRUPTED, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INVARIANTS, EXIT_SLO, EXIT_SUSPECT)


#: Every exit status and what it means, in :data:`PRECEDENCE` order after success; docs/running.md's
#: "Exit statuses" table is :func:`exit_status_table` (a test checks it).
EXIT_MEANINGS = (
    (EXIT_OK, "success: the run (plan, gate) finished, its invariants hold and its SLO, if any, passed"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGTERM): the files written say `complete: false`"),
    (EXIT_FAILED, "failed: the run could not be measured as asked (the database went away, a sweep cell "
                  "failed, a driver that would block)"),
    (EXIT_BAD_INPUT, "bad input: one line names the parameter and what is allowed (or the worker whose session the "
                     "database refused, and why); nothing was created"),
    (EXIT_INVARIANTS, "broken invariants: the audit found a lost, doubled or over-claimed job"),
    (EXIT_SLO, "an SLO missed or not shown to hold (`inconclusive`), a plan with no configuration that "
               "meets it, or a regression beyond `--max-regression`"),
    (EXIT_SUSPECT, "a suspect run (its figures cannot be trusted), under `--strict` (`STRICT=1`); a plan that stopped "
                   "at a step it could not measure (the load generator or a busy machine set its pace, twice)"),
)


def exit_status_table() -> str:
    """:data:`EXIT_MEANINGS` as a Markdown table (docs/running.md's)."""
    return "| status | meaning |\n| --- | --- |\n" + "".join(f"| {s} | {m} |\n" for s, m in EXIT_MEANINGS)


def first_status(statuses) -> int:
    """The exit status for ``statuses`` (ints of :data:`PRECEDENCE`): the first in that order, or
    :data:`EXIT_OK`. Raises ValueError for a status not in :data:`PRECEDENCE`."""
    given = set(statuses) - {EXIT_OK}
    unknown = given - set(PRECEDENCE)
    if unknown:
        raise ValueError(f"not an exit status of queue-bench: {sorted(unknown)}")
    return next((s for s in PRECEDENCE if s in given), EXIT_OK)


class QBenchError(Exception):
    """An error the user is told about in one line; subclasses set :attr:`exit_status`."""

    exit_status = EXIT_FAILED


class BadInput(QBenchError, ValueError):
    """A parameter, file or argument that is not allowed. Raised before anything is created."""

    exit_status = EXIT_BAD_INPUT


class ConfigError(BadInput):
    """A parameter has a value that is not allowed: ``<param as typed>: <value> <problem>; allowed: <what is
    allowed>``. ``param`` is its upper-case name (``WORKERS``), written as the user typed it
    (:func:`bench.usage.typed`: ``--workers`` or ``WORKERS``) here and nowhere else; ``problem`` the message
    after the name."""

    def __init__(self, param: str, message: str):
        self.param, self.problem = param, message
        super().__init__(f"{typed(param)}: {message}")


class ConnectRefused(ConfigError):
    """A DSN that cannot connect (:class:`ConfigError` naming ``param``), with what the driver's adapter knows:
    ``kind`` (the error counter key), ``detail`` (the database's first line), ``permanent`` (waiting will not
    mend it) and ``cause`` (what it most likely means, when permanent)."""

    def __init__(self, param: str, message: str, *, kind: str, detail: str, permanent: bool, cause: str):
        super().__init__(param, message)
        self.kind, self.detail, self.permanent, self.cause = kind, detail, permanent, cause


class SessionRefused(BadInput):
    """A worker's first session was refused for a reason waiting will not mend (wrong database, schema or table
    missing, authentication, bad settings, a statement name already taken): the run stops before its clock
    starts. ``worker``, ``kind`` (the error counter key) and ``cause`` (what it most likely means)."""

    def __init__(self, worker: str, kind: str, message: str, cause: str):
        self.worker, self.kind, self.cause = worker, kind, cause
        super().__init__(f"{worker}: its session was refused ({kind}: {message}); {cause}; nothing was measured")


class Interrupted(QBenchError):
    """The user stopped the command (Ctrl-C or SIGTERM) outside a run's load."""

    exit_status = EXIT_INTERRUPTED


class RunFailed(QBenchError):
    """The command could not measure what was asked (a blocking driver, an embedded server that does not start,
    the database gone)."""

    exit_status = EXIT_FAILED


def exit_status(err: BaseException) -> int:
    """The exit status for ``err`` (:attr:`QBenchError.exit_status`; ``KeyboardInterrupt``:
    :data:`EXIT_INTERRUPTED`). Raises TypeError for any other exception."""
    if isinstance(err, QBenchError):
        return err.exit_status
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    raise TypeError(f"{type(err).__name__} is not a queue-bench error")
