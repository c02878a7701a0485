"""The run's verdict (``bench.results.verdict``): the terminal's end block against a golden file made
from a real run's ``summary.json``, and the verdict card's colours and reasons for a clean run, a
suspect one, one with broken invariants and one that missed its SLO (in the rendered report too)."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
from pathlib import Path

import pytest

from bench.report.run_page import render_report
from bench.results import slo
from bench.results.verdict import cost_line, end_block, items

FIXTURES = Path(__file__).parent / "fixtures"
SUMMARY = json.loads((FIXTURES / "verdict" / "summary.json").read_text())


def test_the_end_block_matches_its_golden_file():
    golden = (FIXTURES / "verdict" / "end_block.txt").read_text().splitlines()
    assert end_block(SUMMARY) == golden


def test_the_end_block_reads_its_numbers_from_the_summary():
    lines = end_block(SUMMARY)
    claim = next(line for line in lines if line.startswith("claim "))
    cells = claim.split()
    claims = round(SUMMARY["claims_per_s"] * SUMMARY["measured_s"])
    assert cells[1] == f"{claims:,}"
    p99 = re.split(r"\s{2,}", claim)[5]
    assert p99.endswith(" ms") and float(p99[:-3]) == pytest.approx(SUMMARY["claim_latency_us"]["p99"] / 1000, abs=0.006)
    # one aligned table: every row's p99 column ends where the header's does
    end = lines[1].index("p99") + len("p99")
    assert all(line[end - 7:end].strip().endswith("ms") for line in lines[2:5]), lines[1:5]
    assert [len(re.split(r"\s{2,}", line.strip())) for line in lines[2:5]] == [8, 8, 7]


def test_the_operations_rows_count_statements_as_counted():
    """With the counts a summary carries (``claims``; ``completions``, one per batch), the claim and completion
    rows show them and their rates, not a rate times the window nor the jobs completed."""
    summary = {**SUMMARY, "claims": 3767, "completions": 377, "jobs_completed": 3770}
    rows = {line.split()[0]: line.split()[1:3] for line in end_block(summary)[2:4]}
    assert rows == {"claim": ["3,767", "942"], "completion": ["377", "94.2"]}


def _card(summary: dict) -> dict[str, tuple[bool | None, str, str]]:
    return {i.name: (i.ok, i.value, i.reason) for i in items(summary)}


def test_a_clean_run_is_green_and_each_fault_turns_its_item_red():
    clean = copy.deepcopy(SUMMARY)
    clean["slo"] = slo.judge("pickup_p99<=1s,claim_p99<=1s", clean)
    card = _card(clean)
    assert card["SLO"][0] and card["invariants"][0] and card["trust"][0] and card["errors"][0]
    assert card["keeps up"][0] is True and card["pickup p99"][1] == "8.81 ms"

    suspect = copy.deepcopy(clean)
    suspect["suspect"], suspect["suspect_reasons"] = True, ["load generator CPU reached 97 % of a core"]
    suspect["slo"] = slo.judge("pickup_p99<=1s", suspect)
    card = _card(suspect)
    assert card["trust"][:2] == (False, "suspect") and "97 %" in card["trust"][2]
    assert card["SLO"][:2] == (False, "inconclusive") and "97 %" in card["SLO"][2]

    broken = copy.deepcopy(clean)
    broken["invariants"]["lost_jobs"] = 3
    card = _card(broken)
    assert card["invariants"][:2] == (False, "broken") and "3 lost" in card["invariants"][2]

    missed = copy.deepcopy(clean)
    missed["slo"] = slo.judge("claim_p99<=100us", missed)
    card = _card(missed)
    assert card["SLO"][:2] == (False, "fail") and "claim_p99<=100us measured 1.67 ms" in card["SLO"][2]


@pytest.mark.parametrize("case", ["clean", "missed"])
def test_the_report_opens_with_the_verdict_card(case, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "verdict", run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["slo"] = slo.judge("claim_p99<=10s" if case == "clean" else "claim_max<=1us", summary)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    page = render_report(run_dir).read_text()
    card = page[page.index('id="verdict"'):page.index('id="operations"')]
    assert page.index('id="verdict"') < page.index("<h2>")
    slo_item = re.search(r'class="item (\w+)" data-name="SLO"', card).group(1)
    assert slo_item == ("ok" if case == "clean" else "failed")
    assert 'class="item ok" data-name="invariants"' in card


def test_every_figure_has_a_title_and_no_series_hides_under_another(tmp_path):
    """At batch 1 with no empty claim, claims/s equals jobs/s: the two must still be told apart."""
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.report.run_data import load_run
    from bench.report.run_figures import FIGURES, draw_figure, figure_label

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "verdict", run_dir)
    _, summary, df = load_run(run_dir)
    df["claims"], df["empty_claims"] = df["jobs_completed"], 0
    for name, title, _, draw in FIGURES:
        fig = draw_figure(draw, df, summary, f"{title}: {figure_label(summary)}")
        try:
            assert summary["run_id"] in fig._suptitle.get_text() and title in fig._suptitle.get_text(), name
            for ax in fig.axes:
                lines = [ln for ln in ax.get_lines() if len(ln.get_ydata()) > 1]
                for i, a in enumerate(lines):
                    for b in lines[i + 1:]:
                        same = np.array_equal(np.asarray(a.get_ydata(), float), np.asarray(b.get_ydata(), float),
                                              equal_nan=True)
                        style = lambda ln: (ln.get_linestyle(), ln.get_marker(), ln.get_color())  # noqa: E731
                        assert not same or style(a) != style(b), (name, a.get_label(), b.get_label())
                        if same:
                            assert (a.get_linestyle(), a.get_marker()) != (b.get_linestyle(), b.get_marker()), \
                                f"{name}: {a.get_label()} and {b.get_label()} are equal and drawn alike"
        finally:
            plt.close(fig)


def test_the_oldest_age_caption_fits_the_run_mode(tmp_path):
    from bench.report.run_figures import CLOSED_LOOP_AGE_SENTENCE, OPEN_LOOP_AGE_SENTENCE

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "verdict", run_dir)
    assert OPEN_LOOP_AGE_SENTENCE in render_report(run_dir).read_text()
    closed = tmp_path / "closed"
    shutil.copytree(FIXTURES / "run_small", closed)
    page = html.unescape(render_report(closed).read_text())
    assert CLOSED_LOOP_AGE_SENTENCE in page and OPEN_LOOP_AGE_SENTENCE not in page


def test_the_percentile_spectrum_is_read_from_the_runs_histogram_logs():
    from bench.results.histograms import read_hlog, spectrum

    claim = read_hlog(FIXTURES / "verdict" / "histograms" / "claim_latency_us.hlog")
    assert claim.get_total_count() == round(SUMMARY["claims_per_s"] * SUMMARY["measured_s"])
    points = dict(spectrum(claim))
    assert points[99.0] == pytest.approx(SUMMARY["claim_latency_us"]["p99"], rel=0.002)
    assert points[100.0] == pytest.approx(SUMMARY["claim_latency_us"]["max"], rel=0.002)
    assert 99.99 not in points  # 3,766 claims cannot resolve the 99.99th percentile
    assert read_hlog(FIXTURES / "verdict" / "histograms" / "no_such.hlog") is None


def test_the_spectrum_leaves_pickup_out_of_a_closed_loop_drain(tmp_path):
    """In a drain, pickup is the seeded backlog's age: the spectrum must not draw it as a latency."""
    import matplotlib.pyplot as plt

    from bench.report.run_data import load_run
    from bench.report.run_figures import _spectrum_spec, draw_figure

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "verdict", run_dir)
    _, summary, df = load_run(run_dir)
    for open_loop, expected in ((True, ["claim", "completion", "pickup"]), (False, ["claim", "completion"])):
        _, title, _, draw = _spectrum_spec(run_dir, open_loop)
        fig = draw_figure(draw, df, summary, title)
        try:
            assert [ln.get_label() for ln in fig.axes[0].get_lines()] == expected
        finally:
            plt.close(fig)


