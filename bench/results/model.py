"""The results model: a run's result files read into one object, ``format_version`` in every JSON result file,
the upgrade of older files, and the one rule for whether a run is trustworthy (:func:`problems`; docs/results.md).

The versions' rule (docs/results.md, "Versions of the result files"): a column added to a CSV result file or a
key or block added to a JSON one leaves :data:`FORMAT_VERSION` as it is (a reader takes what it finds); a
column or key renamed, removed or given another meaning raises it by one, and :data:`UPGRADES` gets the step
that brings the files of the version before to it, so every earlier run can still be re-rendered and compared.
The CSV files carry no version of their own: theirs is the run's ``summary.json``'s."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVARIANTS, EXIT_SLO, EXIT_SUSPECT, BadInput

if TYPE_CHECKING:
    import pandas as pd

#: The version of the result files' format this queue-bench writes; it reads every version up to it, the older
#: ones through :data:`UPGRADES`. Raised only by a rename, a removal or a change of meaning (see above).
FORMAT_VERSION = 3


class ResultsError(BadInput):
    """A result file is missing, unreadable, not a JSON object, or from a newer format; the
    message is one line naming the file."""


def stamped(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``format_version`` first (replacing any it had)."""
    return {"format_version": FORMAT_VERSION, **{k: v for k, v in data.items() if k != "format_version"}}


def clean_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, Mapping):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def write_result(path: Path, data: Mapping[str, Any]) -> None:
    """Write the result file ``path``: ``data`` as indented JSON, ``format_version`` first
    (:func:`stamped`), NaN and infinities as null. Raises OSError when it cannot be written."""
    Path(path).write_text(json.dumps(clean_json(stamped(data)), indent=2, default=str) + "\n")


def read_result(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, upgraded to :data:`FORMAT_VERSION` (:func:`upgraded`); ResultsError when
    missing, unreadable, not an object, or newer than :data:`FORMAT_VERSION`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path} is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path} does not hold a JSON object")
    return upgraded(Path(path).name, data, _version(path, data))


def _version(path: Path, data: Mapping[str, Any]) -> int:
    """The ``format_version`` of the result file ``path`` holding ``data`` (0 without one: written before it
    existed); ResultsError, one line, when it is not an integer from 0 to :data:`FORMAT_VERSION`."""
    version = data.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= FORMAT_VERSION:
        raise ResultsError(f"{path} has format_version {version!r}; this queue-bench reads up to "
                           f"{FORMAT_VERSION}: use the queue-bench that wrote it")
    return version


def read_table(run_dir: Path, name: str, summary: Mapping[str, Any]) -> pd.DataFrame:
    """The run's CSV result file ``run_dir / name`` (``intervals.csv``, ``processes.csv``, ``priority_ages.csv``)
    as pandas reads it (a number column as numbers, an empty cell NaN), upgraded to :data:`FORMAT_VERSION` from
    the run's version: ``summary``'s, the run's ``summary.json`` as read (a CSV file carries none; ``{}``: 0).
    Raises ResultsError when that version is newer; OSError when the file cannot be read; pandas' ParserError or
    EmptyDataError, or UnicodeDecodeError, when it does not parse."""
    import pandas as pd  # here: a command that reads no table starts without pandas

    version = _version(Path(run_dir) / "summary.json", summary)
    return upgraded(name, pd.read_csv(Path(run_dir) / name), version)


def _stall_in_progress(name: str, content: Any) -> Any:
    """1 → 2: intervals.csv ``longest_stall_ms`` is named ``ongoing_stall_ms`` (25c2660; the same figure, the stall
    in progress). Files written between that commit and version 2 say 1 and have the new name already: the column
    is renamed only when the old name is there and the new one is not."""
    if name == "intervals.csv" and "longest_stall_ms" in content and "ongoing_stall_ms" not in content:
        return content.rename(columns={"longest_stall_ms": "ongoing_stall_ms"})
    return content


def _headroom_at_the_answer(name: str, content: Any) -> Any:
    """2 → 3: plan.json ``answer.headroom`` is the headroom at the answer's workers only (the design's headroom
    record with ``workers``), None when the answer's workers are not those the headroom search ran at or the
    confirmation failed; before, it was the design's headroom record whatever the answer's workers. The answer's
    ``sentence`` is kept as written."""
    answer = content.get("answer") if name == "plan.json" and isinstance(content, dict) else None
    if not answer or not answer.get("headroom") or answer.get("design_index") is None:
        return content
    searched = content["designs"][answer["design_index"]]["workers"]["needed"]
    if answer.get("confirmed") is False or answer.get("workers") != searched:
        why = (f"the headroom search ran at {searched} workers, which did not pass the confirmation (a plan written "
               "before format 3)")
        return {**content, "answer": {**answer, "headroom": None, "headroom_why_not": why}}
    return {**content, "answer": {**answer, "headroom": {**answer["headroom"], "workers": searched}}}


