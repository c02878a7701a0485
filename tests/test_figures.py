"""One source for every figure: the checker (tests/figures.py) finds figures as a page writes them, reports a
planted wrong one, and reads a measurement section's record (commit and command)."""

from __future__ import annotations

from decimal import Decimal

import pytest

import figures

MEASURED = "## Run (commit `abc1234`, `make bench WORKERS=20`)\n\n1,880 jobs/s; 878 / 143 / 67 µs; 558–592 µs; 152.0 MB\n"


def _keys(text: str) -> set[tuple[Decimal, str]]:
    return {figure.key for figure in figures.figures_in(text)}


def test_a_figure_is_a_number_with_a_unit_and_lists_and_ranges_count_each_number():
    assert _keys(MEASURED) == {(Decimal(1880), "jobs/s"), (Decimal(878), "µs"), (Decimal(143), "µs"),
                               (Decimal(67), "µs"), (Decimal(558), "µs"), (Decimal(592), "µs"),
                               (Decimal(152), "MB")}
    assert _keys("2,704 → 2,794 jobs/s, 37 min 29 s, 3,305 tps, 12 μs, 4 us") == {
        (Decimal(2704), "jobs/s"), (Decimal(2794), "jobs/s"), (Decimal(37), "min"), (Decimal(29), "s"),
        (Decimal(3305), "tps"), (Decimal(12), "µs"), (Decimal(4), "µs")}


def test_numbers_without_a_unit_or_inside_words_are_not_figures():
    assert _keys("4 workers, batch 10, ×1.06, 19 rules, p99 10, 3 sweeps, v1.5 minimal, 2026-12-01, 5373d78") == set()


def test_inline_code_link_targets_and_commands_are_definitions_not_figures():
    page = ("`--duration 30s` and `DURATION=30 s` are options; [the run](runs/12%20s.md)\n"
            "```\n$ make bench DURATION=45 s\nthroughput 597 jobs/s\n```\n")
    missing, _ = figures.unmeasured(page, set(), [])
    assert [(figure.value, figure.unit, figure.line) for figure in missing] == [(Decimal(597), "jobs/s", 4)]


def test_a_planted_wrong_figure_is_reported_and_the_right_one_is_not():
    measured = _keys(MEASURED)
    right = "The default design: 1,880 jobs/s, 878 / 143 / 67 µs at batch 1 / 10 / 100, 558–592 µs at 20 workers."
    assert figures.unmeasured(right, measured, [])[0] == []
    for planted in ("1,881 jobs/s", "878 / 144 / 67 µs", "558–593 µs"):
        page = right.replace(planted.replace("1,881", "1,880").replace("144", "143").replace("593", "592"), planted)
        assert page != right
        missing, _ = figures.unmeasured(page, measured, [])
        assert len(missing) == 1 and missing[0].text.endswith(planted.split(" ")[-1]), (planted, missing)


def _plant(page: str, measured: set[tuple[Decimal, str]]) -> tuple[str, str]:
    """The page with the last digit of its first measured figure in prose changed so that no measurement holds
    it, and that figure as written."""
    for match in figures.FIGURE.finditer(figures.prose(page)):
        if not all(figure.key in measured for figure in figures.figures_in(match.group(0))):
            continue
        at = match.end("numbers") - 1
        for step in range(1, 10):
            wrong = page[:at] + str((int(page[at]) + step) % 10) + page[at + 1:]
            if figures.figures_in(wrong[match.start():match.end()])[-1].key not in measured:
                return wrong, match.group(0)
    raise AssertionError("the page quotes no measured figure")


def test_a_planted_wrong_figure_in_the_readme_is_reported():
    """The README as committed, with one of its measured figures changed in its last digit."""
    readme = (figures.REPO / "README.md").read_text(encoding="utf-8")
    measured, allowed = figures.measured_keys(), figures.load_allowed()
    before, _ = figures.unmeasured(readme, measured, allowed)
    planted, right = _plant(readme, measured)
    after, _ = figures.unmeasured(planted, measured, allowed)
    assert len(after) == len(before) + 1, right
    assert {figure.key for figure in after} - {figure.key for figure in before}, right


