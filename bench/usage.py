"""How a hint or a refusal names a setting to the user who will type it: ``--processes 2`` to a ``qbench`` user,
``PROCESSES=2`` to a ``make`` user (the Makefile exports :data:`VIA_MAKE_ENV`). Imports nothing from queue-bench
(every layer may import it; ``bench.errors`` names a refused parameter with :func:`typed`)."""

from __future__ import annotations

import os
import shlex

#: Set to 1 by the Makefile for every command it runs.
VIA_MAKE_ENV = "QBENCH_VIA_MAKE"


def via_make() -> bool:
    """True when this process was started by a ``make`` target (:data:`VIA_MAKE_ENV`)."""
    return os.environ.get(VIA_MAKE_ENV) == "1"


def option(name: str) -> str:
    """Parameter ``name`` (``plan_max_workers``) as the user types it: ``--plan-max-workers`` or
    ``PLAN_MAX_WORKERS``."""
    return name.upper() if via_make() else f"--{name.replace('_', '-')}"


#: Parameters a refusal names as written in both syntaxes: not an option of any command but a positional
#: argument (``qbench sweep SWEEP``, ``qbench report RUN_DIR``), a part of a file (``TARGET``, a sweep file's
#: ``[target]``; ``EXPERIMENT``, a catalogue file), an environment variable or a program on PATH.
AS_WRITTEN = frozenset({"SWEEP", "RUN_DIR", "SWEEP_DIR", "RUN_OR_SWEEP_A", "RUN_OR_SWEEP_B", "EXPERIMENTS",
                        "EXPERIMENT", "TARGET", "DSN_POSTGRES", "DSN_MARIADB", "DATABASE_URL", "PGBENCH",
                        "MARIADB_SLAP"})


def typed(param: str) -> str:
    """Refused parameter ``param`` (upper case, ``RATE_START``) as the user typed it: ``--rate-start`` to a
    ``qbench`` user, ``RATE_START`` to a ``make`` user; one of :data:`AS_WRITTEN`, or one already written as an
    option (``--queues``), unchanged."""
    if param in AS_WRITTEN or param.startswith("-"):
        return param
    return option(param.lower())


class _Options(dict):
    def __missing__(self, key: str) -> str:
        return option(key)


def named(text: str) -> str:
    """``text`` with each ``{name}`` written as :func:`option` writes it: ``leave {workers} out`` is ``leave
    --workers out`` or ``leave WORKERS out``."""
    return text.format_map(_Options())


def setting(name: str, value: str | int | float, quote: bool = True) -> str:
    """Setting ``name`` (the parameter as the tables name it: ``processes``, ``slo``) to ``value`` as the user
    types it: ``--processes 2`` (quoted as a shell needs it, unless ``quote`` is False: an example such as
    ``1,…``) or ``PROCESSES=2``."""
    text = shlex.quote(str(value)) if quote else str(value)
    return f"{name.upper()}={text}" if via_make() else f"--{name.replace('_', '-')} {text}"


def switch(name: str, on: bool = True) -> str:
    """Yes/no parameter ``name`` (``allow_remote``, ``prepared``) set on or off as the user types it:
    ``--allow-remote`` / ``--no-prepared``, or ``ALLOW_REMOTE=1`` / ``PREPARED=0``."""
    if via_make():
        return f"{name.upper()}={int(on)}"
    return f"--{'' if on else 'no-'}{name.replace('_', '-')}"