def test_the_cost_per_job_line_reads_the_summarys_figures():
    """With ``cost_per_job`` measured, one line after the oldest age carries its figures; without, none; the
    server CPU from /proc when measured, else the statements' time, said not to be CPU time."""
    cost = {"wal_bytes": 661.1, "wal_records": 8.58, "wal_fpi": 0.0, "wal_fpi_bytes": 36.2, "tuples_updated": 2.025,
            "buffers_hit": 59.7, "buffers_read": 0.014, "hot_update_share": 0.0, "server_cpu_us": 385.7,
            "statements_exec_us": 140.8}
    lines = end_block({**SUMMARY, "cost_per_job": cost})
    assert lines[lines.index(next(l for l in lines if l.startswith("oldest eligible age"))) + 1] == (
        "cost per job: 661 B of WAL (36.2 B of it full-page images, 8.58 records), 386 µs of server CPU, "
        "2.02 row updates (0 % HOT), 59.7 buffers hit and 0.0140 read")
    remote = end_block({**SUMMARY, "cost_per_job": {**cost, "server_cpu_us": None, "wal_fpi_bytes": None}})
    assert ("cost per job: 661 B of WAL (8.58 records), 141 µs in statements (pg_stat_statements; not CPU time), "
            "2.02 row updates (0 % HOT), 59.7 buffers hit and 0.0140 read") in remote
    assert not any(line.startswith("cost per job") for line in end_block(SUMMARY))
    # MariaDB: its log named, what it has no counter for left out, row inserts where counted (rows read never:
    # the monitor's own counts dominate them)
    maria = {"wal_bytes": 1594.6, "wal_records": None, "wal_fpi": None, "tuples_inserted": 1.008,
             "tuples_updated": 2.015, "tuples_hot_updated": None, "tuples_deleted": 0.0, "buffers_hit": 96.2,
             "buffers_read": 0.0, "rows_read": 28.28, "hot_update_share": None, "log": "InnoDB redo"}
    assert cost_line({"cost_per_job": maria}) == (
        "1,595 B of InnoDB redo, 2.02 row updates, 1.01 row inserts, 96.2 buffers hit and 0 read")
