"""queue-bench's error hierarchy and the exit status of each kind, decided here and nowhere else.

Every error meant for the user derives from :class:`QBenchError`; ``str(err)`` is the one line
the command prints (after ``qbench: ``), and :func:`exit_status` maps the error to the process's
exit status. The command line (:mod:`bench.cli.main`) catches :class:`QBenchError` once and asks
this module for the status; any other exception is a bug and keeps its traceback.

=====================  ======  ==============================================================
class                  status  meaning
=====================  ======  ==============================================================
:class:`BadInput`      2       a parameter, file or argument is not allowed; nothing was created
:class:`Interrupted`   130     Ctrl-C / SIGTERM (the shell convention 128 + SIGINT)
:class:`RunFailed`     1       the run could not be measured as asked (database lost, a cell
                               failed, the environment cannot run the load faithfully)
=====================  ======  ==============================================================

A finished run's outcomes are not errors: broken invariants (3), an SLO missed (4), a suspect run
under ``--strict`` (5); :data:`EXIT_MEANINGS` lists every status. A command may have several
outcomes at once; :func:`first_status` picks the one it exits with, in :data:`PRECEDENCE` order.

This module imports nothing from queue-bench, so every layer may import it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: The audit found a lost, doubled or over-claimed job (or another invariant broken).
EXIT_INVARIANTS = 3
#: An SLO was missed or could not be shown to hold, a plan found nothing that meets it, or a gate
#: found a regression.
EXIT_SLO = 4
#: The run was suspect (its figures cannot be trusted), and ``--strict`` was given.
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
    (EXIT_BAD_INPUT, "bad input: one line names the parameter and what is allowed; nothing was created"),
    (EXIT_INVARIANTS, "broken invariants: the audit found a lost, doubled or over-claimed job"),
    (EXIT_SLO, "an SLO missed or not shown to hold (`inconclusive`), a plan with no configuration that "
               "meets it, or a regression beyond `--max-regression`"),
    (EXIT_SUSPECT, "a suspect run (its figures cannot be trusted), under `--strict` (`STRICT=1`)"),
)


def exit_status_table() -> str:
    """:data:`EXIT_MEANINGS` as a Markdown table (docs/running.md's)."""
    return "| status | meaning |\n| --- | --- |\n" + "".join(f"| {s} | {m} |\n" for s, m in EXIT_MEANINGS)


def first_status(statuses) -> int:
    """The exit status of a command whose outcomes gave ``statuses`` (an iterable of ints from
    :data:`PRECEDENCE`): the first of them in that order, or :data:`EXIT_OK` when there is none.
    Raises ValueError for a status that is not in :data:`PRECEDENCE`."""
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
    """A parameter has a value that is not allowed.

    ``param`` is the parameter's name as the user typed it (upper case, the Make
    variable); ``str(err)`` is one line naming the parameter and what is allowed.
    """

    def __init__(self, param: str, message: str):
        self.param = param
        super().__init__(f"{param}: {message}")


class Interrupted(QBenchError):
    """The user stopped the command (Ctrl-C or SIGTERM) outside a run's load."""

    exit_status = EXIT_INTERRUPTED


class RunFailed(QBenchError):
    """The command could not measure what was asked: the environment cannot run the load
    faithfully (a driver that blocks the event loop, an embedded server that does not start),
    or the database went away."""

    exit_status = EXIT_FAILED


def exit_status(err: BaseException) -> int:
    """The process exit status for ``err``: its :attr:`QBenchError.exit_status`; a
    ``KeyboardInterrupt`` is :data:`EXIT_INTERRUPTED`. Raises TypeError for any other exception
    (a bug: it should keep its traceback, not be mapped to a status)."""
    if isinstance(err, QBenchError):
        return err.exit_status
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    raise TypeError(f"{type(err).__name__} is not a queue-bench error")
