"""Tests for bench.report.run_page: render the small fixture run and check what could be wrong."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.report.format import fmt_num
from bench.report.run_page import ReportError, render_report

FIXTURE = Path(__file__).parent / "fixtures" / "run_small"
PLOT_NAMES = ("throughput", "claim_latency", "claim_vs_table", "loop_lag", "oldest_age", "locks_running",
              "dead_tuples", "latency_spectrum")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    dst = tmp_path / "run_small"
    shutil.copytree(FIXTURE, dst)
    return dst


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _edit_summary(run_dir: Path, **changes) -> None:
    data = _summary(run_dir)
    data.update(changes)
    (run_dir / "summary.json").write_text(json.dumps(data))


def _row_cell(page: str, label: str) -> str:
    """The <td ...>value</td> that follows the <th>label</th> of a summary row."""
    m = re.search(rf"<th>{re.escape(label)}</th>\s*(<td[^>]*>[^<]*</td>)", page)
    assert m, f"row {label!r} not found"
    return m.group(1)


def test_render_writes_report_and_returns_its_path(run_dir):
    out = render_report(run_dir)
    assert out == run_dir / "report.html"
    assert out.is_file()


def test_report_embeds_four_png_figures(run_dir):
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == len(PLOT_NAMES)


def test_throughput_and_counts_formatted_from_summary(run_dir):
    s = _summary(run_dir)
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert f"{s['throughput_jobs_per_s']:,.1f} jobs/s" in page
    assert f"{s['claims_per_s']:,.1f} claims/s" in page
    assert f"{s['jobs_completed']:,}" in page


def test_the_one_number_format_and_its_missing_value_rule():
    """fmt_num, used by the run, sweep and compare pages: fixed decimals, thousands, a unit; None, NaN and
    the text "nan" (a CSV cell) are 'n/a' without the unit; other text as it is."""
    assert fmt_num(1234.5, 1, "s") == "1,234.5 s"
    assert fmt_num(1234.5) == "1,234"  # round half to even, as Python's format rounds 1234.5
    assert fmt_num("7", 2) == "7.00"
    for missing in (None, float("nan"), "nan", np.nan):
        assert fmt_num(missing, 1, "jobs/s") == "n/a"
    assert fmt_num("failed: timeout", 1, "s") == "failed: timeout"


def test_claim_latency_shown_in_ms_with_microsecond_precision(run_dir):
    s = _summary(run_dir)
    page = render_report(run_dir).read_text(encoding="utf-8")
    for stat in ("p50", "p99", "max"):
        expected = f"{s['claim_latency_us'][stat] / 1000:,.3f} ms"
        assert expected in page, expected
    # the raw microsecond figure must not be presented as milliseconds
    assert f"{s['claim_latency_us']['p99']:,.3f} ms" not in page


def test_measured_work_is_shown_beside_the_configured_mean(run_dir):
    """The latency table has a row for the work as measured, headed by the configured mean, and the
    event-loop lag; both from summary.json. A fixture from before these keys shows neither row."""
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert "job work, measured" not in page and "event-loop lag (10 ms timer" not in page
    work = {"p50": 1777.0, "p95": 3935.0, "p99": 5899.0, "max": 154239.0, "mean": 2082.539}
    lag = {"p50": 727.0, "p95": 3021.0, "p99": 5371.0, "max": 147967.0, "mean": 1204.179}
    _edit_summary(run_dir, work_duration_us=work, work_expected_ms=1.0, loop_lag_us=lag, loop_lag_limit_us=10000)
    page = render_report(run_dir).read_text(encoding="utf-8")
    row = re.search(r"<th>job work, measured \(configured mean 1\.000 ms\)</th>(.*?)</tr>", page)
    assert row, "measured work row missing"
    assert [c for c in re.findall(r'<td class="num">([^<]*)</td>', row.group(1))] == [
        f"{work[k] / 1000:,.3f} ms" for k in ("p50", "p95", "p99", "max", "mean")]
    assert f"{lag['p99'] / 1000:,.3f} ms" in page


def test_suspect_banner_lists_reasons(run_dir):
    s = _summary(run_dir)
    assert s["suspect"] and s["suspect_reasons"]
    page = render_report(run_dir).read_text(encoding="utf-8")
    banner = re.search(r'<div class="banner".*?</div>', page, re.S)
    assert banner, "suspect run must show the red banner"
    for reason in s["suspect_reasons"]:
        assert html.escape(reason) in banner.group(0)


def test_interrupted_and_backlog_dry_banners(run_dir):
    _edit_summary(run_dir, suspect=False, suspect_reasons=[], complete=False,
                  backlog_exhausted=True)
    page = render_report(run_dir).read_text(encoding="utf-8")
    banner = re.search(r'<div class="banner".*?</div>', page, re.S).group(0)
    assert "interrupted run" in banner
    assert "backlog ran dry" in banner


def test_clean_run_has_no_banner(run_dir):
    clean = {k: 0 for k in _summary(run_dir)["invariants"]}
    _edit_summary(run_dir, suspect=False, suspect_reasons=[], complete=True,
                  backlog_exhausted=False, invariants=clean)
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert 'class="banner"' not in page


def test_broken_or_unchecked_invariants_make_a_banner(run_dir):
    """The fixture's over_claims = 2: the run cannot be trusted, and the banner says why."""
    _edit_summary(run_dir, suspect=False, suspect_reasons=[], complete=True, backlog_exhausted=False)
    banner = re.search(r'<div class="banner".*?</div>', render_report(run_dir).read_text(), re.S)
    assert banner and "invariants broken: over_claims = 2" in banner.group(0)
    _edit_summary(run_dir, invariants={k: None for k in _summary(run_dir)["invariants"]})
    banner = re.search(r'<div class="banner".*?</div>', render_report(run_dir).read_text(), re.S)
    assert banner and "invariants were not checked" in banner.group(0)


