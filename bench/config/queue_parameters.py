"""What ``QUEUE`` does to the other run parameters: the one rule (docs/queues.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.config.faults import WORKER_KINDS
from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.config.parameters import BY_KEY
from bench.config.queue_definition import BUILTIN, DEFINITION_ENGINES, QueueDefinition, applicability, load_queue
from bench.config.queue_library import install_extra, missing_worker_module
from bench.errors import ConfigError
from bench.usage import named, option, setting


@dataclasses.dataclass(frozen=True)
class QueueParameters:
    """The parameters a queue definition decides for one ``build_config`` call (``defn`` None: builtin)."""

    queue: str
    defn: QueueDefinition | None
    given: frozenset
    workload: str
    not_applicable: dict
    defaults: dict = dataclasses.field(default_factory=dict)
    mode: str | None = None  # a library's LIBRARY_MODE; None for any other queue

    @classmethod
    def of(cls, raw: dict, given: set, engine: str, workload: str) -> "QueueParameters":
        """From the merged raw values, the keys the user set as options (``given``) and the engine. Raises
        ConfigError (``QUEUE`` or the parameter a definition's ``[defaults]`` sets wrongly)."""
        queue = BY_KEY["queue"].parse(raw["queue"]) if raw.get("queue") not in (None, "") else BUILTIN
        if queue == BUILTIN:
            if "library_mode" in given:
                raise ConfigError("LIBRARY_MODE", named("applies to queue libraries only; allowed: {library_mode} with "
                                                        f"{setting('queue', 'procrastinate')} or "
                                                        f"{setting('queue', 'pgqueuer')}, or leave it out"))
            raw.pop("library_mode", None)
            return cls(queue, None, frozenset(given), workload, {"library_mode": "QUEUE=builtin is not a library"})
        defn = load_queue(queue)
        if engine not in DEFINITION_ENGINES:
            raise ConfigError("QUEUE", f"{queue!r} is a queue definition, and definitions run on PostgreSQL; "
                                       f"allowed: {setting('queue', queue)} with {setting('engine', DEFINITION_ENGINES[0])} (a "
                                       f"postgresql:// DSN), or {setting('queue', BUILTIN)} on {engine}")
        mode = cls._library_mode(defn, raw)
        not_applicable = applicability(defn, mode)
        defaults = {**defn.defaults, **(defn.library["worker"]["defaults"] if mode == "worker" else {})}
        for key in defn.defaults:
            if key not in BY_KEY or key in ("queue", "engine", "schema", "results"):
                raise ConfigError("QUEUE", f"{defn.path}: [defaults] sets {key!r}; allowed: run parameters "
                                           "such as lease_s, work_ms, workers")
            if key in not_applicable:
                raise ConfigError("QUEUE", f"{defn.path}: [defaults] sets {key!r}, which does not apply to it "
                                           f"({not_applicable[key]}); allowed: leave it out")
        return cls(queue, defn, frozenset(given), workload, not_applicable, defaults, mode)

    @staticmethod
    def _library_mode(defn: QueueDefinition, raw: dict) -> str | None:
        """A library's ``LIBRARY_MODE`` (``worker`` unless set), None otherwise. Raises ConfigError
        (``LIBRARY_MODE``) for a bad value, or ``worker`` without what its worker imports."""
        if defn.library is None:
            return None
        mode = BY_KEY["library_mode"].parse(raw.get("library_mode", "worker"))
        missing = missing_worker_module(defn.library) if mode == "worker" else None
        if missing:
            package = defn.library["package"]
            raise ConfigError("LIBRARY_MODE", f"worker runs {package}'s own worker, which needs {missing!r}, not "
                                              f"installed here; allowed: {install_extra(package)} (it brings "
                                              f"{defn.library['worker']['install']}), or {setting('library_mode', 'sql')}")
        return mode

    def takes(self, p: Parameter) -> bool:
        """True when the definition decides ``p``'s value (:meth:`value`); ``LIBRARY_MODE`` is always decided here."""
        if p.key == "library_mode":
            return True
        return self.defn is not None and (p.key in self.not_applicable or p.key == "index" or p.key in self.defaults)

    def value(self, p: Parameter, raw: dict, notes: list[str]) -> Any:
        """``p``'s value under the definition; a note in ``notes`` when a file's value is dropped. Raises
        ConfigError naming ``p`` for a value set that does not apply or is not offered."""
        defn = self.defn
        if p.key == "library_mode" and defn is None:
            return NOT_APPLICABLE
        if p.key in self.not_applicable:
            why = self.not_applicable[p.key]
            if p.key in self.given:
                raise ConfigError(p.name, f"does not apply to queue {self.queue!r} ({why}); allowed: leave "
                                          f"{option(p.key)} out with {setting('queue', self.queue)}")
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
            return self._worker_value(p, p.parse(raw[p.key]))
        if p.key == "library_mode":
            return "worker"
        try:
            return p.parse(self.defaults[p.key])
        except ConfigError as err:
            raise ConfigError("QUEUE", f"{defn.path}: [defaults] {p.key}: {err.problem}") from None

    def check(self, values: dict) -> list[str]:
        """Refuse what a library's own worker cannot run (ConfigError naming the parameter): too few ``WORKERS``
        per process for ``workers_per_batch`` × ``BATCH`` (a default ``WORKERS`` is raised, with a note;
        returns the notes), :data:`WORKER_KINDS` and ``partition`` faults, ``process_kill`` outside worker mode or
        with one process."""
        kills = any(f.kind == "process_kill" for f in values["faults"])
        notes: list[str] = []
        if self.mode != "worker":
            if kills:
                raise ConfigError("FAULTS", "process_kill kills one of a queue library's own worker processes; "
                                            f"allowed: process_kill with {setting('library_mode', 'worker')} (a queue "
                                            "library)")
            return notes
        worker = self.defn.library["worker"]
        least = worker["workers_per_batch"] * values["batch"] * values["processes"]
        if values["workers"] < least and "workers" not in self.given:  # the default: as many as it needs
            notes.append(f"WORKERS {least} ({worker['workers_per_batch']} x BATCH {values['batch']} in each of "
                         f"PROCESSES {values['processes']}, the least {self.defn.library['package']}'s own worker "
                         f"takes) instead of its default {values['workers']}")
            values["workers"] = least
        if values["workers"] < least:
            per = f" in each of {setting('processes', values['processes'])}" if values["processes"] > 1 else ""
            raise ConfigError("WORKERS", f"{values['workers']} is fewer than {worker['workers_per_batch']} x "
                                         f"{setting('batch', values['batch'])}{per}, which "
                                         f"{self.defn.library['package']}'s own worker refuses; allowed: "
                                         + named(f"{{workers}} >= {least}, or a smaller {{batch}}"))
        tool_faults = sorted({f.kind for f in values["faults"]} & {*WORKER_KINDS, "partition"})
        if tool_faults:
            raise ConfigError("FAULTS", f"{', '.join(tool_faults)} acts on the tool's own workers, and "
                                        f"{setting('library_mode', 'worker')} runs the library's; allowed: process_kill, "
                                        f"backend_kill, long_transaction, or {setting('library_mode', 'sql')}")
        if kills and values["processes"] < 2:
            raise ConfigError("FAULTS", "process_kill with 1 load generator process would end the run with its "
                                        f"only worker process; allowed: {setting('processes', 2)} or more")
        return notes

    def _worker_value(self, p: Parameter, value: Any) -> Any:
        """``value`` of ``p``. Raises ConfigError naming ``p`` for a value the library's worker lacks
        (``WAKEUP``)."""
        if p.key == "wakeup" and self.mode == "worker":
            offered = self.defn.library["worker"]["wakeup"]
            if value not in offered:
                raise ConfigError("WAKEUP", f"{value!r}: {self.defn.library['package']}'s own worker has no such "
                                            f"wake-up; allowed: {', '.join(offered)}, or {setting('library_mode', 'sql')}")
        return value