#: The upgrade steps, in order: version -> the step that turns a result file of that version into one of the
#: next, ``step(name, content) -> content`` (``name``: the file's, ``intervals.csv``, ``summary.json``, ``plan.json``;
#: ``content``: its DataFrame or dict; a file the step does not concern is returned as it is). Raising
#: :data:`FORMAT_VERSION` adds one entry here. 0 → 1 added ``format_version`` only: no step.
UPGRADES: dict[int, Callable[[str, Any], Any]] = {1: _stall_in_progress, 2: _headroom_at_the_answer}


def upgraded(name: str, content: Any, version: int) -> Any:
    """``content`` of the result file ``name`` written at format ``version`` (0 to :data:`FORMAT_VERSION`) as this
    queue-bench's format has it: through every step of :data:`UPGRADES` from ``version`` on, oldest first."""
    for since, step in sorted(UPGRADES.items()):
        if since >= version:
            content = step(name, content)
    return content


def utc_stamp() -> str:
    """The UTC time now as a directory name's stamp: ``20260101T120000Z``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def utc_now(timespec: str = "seconds") -> str:
    """The UTC time now, ISO 8601 to ``timespec`` (``seconds``, ``milliseconds``)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec=timespec)


def newest_unfinished(directory: Path, pattern: str, matches: Callable[[dict], bool]) -> Path | None:
    """The newest (by name) directory holding a result file ``directory.glob(pattern)`` finds that reads, is not
    ``complete`` and ``matches``; None when none does (a sweep, catalogue or plan to resume)."""
    found = []
    for path in directory.glob(pattern):
        try:
            meta = read_result(path)
        except ResultsError:  # an unreadable file is not resumed (a new one is started)
            continue
        if not meta.get("complete") and matches(meta):
            found.append(path.parent)
    return max(found, key=lambda p: p.name, default=None)


def invariants_ok(summary: Mapping[str, Any]) -> bool | None:
    """True when the audit checked every invariant and each is 0; False when one is not 0; None
    when the invariants were not checked (a run whose database went away)."""
    invariants = summary.get("invariants")
    if not isinstance(invariants, Mapping) or not invariants or any(v is None for v in invariants.values()):
        return None
    return all(v == 0 for v in invariants.values())


def problems(summary: Mapping[str, Any]) -> list[str]:
    """Why a run's ``summary.json`` figures cannot be trusted, one sentence each (empty when they can); saturation
    is not one (:attr:`RunResult.saturated`)."""
    found = []
    if summary.get("complete") is not True:
        found.append("interrupted run: the measured window did not finish (complete = false)")
    if summary.get("database_lost"):
        found.append(f"the database went away during the run ({summary['database_lost']})")
    found.extend(f"suspect run: {reason}" for reason in summary.get("suspect_reasons") or [])
    if summary.get("suspect") and not summary.get("suspect_reasons"):
        found.append("suspect run: no reason recorded")
    ok = invariants_ok(summary)
    if ok is None:
        found.append("the invariants were not checked")
    elif not ok:
        broken = {k: v for k, v in summary["invariants"].items() if v != 0}
        found.append("invariants broken: " + ", ".join(f"{k} = {v}" for k, v in broken.items()))
    return found


def machine_busy(summary: Mapping[str, Any]) -> str | None:
    """Why the machine may have set the pace (one sentence), or None: the CPU it spent outside the run's own
    processes plus the hypervisor's steal, each the mean over the measured window in % of all its cores
    (``outside_cpu_pct``, ``steal_pct``), above ``outside_cpu_limit_pct``, the limit the run was judged by
    (:data:`bench.run_summary.suspect.SUSPECT_OUTSIDE_CPU_PCT`); None too for a run that did not measure it."""
    limit = summary.get("outside_cpu_limit_pct")
    outside = (summary.get("outside_cpu_pct") or {}).get("mean")
    steal = (summary.get("steal_pct") or {}).get("mean") or 0.0
    if limit is None or outside is None or outside + steal <= limit:
        return None
    stolen = f" and the hypervisor took {steal:g} % ({outside + steal:g} % in all)" if steal else ""
    return (f"the machine spent {outside:g} % of its CPU outside the run{stolen}, mean over the window: more than "
            f"the {limit:g} % of all its cores a run is judged by")


