"""The run parameters as options of ``qbench run``, ``sweep``, ``capacity``, ``plan`` and ``master``: one per row
of the parameter table, in its group, each option's default None (its default is in the help text)."""

from __future__ import annotations

import argparse
import re

from bench.config.lookup import how_given
from bench.config.parameter import GROUPS
from bench.config.parameters import PARAMETERS
from bench.usage import typed

#: ``--dsn`` of every command that connects: both engines, and what no DSN means.
DSN_SCHEMES = ("the database: postgresql://… (or libpq key=value), or mysql://… / mariadb://… for MariaDB; the "
               "engine follows the scheme")
DSN_HELP = f"{DSN_SCHEMES} (default: $DATABASE_URL, else an embedded throwaway PostgreSQL, or MariaDB with --engine mariadb)"
ALLOW_REMOTE_HELP = "confirm a DSN that is not loopback: the tool writes heavy load (default: no, refused)"
WORKLOAD_HELP = f"{how_given('WORKLOAD')}; its values replace the defaults below (default: default)"
#: What replaces the defaults shown: a ``--workload`` file's values (run, capacity, plan, master).
WORKLOAD_DEFAULTS = "Each default shown is the parameter table's; a --workload file's values replace it."
#: ... and in a sweep, the sweep file's: it names its workload, and varies what its matrix lists.
SWEEP_DEFAULTS = ("Each default shown is the parameter table's; the sweep file's [fixed] values, then those of "
                  "the workload file it names, replace it. A parameter the sweep varies (its [matrix] or cells) "
                  "is refused.")
MAKE_NOTE = ("Every option is also a Make variable: --work-ms is WORK_MS=…, a switch pair --x / --no-x is X=1 / X=0 "
             "(make help).")


def add_groups(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The option groups of :data:`GROUPS`, in order, added to ``parser``; keyed by group name."""
    return {name: parser.add_argument_group(title) for name, title in GROUPS.items()}


def add_run_options(parser: argparse.ArgumentParser, workload: bool = True, *, set_by_command=(),
                    defaults: dict[str, str] | None = None, required=(),
                    helps: dict[str, str] | None = None) -> dict[str, argparse._ArgumentGroup]:
    """Add the run parameters, ``--dsn``, ``--allow-remote`` (and ``--workload``; without it, a sweep's) to
    ``parser``; returns groups. For a command other than ``run``: ``set_by_command``, the keys it sets itself
    (parsed, so its own check refuses them in one line, but not shown in ``--help``); ``defaults``, the keys whose
    default is its own (key -> the default as shown); ``required``, the keys it cannot do without (shown as
    required); ``helps``, the keys whose meaning is its own (key -> the help text instead of the table's)."""
    parser.epilog = f"{WORKLOAD_DEFAULTS if workload else SWEEP_DEFAULTS} {MAKE_NOTE}"
    groups = add_groups(parser)
    if workload:
        groups["load"].add_argument("--workload", help=WORKLOAD_HELP)
    for p in PARAMETERS:
        shown = _help(p, set_by_command, defaults or {}, required, helps or {})
        if p.kind == "flag":
            groups[p.group].add_argument(p.option, dest=p.key, action=argparse.BooleanOptionalAction, default=None,
                                         help=shown)
        else:
            action = groups[p.group].add_argument(p.option, dest=p.key, metavar=p.name, help=shown)
            # required, though argparse may not insist (a workload file may hold it): no brackets in the usage line
            action.shown_required = p.key in required
    add_database_options(groups["database"])
    return groups


def _help(p, set_by_command, defaults: dict[str, str], required, helps: dict[str, str]) -> str:
    """Parameter ``p``'s ``--help`` text in one command (see :func:`add_run_options`)."""
    if p.key in set_by_command:
        return argparse.SUPPRESS
    meaning = helps.get(p.key, p.help)
    if p.key in required:
        return f"{meaning} (required)".replace("%", "%%")
    default = defaults[p.key] if p.key in defaults else p.default_shown().replace("`", "")
    return f"{meaning} (default: {default})".replace("%", "%%")  # p.help_text() when neither is the command's


def add_database_options(group, dsn_help: str = DSN_HELP) -> None:
    """``--dsn`` and ``--allow-remote``, in ``group`` (a parser or an argument group)."""
    group.add_argument("--dsn", help=dsn_help)
    group.add_argument("--allow-remote", action="store_true", help=ALLOW_REMOTE_HELP)


_IGNORED_VALUE = re.compile(r"argument (--[a-z0-9-]+)/--no-[a-z0-9-]+: ignored explicit argument (.*)")


def switch_message(message: str, argv: list[str], extras: list[str]) -> str:
    """argparse's ``message`` about a yes/no switch given a value (``--prepared=0``; ``extras`` holds what
    ``argv`` left unrecognised) as one line naming the parameter; any other message as it is."""
    option, value = None, None
    found = _IGNORED_VALUE.match(message)
    if found:
        option, value = found.group(1), found.group(2)
    elif extras and extras[0] in argv and argv.index(extras[0]) > 0:
        before = argv[argv.index(extras[0]) - 1]
        if any(before in (p.option, f"--no-{p.option[2:]}") for p in PARAMETERS if p.kind == "flag"):
            option, value = "--" + before.removeprefix("--").removeprefix("no-"), repr(extras[0])
    if option is None:
        return message
    name = option[2:].replace("-", "_")
    return (f"{typed(name.upper())}: takes no value ({value}); allowed: {option} or --no-{option[2:]} "
            f"(Make: {name.upper()}=1 or {name.upper()}=0; files: true or false)")
