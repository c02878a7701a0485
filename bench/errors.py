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

This module imports nothing from queue-bench, so every layer may import it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: Interrupted (SIGINT/SIGTERM): the shell convention 128 + SIGINT.
EXIT_INTERRUPTED = 130


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