def harness_limited(summary: Mapping[str, Any]) -> str | None:
    """Why the load generator may have set the pace (one sentence), or None: producers under 95 % of ``RATE``,
    a busy machine (:func:`machine_busy`: named before the generator's own CPU and loop lag, which another
    program's load raises too), or CPU (the delay relay's too) or loop lag past ``harness_cpu_limit_pct``/
    ``loop_lag_limit_us``."""
    busy = machine_busy(summary)
    if busy:
        return busy
    rate = summary.get("offered_rate_jobs_per_s") or 0.0
    measured_s = summary.get("measured_s") or 0.0
    if rate and measured_s and summary.get("jobs_produced", 0) / measured_s < 0.95 * rate:
        return (f"the producers offered {summary['jobs_produced'] / measured_s:,.0f} of {rate:,.0f} jobs/s")
    cpu_limit, lag_limit = summary.get("harness_cpu_limit_pct"), summary.get("loop_lag_limit_us")
    cpu = [summary.get("harness_cpu_max_pct")] + [p.get("cpu_max_pct") for p in summary.get("processes") or []]
    lag = [(summary.get("loop_lag_us") or {}).get("p99")] + [p.get("loop_lag_p99_us")
                                                              for p in summary.get("processes") or []]
    if cpu_limit is not None and max((c for c in cpu if c is not None), default=0) > cpu_limit:
        return f"a load-generator process used more than {cpu_limit:g} % of a core"
    relay = ((summary.get("relay") or {}).get("cpu_pct") or {}).get("max")  # NET_DELAY_MS: its own process
    if cpu_limit is not None and relay is not None and relay > cpu_limit:
        return f"the delay relay's process used more than {cpu_limit:g} % of a core"
    if lag_limit is not None and max((v for v in lag if v is not None), default=0) > lag_limit:
        return f"a load-generator process's event-loop lag p99 exceeded {lag_limit / 1000:g} ms"
    return None


def outcomes(summary: Mapping[str, Any], strict: bool = False) -> list[tuple[int, str]]:
    """(exit status, sentence) pairs a finished run reports, in :data:`bench.errors.PRECEDENCE` order (empty on
    success); ``strict``: suspect too (:data:`bench.errors.EXIT_SUSPECT`)."""
    found = []
    if summary.get("complete") is not True and not summary.get("database_lost"):
        found.append((EXIT_INTERRUPTED, "the run was interrupted: its figures cover part of the window"))
    if summary.get("database_lost"):
        found.append((EXIT_FAILED, f"the database went away during the run ({summary['database_lost']}); "
                                   "the results are incomplete and unaudited"))
    if invariants_ok(summary) is False:
        broken = {k: v for k, v in summary["invariants"].items() if v != 0}
        found.append((EXIT_INVARIANTS, "invariants broken: " + ", ".join(f"{k} = {v}" for k, v in broken.items())))
    verdict = summary.get("slo")
    if verdict and verdict["status"] != "pass":
        from bench.results import slo  # it reads this module's trust rule

        missed = [f"{slo.phrase(o)} ({o['status']})" for o in verdict["objectives"] if o["status"] != "pass"]
        found.append((EXIT_SLO, f"SLO {verdict['status']}: " + "; ".join(missed)))
    if strict and summary.get("suspect"):
        found.append((EXIT_SUSPECT, "suspect run (--strict): " + "; ".join(summary.get("suspect_reasons") or [])))
    return found


@dataclass(frozen=True)
class RunResult:
    """One run's result files: ``run`` is ``run.json``, ``summary`` is ``summary.json`` (both as
    written, with :func:`read_result`'s checks). Build with :meth:`load`."""

    run_dir: Path
    run: Mapping[str, Any]
    summary: Mapping[str, Any]

    @classmethod
    def load(cls, run_dir: Path) -> "RunResult":
        """Read ``run_dir``'s ``run.json`` and ``summary.json``; raises :class:`ResultsError`."""
        run_dir = Path(run_dir)
        return cls(run_dir, read_result(run_dir / "run.json"), read_result(run_dir / "summary.json"))

    def table(self, name: str) -> pd.DataFrame:
        """The run's CSV result file ``name`` (``intervals.csv``, ...) upgraded to this format (:func:`read_table`,
        which says what it raises)."""
        return read_table(self.run_dir, name, self.summary)

    def dump(self) -> None:
        """Write ``run.json`` and ``summary.json`` into :attr:`run_dir` (:func:`write_result`)."""
        write_result(self.run_dir / "run.json", self.run)
        write_result(self.run_dir / "summary.json", self.summary)

    @property
    def run_id(self) -> str:
        """The run's id (its directory's name when the summary has none)."""
        return str(self.summary.get("run_id") or self.run_dir.name)

    @property
    def config(self) -> Mapping[str, Any]:
        """The run's effective parameters (``summary.json`` ``config``, else ``run.json``'s)."""
        return self.summary.get("config") or self.run.get("config") or {}

    @property
    def problems(self) -> list[str]:
        """Why the run cannot be trusted (:func:`problems`); empty when it can."""
        return problems(self.summary)

    @property
    def saturated(self) -> bool:
        """Open-loop arrivals outpaced the workers (the queue did not keep up)."""
        return self.summary.get("saturated") is True
