"""The plan's own options (``PLAN_MAX_WORKERS``, ``REPETITIONS``, ``CONFIRM_S``) and its candidate designs
from comma lists (``POLICY=skip_locked,nowait BATCH=1,10``); bad input raises ConfigError."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Mapping

from bench.config.choices import MAX_WORKERS
from bench.config.parameter import Parameter
from bench.config.parameters import BY_KEY, PARAMETERS
from bench.errors import ConfigError
from bench.usage import named, setting

#: At most this many candidate designs in one plan (the product of the lists).
MAX_CANDIDATES = 8
#: A plan's steps: this measured window and warm-up unless DURATION / WARMUP are given.
STEP_DURATION, STEP_WARMUP = "10s", "2s"
#: Run parameters the plan sets itself, with why (given, they are refused).
SET_BY_PLAN = {
    "workers": "the plan searches the worker count itself; allowed: leave {workers} out ({plan_max_workers} bounds it)",
    "backlog": "the plan's steps are open-loop, with no seeded backlog; allowed: leave {backlog} out",
    "bursts": "the plan offers one constant rate per step; allowed: leave {bursts} out",
}
#: Parameters that may be given as a comma list of candidates: a sweep axis with one plain value (a
#: yes/no is a switch on the command line, one value: compare both with a sweep).
LISTABLE = tuple(p.key for p in PARAMETERS if p.sweep and p.kind in ("choice", "int", "number", "share")
                 and p.key not in ("engine", "workers", "rate", "processes", "backlog"))

PLAN_OPTIONS = (
    Parameter("plan_max_workers", "int", None, "the most workers a plan tries", minimum=1, maximum=MAX_WORKERS,
              default_text="what the server's free connections allow; the embedded server: 200"),
    Parameter("repetitions", "int", 2, "runs per plan step; a step passes only if every one does",
              minimum=1, maximum=10),
    Parameter("confirm_s", "duration", "120s", "the confirmation run's measured window at the answer; 0 = none",
              minimum=0, maximum=86_400),
)
#: The plan's ``RATE``: the table's, but required above 0 (a plan answers for arrivals, not a drain); it checks
#: the value and words what is allowed.
PLAN_RATE = dataclasses.replace(BY_KEY["rate"], strict=True)
#: The embedded server's PLAN_MAX_WORKERS default (the plan starts it with room for that many).
EMBEDDED_MAX_WORKERS = 200


@dataclass(frozen=True)
class PlanOptions:
    """``max_workers`` None: from the server's free connections; ``confirm_s`` 0: no confirmation run."""

    max_workers: int | None
    repetitions: int
    confirm_s: float


def plan_options(given: Mapping[str, Any]) -> PlanOptions:
    """The plan's options from ``given`` (option key -> raw text or None); raises ConfigError."""
    values = {}
    for p in PLAN_OPTIONS:
        raw = given.get(p.key)
        if raw is not None and not str(raw).strip():
            raise ConfigError(p.name, f"empty; allowed: {p.help} (leave {p.option} out for the default)")
        raw = p.default if raw is None else raw
        values[p.key] = None if raw is None else p.parse(raw)
    return PlanOptions(values["plan_max_workers"], values["repetitions"], values["confirm_s"])


def candidates(overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The candidate designs: ``overrides`` once per combination of its comma lists (:data:`LISTABLE`), each a
    dict for :func:`bench.config.run_config.build_config`. Raises ConfigError for a parameter the plan sets
    (:data:`SET_BY_PLAN`), a list where none may be, an empty item, or over :data:`MAX_CANDIDATES`
    combinations."""
    for key, why in SET_BY_PLAN.items():
        if overrides.get(key) not in (None, ""):
            raise ConfigError(key.upper(), named(why))
    fixed, lists = {}, {}
    for key, value in overrides.items():
        if isinstance(value, str) and "," in value and key in LISTABLE:
            items = [v.strip() for v in value.split(",")]
            if not all(items) or len(set(items)) != len(items):
                raise ConfigError(key.upper(), f"{value!r}: a list of candidates holds distinct, non-empty values; "
                                               f"allowed: e.g. {setting(key, BY_KEY[key].default, quote=False)},…")
            lists[key] = items
        elif isinstance(value, str) and "," in value and key in BY_KEY and BY_KEY[key].kind not in ("table", "list", "text"):
            raise ConfigError(key.upper(), f"{value!r}: a plan compares lists of "
                                           f"{', '.join(k.upper() for k in LISTABLE)} only")
        else:
            fixed[key] = value
    combos = list(itertools.product(*lists.values())) if lists else [()]
    if len(combos) > MAX_CANDIDATES:
        raise ConfigError(next(iter(lists)).upper(), f"{len(combos)} candidate designs; allowed: at most "
                                                     f"{MAX_CANDIDATES} combinations of the lists")
    return [{**fixed, **dict(zip(lists, combo))} for combo in combos]


def varied(candidate_overrides: list[dict[str, Any]]) -> list[str]:
    """The keys whose value differs between candidates (what names each design)."""
    return [k for k in LISTABLE if len({str(c.get(k)) for c in candidate_overrides}) > 1]
