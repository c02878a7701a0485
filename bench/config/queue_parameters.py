"""What ``QUEUE`` does to the other run parameters: the one rule for a queue definition's parameters.

With ``QUEUE=builtin`` nothing changes. With a definition (:mod:`bench.config.queue_definition`):

- a parameter that does not apply (:func:`~bench.config.queue_definition.applicability`) is refused in
  one line when set as an option or Make variable; from a workload file it is dropped with a note; its
  value is ``n/a`` for a choice (``POLICY``, ``LAYOUT``, ...) and the table's default otherwise (a number
  the run still reads, such as ``RATE`` 0 or ``BATCH`` 1);
- ``INDEX`` takes the definition's own variant names (``[indexes]``), its ``default`` unless set;
- the definition's ``[defaults]`` replace the table's default of a parameter the user did not set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.config.queue_definition import BUILTIN, QueueDefinition, applicability, load_queue
from bench.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class QueueParameters:
    """The parameters a queue definition decides for one :func:`bench.config.run_config.build_config`
    call. ``defn`` is None for ``QUEUE=builtin`` (then :meth:`takes` is always False)."""

    queue: str
    defn: QueueDefinition | None
    given: frozenset
    workload: str
    not_applicable: dict

    @classmethod
    def of(cls, raw: dict, given: set, engine: str, workload: str) -> "QueueParameters":
        """From the merged raw values (``raw``: workload file and options), the keys the user set as
        options (``given``) and the run's engine. Raises ConfigError (``QUEUE`` or the parameter a
        definition's ``[defaults]`` sets wrongly)."""
        from bench.config.parameters import BY_KEY  # the table imports this package's parser

        queue = BY_KEY["queue"].parse(raw["queue"]) if raw.get("queue") not in (None, "") else BUILTIN
        if queue == BUILTIN:
            return cls(queue, None, frozenset(given), workload, {})
        defn = load_queue(queue)
        if engine != "postgres":
            raise ConfigError("QUEUE", f"{queue!r} is a queue definition, and definitions run on PostgreSQL; "
                                       f"allowed: QUEUE={queue} with ENGINE=postgres (a postgresql:// DSN), or "
                                       f"QUEUE={BUILTIN} on {engine}")
        not_applicable = applicability(defn)
        for key in defn.defaults:
            if key not in BY_KEY or key in ("queue", "engine", "schema", "results"):
                raise ConfigError("QUEUE", f"{defn.path}: [defaults] sets {key!r}; allowed: run parameters "
                                           "such as lease_s, work_ms, workers")
            if key in not_applicable:
                raise ConfigError("QUEUE", f"{defn.path}: [defaults] sets {key!r}, which does not apply to it "
                                           f"({not_applicable[key]}); allowed: leave it out")
        return cls(queue, defn, frozenset(given), workload, not_applicable)

    def takes(self, p: Parameter) -> bool:
        """True when the definition decides ``p``'s value (:meth:`value`)."""
        return self.defn is not None and (p.key in self.not_applicable or p.key == "index" or p.key in self.defn.defaults)

    def value(self, p: Parameter, raw: dict, notes: list[str]) -> Any:
        """``p``'s value under the definition; a note is added to ``notes`` when a workload file's value
        is dropped. Raises ConfigError naming ``p`` for a value set that does not apply or that the
        definition does not offer."""
        defn = self.defn
        if p.key in self.not_applicable:
            why = self.not_applicable[p.key]
            if p.key in self.given:
                raise ConfigError(p.name, f"does not apply to queue {self.queue!r} ({why}); allowed: leave "
                                          f"{p.name} out with QUEUE={self.queue}")
            if p.key in raw:
                notes.append(f"{p.name} = {raw[p.key]!r} from workload {self.workload!r} does not apply to queue "
                             f"{self.queue!r} ({why}): {NOT_APPLICABLE}")
                del raw[p.key]
            return NOT_APPLICABLE if p.kind == "choice" else p.parse(p.default)
        if p.key == "index":
            value = str(raw.get("index", defn.default_index))
            if value not in defn.indexes:
                raise ConfigError("INDEX", f"{value!r} is not an index variant of queue {self.queue!r}; allowed: "
                                           + ", ".join(defn.indexes))
            return value
        if p.key in raw:
            return p.parse(raw[p.key])
        try:
            return p.parse(defn.defaults[p.key])
        except ConfigError as err:
            raise ConfigError("QUEUE", f"{defn.path}: [defaults] {p.key}: {str(err).split(': ', 1)[1]}") from None
