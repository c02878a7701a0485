"""The figure check: every number with a unit in the README and the docs' prose is one that a measurement
file (docs/measurements/*.md) holds, or is allowed by name as a definition or an example
(tests/figures_allowed.toml); each measurement section that holds figures names its commit and command.

A figure is a number, or a list or range of numbers ("878 / 143 / 67 µs", "558–592 µs",
"1,880→2,200 jobs/s"), followed by a unit of UNITS; each number of a list counts as a figure of that unit.
Numbers compare by value (1,880 = 1880, 152.0 = 152) and units by their canonical name (µs = μs = us).
Inline code (`--duration 30s`, `SLO='pickup_p99<=500ms'`) is a definition, never a figure; fenced blocks are
read like prose (a terminal transcript is measured output) except their command lines ($ make …).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEASUREMENTS = REPO / "docs" / "measurements"
ALLOWED_FILE = Path(__file__).with_name("figures_allowed.toml")

# Unit as written -> canonical unit. Longest spellings are tried first, so "MB/s" is not "MB".
UNITS = {
    "jobs/s": "jobs/s", "rows/s": "rows/s", "tps": "tps", "MB/s": "MB/s", "MB/min": "MB/min",
    "µs": "µs", "μs": "µs", "us": "µs", "ms": "ms", "s": "s", "seconds": "s", "second": "s",
    "min": "min", "minutes": "min", "minute": "min", "MB": "MB", "GB": "GB", "KB": "KB", "kB": "KB",
}
_UNIT = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_SEPARATOR = r"(?:\s*(?:/|–|-|→)\s*|\s+(?:to|and|or|vs\.?|against)\s+)"
FIGURE = re.compile(
    rf"(?<![\w.,/^-])(?P<numbers>(?:{_NUMBER})(?:{_SEPARATOR}(?:{_NUMBER}))*)[ \u00a0]?(?P<unit>{_UNIT})(?![\w/])")
_ONE_NUMBER = re.compile(_NUMBER)
# A table header cell that names its column's unit: "jobs/s", "claim p99 ms", "server CPU µs / job".
HEADER_UNIT = re.compile(rf"(?<![\w/])({_UNIT})(?![\w/])")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", flags=re.S)
FENCE = re.compile(r"^(```|~~~)")
HTML_COMMENT = re.compile(r"<!--.*?-->", flags=re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# A command line inside a fenced block: what the reader types, not what the tool printed.
COMMAND_LINE = re.compile(r"^\s*(?:\$ |make |qbench |\.venv/|pip |pipx |git |python|pytest |time |#)")
# A measurement section's record: a commit (7-40 hex with a digit and a letter, as tests/test_docs.py reads
# them, or a date-stamped "commit 1234567") and a command (inline code or a fenced line that runs a program).
COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"
                    r"|\bcommits?\s+`?[0-9]{7,40}\b")
COMMAND = re.compile(r"(?:`|^\$ |^)\s*(?:/usr/bin/time [^`\n]*|time |sudo )?"
                     r"(?:make|qbench|pgbench|mariadb-slap|python3?|pytest|\.ci/run|\.venv/bin/\w+|"
                     r"psql|mariadb|/usr/bin/time)\b", flags=re.M)
MACHINE = re.compile(r"\b\d+[- ]cores?\b", flags=re.I)


@dataclass(frozen=True)
class Figure:
    """One number with its unit as a page writes it: value (Decimal), canonical unit, 1-based line, the match."""

    value: Decimal
    unit: str
    line: int
    text: str

    @property
    def key(self) -> tuple[Decimal, str]:
        """(value, canonical unit): what a measurement file must hold."""
        return (self.value, self.unit)


def _value(number: str) -> Decimal:
    return Decimal(number.replace(",", "")).normalize()


def figures_in(text: str) -> list[Figure]:
    """Every figure of a text, each number of a list or range on its own; line numbers are 1-based."""
    found = []
    for match in FIGURE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        unit = UNITS[match.group("unit")]
        for number in _ONE_NUMBER.findall(match.group("numbers")):
            found.append(Figure(_value(number), unit, line, match.group(0)))
    return found


def prose(markdown: str) -> str:
    """The text a figure check reads: inline code, link targets, HTML comments and the command lines of fenced
    blocks blanked with spaces (each character keeps its place, so a position or line points into the page)."""
    text = HTML_COMMENT.sub(_blank, markdown)
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            lines.append(" " * len(line))
        elif fenced and COMMAND_LINE.match(line):
            lines.append(" " * len(line))
        else:
            lines.append(line)
    text = "\n".join(lines)
    return LINK_TARGET.sub(_blank, INLINE_CODE.sub(_blank, text))


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def table_figures(markdown: str) -> list[Figure]:
    """The figures of a page's tables whose unit is in the column's header ("server CPU µs / job",
    "claim p99 ms", "jobs/s"): every number of such a column's cells, with that unit."""
    found, units = [], None
    for number, line in enumerate(markdown.splitlines(), start=1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            units = None
        elif units is None:
            units = [_header_unit(cell) for cell in cells]
        elif not set(line) <= set("|-: "):
            for cell, unit in zip(cells, units):
                found.extend(Figure(_value(text), unit, number, cell) for text in _ONE_NUMBER.findall(cell) if unit)
    return found


def _header_unit(cell: str) -> str | None:
    match = HEADER_UNIT.search(cell)
    return UNITS[match.group(1)] if match else None


def measured_keys(directory: Path = MEASUREMENTS) -> set[tuple[Decimal, str]]:
    """Every (value, unit) the measurement files hold: read from their whole text (code included), and from
    their tables' columns whose header names the unit."""
    keys = set()
    for path in sorted(directory.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        keys |= {figure.key for figure in [*figures_in(text), *table_figures(text)]}
    return keys


@dataclass(frozen=True)
class Allowed:
    """A phrase whose figures are definitions or examples, not measurements, and why."""

    phrase: str
    reason: str


def load_allowed(path: Path = ALLOWED_FILE) -> list[Allowed]:
    """The allow-list: [[allowed]] tables with a phrase and a reason each (ValueError when one lacks either)."""
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("allowed", [])
    for entry in entries:
        if not entry.get("phrase") or not entry.get("reason"):
            raise ValueError(f"{path.name}: every [[allowed]] needs a phrase and a reason: {entry}")
    return [Allowed(entry["phrase"], entry["reason"]) for entry in entries]


def _allowed_spans(text: str, allowed: list[Allowed]) -> tuple[list[tuple[int, int]], set[str]]:
    """Where the allowed phrases occur in a text (a space in a phrase matches any run of white space, so a
    phrase may wrap across lines), and which phrases occurred."""
    spans, used = [], set()
    for entry in allowed:
        pattern = r"\s+".join(re.escape(word) for word in entry.phrase.split())
        for match in re.finditer(pattern, text):
            spans.append((match.start(), match.end()))
            used.add(entry.phrase)
    return spans, used


def unmeasured(markdown: str, measured: set[tuple[Decimal, str]],
               allowed: list[Allowed]) -> tuple[list[Figure], set[str]]:
    """The figures of a page's prose and of its tables' unit columns that no measurement file holds and no
    allowed phrase covers (a table cell's figure: a phrase on its line), and the allowed phrases used."""
    text = prose(markdown)
    spans, used = _allowed_spans(text, allowed)
    lines = text.splitlines()
    missing = []
    for match in FIGURE.finditer(text):
        if any(start <= match.start() and match.end() <= end for start, end in spans):
            continue
        line = text.count("\n", 0, match.start()) + 1
        missing.extend(Figure(figure.value, figure.unit, line, figure.text) for figure in figures_in(match.group(0))
                       if figure.key not in measured)
    for figure in table_figures(text):
        covered = [entry.phrase for entry in allowed if " ".join(entry.phrase.split()) in lines[figure.line - 1]]
        used.update(covered)
        if figure.key not in measured and not covered:
            missing.append(figure)
    return missing, used


@dataclass(frozen=True)
class Section:
    """A measurement page's section: its heading, 1-based first line, and its text with its ancestors' intros."""

    heading: str
    line: int
    own: str
    record: str


def sections(markdown: str) -> list[Section]:
    """A page split at its headings; each section's record is its own text plus the text of every enclosing
    section up to its first subsection (a subsection inherits its parent's commit and command)."""
    found, stack, fenced = [], [], False
    lines: list[str] = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        heading = None if fenced else re.match(r"^(#+)\s+(.*)", line)
        if heading:
            level = len(heading.group(1))
            stack = [entry for entry in stack if entry[0] < level]
            lines = [line]
            found.append((heading.group(2), number, lines, [entry[1] for entry in stack]))
            stack.append((level, lines))
        else:
            lines.append(line)
    return [Section(title, number, "\n".join(own), "\n".join(["\n".join(part) for part in parents] + own))
            for title, number, own, parents in found]


def unrecorded_sections(markdown: str) -> list[str]:
    """The sections of a measurement page that hold figures but name no commit or no command, as
    "line N: heading (no commit / no command)"."""
    problems = []
    for section in sections(markdown):
        if not figures_in(section.own):
            continue
        lacks = [what for what, pattern in (("commit", COMMIT), ("command", COMMAND))
                 if not pattern.search(section.record)]
        if lacks:
            problems.append(f"line {section.line}: {section.heading} (no {' and no '.join(lacks)})")
    return problems


def page_names_machine(markdown: str) -> bool:
    """Whether a measurement page says which machine measured (its core count)."""
    return bool(MACHINE.search(markdown))
