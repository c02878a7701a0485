"""One run parameter (:class:`Parameter`): name, kind, range, default, engine rules, parser. Standard library only."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from bench.config import parsers
from bench.errors import ConfigError
from bench.usage import option, setting

#: What the value of a parameter with no meaning on an engine is recorded as (run.json, summaries).
NOT_APPLICABLE = "n/a"

#: The type of a parsed value of each kind: the :class:`bench.config.run_config.RunConfig` field's type.
KIND_TYPES: dict[str, type] = {"int": int, "number": float, "share": float, "duration": float, "choice": str,
                               "flag": bool, "text": str, "table": tuple, "list": tuple}

#: The groups of ``qbench run --help`` (argparse option groups), in the order shown: what each
#: parameter's ``group`` may be, with the group's title.
GROUPS: dict[str, str] = {
    "design": "design: the queue, its claim, indexes and table layout",
    "load": "load: workers, jobs, arrivals, seeded rows and the measured window",
    "faults": "faults: failing jobs and fault windows",
    "database": "database: the engine, the connection and its server-side settings",
    "output": "output: where results go and what the run must show",
}


def shown(value: Any, quote: bool = True) -> str:
    """``value`` as a user writes it in an error line: a yes/no as ``1``/``0`` (``REPLICA=1``), else its repr (or
    str without ``quote``)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if quote else str(value)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One run parameter. ``key`` is its name in files (lower case); ``kind`` one of ``int``, ``number``,
    ``share`` (0..1), ``choice``, ``duration`` (whole seconds), ``flag``, ``text``, ``table``, ``list``;
    ``group`` its ``--help`` group (:data:`GROUPS`); ``field`` its RunConfig attribute (``key`` unless given);
    ``allowed``, ``default_text`` and ``meaning`` override the generated reference's columns."""

    key: str
    kind: str
    default: Any
    help: str
    group: str = ""
    unit: str = ""
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    strict: bool = False
    sweep: bool = False
    parse_value: Callable[[Any], Any] | None = None
    field: str = ""
    allowed: str = ""
    default_text: str = ""
    meaning: str = ""
    engine_defaults: Any = dataclasses.field(default_factory=dict)
    engine_values: Any = dataclasses.field(default_factory=dict)
    engine_reasons: Any = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.group and self.group not in GROUPS:  # "": a command's own option, outside the table
            raise AssertionError(f"{self.key}: group {self.group!r} is not one of {', '.join(GROUPS)}")

    def default_on(self, engine: str) -> Any:
        """The default on ``engine``, parsed: :attr:`engine_defaults`' value, else :attr:`default`;
        :data:`NOT_APPLICABLE` where the parameter does not apply (:meth:`applies_on`)."""
        if not self.applies_on(engine):
            return NOT_APPLICABLE
        return self.parse(self.engine_defaults.get(engine, self.default))

    def applies_on(self, engine: str) -> bool:
        """False when the parameter has no meaning on ``engine`` (its only value there is n/a)."""
        return not (engine in self.engine_values and not self.engine_values[engine])

    def check_on(self, engine: str, value: Any) -> None:
        """Raise ConfigError when ``value`` (set by the user) cannot be honoured on ``engine``."""
        if engine not in self.engine_values:
            return
        allowed = self.engine_values[engine]
        why = f" ({self.engine_reasons[engine]})" if engine in self.engine_reasons else ""
        if not allowed:
            raise ConfigError(self.name, f"does not apply on {engine}{why}; allowed: leave {option(self.key)} out "
                                         f"with {setting('engine', engine)}")
        if value not in allowed:
            raise ConfigError(self.name, f"{shown(value)} is not supported on {engine}{why}; allowed on {engine}: "
                                         + ", ".join(shown(v, quote=False) for v in allowed))

    @property
    def name(self) -> str:
        """The Make variable and the name error lines use: ``WORK_MS``."""
        return self.key.upper()

    @property
    def option(self) -> str:
        """The command-line option: ``--work-ms``."""
        return "--" + self.key.replace("_", "-")

    @property
    def attribute(self) -> str:
        """The RunConfig field this parameter sets."""
        return self.field or self.key

    @property
    def value_type(self) -> Any:
        """The RunConfig field's type: its kind's (:data:`KIND_TYPES`), or that or ``str`` where it can be n/a."""
        kind_type = KIND_TYPES[self.kind]
        return kind_type if all(self.engine_values.values()) else kind_type | str

    def parse(self, value: Any) -> Any:
        """The typed, validated value of ``value`` (text or a TOML value); raises ConfigError."""
        if self.parse_value is not None:
            return self.parse_value(value)
        if self.kind == "int":
            return parsers.parse_int(self.name, value, minimum=int(self.minimum), maximum=self.maximum)
        if self.kind == "number":
            return parsers.parse_number(self.name, value, minimum=self.minimum, strict=self.strict,
                                        maximum=self.maximum)
        if self.kind == "share":
            return parsers.parse_share(self.name, value)
        if self.kind == "choice":
            return parsers.parse_choice(self.name, value, self.choices)
        if self.kind == "flag":
            return parsers.parse_flag(self.name, value)
        if self.kind == "duration":
            seconds = parsers.parse_duration_s(self.name, value)
            if seconds < (self.minimum or 0):
                raise ConfigError(self.name, f"{value!r} is too short; allowed: a duration of at least "
                                             f"{self.minimum:g}s, e.g. 30s, 2m")
            if self.maximum is not None and seconds > self.maximum:
                raise ConfigError(self.name, f"{value!r} is too long; allowed: a duration of at most "
                                             f"{self.maximum / 3600:g}h")
            parsers.whole_seconds(self.name, value, seconds)
            return seconds
        if self.kind == "text":
            return str(value)
        raise AssertionError(f"{self.key}: kind {self.kind} needs a parse_value")

    def allowed_text(self) -> str:
        """What is allowed, for the README (Markdown)."""
        if self.allowed:
            return self.allowed
        if self.kind == "choice":
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.kind == "flag":
            return f"`{self.option}`, `--no-{self.option[2:]}`; Make `1`, `0`; files `true`, `false`"
        if self.kind == "share":
            return "0–1"
        if self.kind in ("int", "number"):
            low = f"{self.minimum:g}" if self.kind == "number" else f"{int(self.minimum)}"
            if self.maximum is not None:
                return f"{'> ' + low + ', ' if self.strict else low + '–'}{'≤ ' if self.strict else ''}{int(self.maximum):,}"
            return f"> {low}" if self.strict else f"≥ {low}"
        return ""

    def allowed_words(self) -> str:
        """What :meth:`parse` allows of an ``int`` or ``number``, as its refusal says it (``a number > 0``)."""
        if self.kind == "int":
            return parsers.int_allowed(int(self.minimum), self.maximum)
        if self.kind == "number":
            return parsers.number_allowed(self.minimum, self.strict, self.maximum)
        raise AssertionError(f"{self.key}: kind {self.kind} has no range")

    def default_shown(self) -> str:
        """The default, for the README (Markdown)."""
        if self.default_text:
            return self.default_text
        if self.kind == "flag":
            return "yes" if self.default else "no"
        if self.kind in ("choice", "duration"):
            return f"`{self.default}`"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    def help_text(self) -> str:
        """The ``--help`` line: :attr:`help` and the default (``worker connections (default: 10)``)."""
        return f"{self.help} (default: {self.default_shown().replace('`', '')})".replace("%", "%%")