def test_a_summary_from_a_newer_format_is_refused_with_one_line(run_dir, capsys):
    from bench.cli.main import main

    _edit_summary(run_dir, format_version=99)
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RUN_DIR" in err[0] and "format_version 99" in err[0], err
    assert not (run_dir / "report.html").exists()


def test_nonzero_invariant_is_red_and_zero_is_not(run_dir):
    inv = _summary(run_dir)["invariants"]
    bad = [k for k, v in inv.items() if v]
    good = [k for k, v in inv.items() if not v]
    assert bad and good, "fixture needs both zero and non-zero invariants"
    page = render_report(run_dir).read_text(encoding="utf-8")
    for key in bad:
        cell = _row_cell(page, f"invariant: {key}")
        assert "bad" in cell and f">{inv[key]}<" in cell
    for key in good:
        assert "bad" not in _row_cell(page, f"invariant: {key}")


def test_max_rows_over_batch_flagged(run_dir):
    s = _summary(run_dir)
    assert s["max_rows_per_claim"] > s["config"]["batch"]
    cell = _row_cell(render_report(run_dir).read_text(encoding="utf-8"), "max rows per claim")
    assert "bad" in cell and f"batch {s['config']['batch']}" in cell


def test_report_is_self_contained(run_dir):
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page
    assert re.findall(r'src="(?!data:)', page) == []


def test_environment_and_config_shown(run_dir):
    run = json.loads((run_dir / "run.json").read_text())
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert f"{run['client']['memory_bytes'] / 2**30:,.1f} GiB" in page
    assert html.escape(run["dsn_masked"]) in page
    assert run["measured_start"] in page and run["measured_end"] in page
    for key in run["config"]:
        assert f"<th>{key}</th>" in page
    for key in run["server_settings"]:
        assert f"<th>{key}</th>" in page


def test_values_are_html_escaped(run_dir):
    run = json.loads((run_dir / "run.json").read_text())
    run["config"]["schema"] = "<b>evil</b>"
    (run_dir / "run.json").write_text(json.dumps(run))
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert "<b>evil</b>" not in page and "&lt;b&gt;evil&lt;/b&gt;" in page


def test_null_latencies_render_as_na(run_dir):
    _edit_summary(run_dir, claim_latency_us={k: None for k in ("p50", "p95", "p99", "max", "mean")})
    page = render_report(run_dir).read_text(encoding="utf-8")
    row = re.search(r"<th>claim latency</th>(.*?)</tr>", page, re.S).group(1)
    assert row.count(">n/a<") == 5


def test_plots_written_as_valid_pngs(run_dir):
    render_report(run_dir)
    for name in PLOT_NAMES:
        data = (run_dir / "plots" / f"{name}.png").read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        assert data[12:16] == b"IHDR"
        width, height = struct.unpack(">II", data[16:24])
        assert width > 300 and height > 150, (name, width, height)


@pytest.fixture
def plotted_lines(monkeypatch) -> dict:
    """Every line the run report draws, by label: (x, y) as float arrays, taken from each figure as it is saved."""
    import bench.report.run_figures as run_figures
    from bench.report.render import save_png

    lines = {}

    def recording_save_png(fig):
        for ax in fig.axes:
            for line in ax.get_lines():
                lines[line.get_label()] = (np.asarray(line.get_xdata(), dtype=float),
                                           np.asarray(line.get_ydata(), dtype=float))
        return save_png(fig)

    monkeypatch.setattr(run_figures, "save_png", recording_save_png)
    return lines


def test_a_missed_sample_is_a_gap_in_the_line_not_a_line_across(run_dir, plotted_lines):
    """A second without a sample (an empty cell in intervals.csv, no row in priority_ages.csv) is NaN in the
    plotted series, so the line breaks there; leaving the second out would join its neighbours straight across."""
    intervals = pd.read_csv(run_dir / "intervals.csv")  # the fixture's second 3 has no dead_tuples sample
    intervals["xmin_age"] = [float(t) if t != 5 else None for t in intervals["t_s"]]
    intervals.to_csv(run_dir / "intervals.csv", index=False)
    (run_dir / "priority_ages.csv").write_text("t_s,priority,oldest_eligible_age_s\n" + "".join(
        f"{t},{p},{0.5 * t + p}\n" for t in intervals["t_s"] if t != 4 for p in (0, 1)))
    render_report(run_dir)
    for label, gap in (("dead tuples in the queue table (rows, left)", 3),
                       ("oldest snapshot's xmin age (transactions, right)", 5),
                       ("priority 0", 4), ("priority 1", 4)):
        x, y = plotted_lines[label]
        assert list(x) == list(intervals["t_s"]), f"{label}: a second is missing from the series"
        assert np.isnan(y[x == gap]).all() and not np.isnan(y[x != gap]).any(), (label, y)