def test_an_allowed_phrase_covers_its_figures_across_a_line_break():
    allowed = [figures.Allowed("lagged (p99 over 10 ms)", "the trust rule's limit, a definition")]
    missing, used = figures.unmeasured("its event loop lagged (p99\nover 10 ms); 11 ms", set(), allowed)
    assert [(figure.value, figure.unit) for figure in missing] == [(Decimal(11), "ms")]
    assert used == {"lagged (p99 over 10 ms)"}


def test_an_allowed_entry_needs_a_reason(tmp_path):
    path = tmp_path / "allowed.toml"
    path.write_text('[[allowed]]\nphrase = "every 100 ms"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="needs a phrase and a reason"):
        figures.load_allowed(path)


def test_a_measurement_section_with_figures_names_its_commit_and_command():
    page = ("# Measurements: x\n\nOn a 2-core machine.\n\n"
            "## Named (commit `abc1234`, `make calibrate`)\n\n3,305 tps\n\n"
            "### Inherits both\n\n2,874.7 jobs/s\n\n"
            "## No commit: `make bench`\n\n597 jobs/s\n\n"
            "## No command, at `def5678`\n\n133 ms\n\n"
            "## No figures\n\nprose only\n")
    assert figures.unrecorded_sections(page) == ["line 13: No commit: `make bench` (no commit)",
                                                 "line 17: No command, at `def5678` (no command)"]
    assert figures.page_names_machine(page) and not figures.page_names_machine("# x\n\n1 s\n")


def test_a_table_column_whose_header_names_the_unit_holds_figures_of_that_unit():
    page = ("| index | jobs/s | server CPU µs / job | WAL B / job |\n| --- | --- | --- | --- |\n"
            "| partial | 1,880 / 1,930 | 878 (847–914) | 652 |\n\nafter the table 5\n")
    assert {figure.key for figure in figures.table_figures(page)} == {
        (Decimal(1880), "jobs/s"), (Decimal(1930), "jobs/s"), (Decimal(878), "µs"), (Decimal(847), "µs"),
        (Decimal(914), "µs")}
    measured = {figure.key for figure in figures.table_figures(page)}
    missing, _ = figures.unmeasured(page.replace("878 (", "879 ("), measured, [])
    assert [(figure.value, figure.unit) for figure in missing] == [(Decimal(879), "µs")]


def _pages() -> list:
    """README.md and the docs pages that explain the tool: not the measurements, not the generated reference."""
    docs = figures.REPO / "docs"
    return [figures.REPO / "README.md",
            *sorted(path for path in docs.rglob("*.md")
                    if not path.is_relative_to(docs / "measurements") and not path.is_relative_to(docs / "reference"))]


def test_every_figure_in_the_readme_and_docs_prose_is_measured_or_allowed():
    measured, allowed = figures.measured_keys(), figures.load_allowed()
    missing, used = [], set()
    for path in _pages():
        found, page_used = figures.unmeasured(path.read_text(encoding="utf-8"), measured, allowed)
        used |= page_used
        missing += [f"{path.relative_to(figures.REPO)}:{figure.line}: {figure.text}" for figure in found]
    assert missing == [], ("a figure no measurement file holds: put it under docs/measurements/ with its command "
                           "and commit, link to it, or (a definition or an example) allow it in "
                           "tests/figures_allowed.toml with its reason")
    assert sorted(entry.phrase for entry in allowed if entry.phrase not in used) == [], \
        "allowed phrases that no page uses any more: delete them"


def test_every_measurement_section_with_figures_names_its_commit_and_command_and_every_page_its_machine():
    pages = sorted(figures.MEASUREMENTS.glob("*.md"))
    assert len(pages) >= 10
    problems = [f"{path.name} {problem}" for path in pages for problem in figures.unrecorded_sections(path.read_text(encoding="utf-8"))]
    problems += [f"{path.name}: names no machine (its cores)" for path in pages
                 if not figures.page_names_machine(path.read_text(encoding="utf-8"))]
    assert problems == []