def test_header_only_intervals_still_render(run_dir):
    header = (run_dir / "intervals.csv").read_text().splitlines()[0]
    (run_dir / "intervals.csv").write_text(header + "\n")
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == len(PLOT_NAMES)


@pytest.mark.parametrize("name", ["summary.json", "run.json", "intervals.csv"])
def test_missing_required_file_raises_naming_it(run_dir, name):
    (run_dir / name).unlink()
    with pytest.raises(ReportError, match=re.escape(name)):
        render_report(run_dir)
    assert not (run_dir / "report.html").exists()


def test_report_error_is_value_error_and_names_bad_json(run_dir):
    (run_dir / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match="summary.json"):
        render_report(run_dir)


def test_missing_plotted_column_raises(run_dir):
    lines = (run_dir / "intervals.csv").read_text().splitlines()
    cols = lines[0].split(",")
    i = cols.index("lock_waiters")
    rows = [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]
    (run_dir / "intervals.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ReportError, match="lock_waiters"):
        render_report(run_dir)


def test_harness_cpu_is_red_above_the_runs_own_limit(run_dir):
    """The limit comes from the run's summary (the rule that made it suspect), not a copy in the report."""
    _edit_summary(run_dir, harness_cpu_max_pct=95.0, harness_cpu_limit_pct=90.0)
    assert 'value bad' in _row_cell(render_report(run_dir).read_text(), "harness CPU max")
    _edit_summary(run_dir, harness_cpu_limit_pct=99.0)
    assert 'value bad' not in _row_cell(render_report(run_dir).read_text(), "harness CPU max")


def test_the_machine_outside_the_run_is_red_above_the_runs_own_limit(run_dir):
    """The row shows the outside share's mean / max and steal, red by the limit the run was judged by."""
    _edit_summary(run_dir, outside_cpu_pct={"mean": 41.5, "max": 77.0}, steal_pct={"mean": 0.5, "max": 2.0},
                  outside_cpu_limit_pct=40.0)
    cell = _row_cell(render_report(run_dir).read_text(), "machine CPU outside the run mean / max, steal mean (% of all cores)")
    assert 'value bad' in cell and "41.5 % / 77.0 %, 0.5 %" in cell
    _edit_summary(run_dir, outside_cpu_limit_pct=45.0)
    assert 'value bad' not in _row_cell(render_report(run_dir).read_text(), "machine CPU outside the run mean / max, steal mean (% of all cores)")


def test_the_report_reads_the_engine_capabilities_the_run_recorded():
    """The flags come from run.json's ``engine_capabilities`` (put in the summary by load_run), whatever
    the engine's name; a run written before they were recorded gets what its engine had then."""
    from bench.report.run_format import engine_capability

    recorded = {"config": {"engine": "postgres"}, "engine_capabilities": {"vacuum": False, "statement_stats": False}}
    assert engine_capability(recorded, "vacuum") is False and engine_capability(recorded, "statement_stats") is False
    assert engine_capability(recorded, "table_rows_estimated") is False  # not recorded: postgres's then
    assert engine_capability({"config": {"engine": "mariadb"}}, "vacuum") is False
    assert engine_capability({"config": {"engine": "mariadb"}}, "table_rows_estimated") is True
    assert engine_capability({"config": {}}, "vacuum") is True
    assert engine_capability({}, "statement_stats") is True


def test_the_claim_latency_figure_draws_the_measured_round_trip_beside_the_claims():
    """Dotted: the probe's per-second round trip, in ms, when intervals.csv has it; not drawn when it does not."""
    import matplotlib.pyplot as plt

    from bench.report.run_plots import draw_claim_latency

    df = pd.DataFrame({"t_s": [0, 1, 2], "claim_p50_us": [5000, 5200, 5100], "claim_p95_us": [9000, 9100, 9200],
                       "claim_p99_us": [12000, 13000, 12500], "round_trip_p50_us": [4400, 4500, 4450]})
    fig, ax = plt.subplots()
    draw_claim_latency(ax, df, {})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["round trip p50 (the probe's)"].get_ydata()) == [4.4, 4.5, 4.45]
    assert lines["round trip p50 (the probe's)"].get_linestyle() == ":"
    ax.clear()
    draw_claim_latency(ax, df.drop(columns="round_trip_p50_us"), {})
    assert "round trip p50 (the probe's)" not in {line.get_label() for line in ax.get_lines()}
    plt.close(fig)
