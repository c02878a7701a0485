"""Tests for bench.report.compare_page: the sweep comparison report and ``qbench compare``, from fixture
result files only (no database). Fixtures: tests/fixtures/sweep_small, sweep_scaling (made by
tests/fixtures/make_sweep_fixtures.py) and run directories inside them."""

from __future__ import annotations

import csv
import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli.main import main as qbench_main
from bench.report.compare_page import CompareError, compare
from bench.report.run_page import render_report
from bench.report.sweep_page import render_sweep_report

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _generator():
    """The fixture generator module (for its generating USL parameters)."""
    spec = importlib.util.spec_from_file_location("make_sweep_fixtures", FIXTURES / "make_sweep_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / "sweep_small", tmp_path / "sweep_small"))


@pytest.fixture
def scaling(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / "sweep_scaling", tmp_path / "sweep_scaling"))


def _rows(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _write_rows(sweep_dir: Path, rows: list[dict]) -> None:
    """Write cells.csv and make each run's summary.json say the same (suspect, invariants,
    saturated), as a real sweep's files do: whether a run is trusted is read from its summary."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with (sweep_dir / "cells.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        path = sweep_dir / (r.get("run_dir") or f"runs/{r['run_id']}") / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text())
        if str(r.get("suspect")).lower() == "true" and not summary.get("suspect_reasons"):
            summary.update(suspect=True, suspect_reasons=["marked suspect by the test"])
        if str(r.get("invariants_ok")).lower() == "false" and all(v == 0 for v in summary["invariants"].values()):
            summary["invariants"] = {**summary["invariants"], "double_claims": 1}
        if "saturated" in r:
            summary["saturated"] = str(r["saturated"]).lower() == "true"
        path.write_text(json.dumps(summary))


def _expected_best(sweep_dir: Path) -> tuple[str, float, dict]:
    """(cell_id, mean throughput, first row) of the best trustworthy cell, computed from cells.csv
    and each run's summary.json: all runs done, complete, not suspect, invariants ok."""
    by_cell: dict[str, list[dict]] = {}
    for row in _rows(sweep_dir):
        by_cell.setdefault(row["cell_id"], []).append(row)

    def trusted(row: dict) -> bool:
        summary = sweep_dir / row["run_dir"] / "summary.json"
        complete = summary.is_file() and json.loads(summary.read_text()).get("complete") is True
        return (row["status"] == "done" and complete and row["suspect"] == "false"
                and row["invariants_ok"] == "true")

    means = {cid: sum(float(r["throughput_jobs_per_s"]) for r in rows) / len(rows)
             for cid, rows in by_cell.items() if all(trusted(r) for r in rows)}
    best = max(means, key=means.get)
    return best, means[best], by_cell[best][0]


def _answer(page: str) -> str:
    m = re.search(r'<p class="sentence">(.*?)</p>', page, re.S)
    assert m, "capacity answer missing"
    return html.unescape(m.group(1))


def _render(sweep_dir: Path) -> str:
    return render_sweep_report(sweep_dir).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- sweep report


def test_sweep_report_renders_from_files_alone_without_a_database(small):
    """In a fresh interpreter: rendering imports no database module (data flows one way)."""
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "render_child.py"), str(small)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == str(small / "compare.html")
    assert out[1] == "[]", f"database modules imported: {out[1]}"
    page = (small / "compare.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 1  # history is varied; workers and batch are not
    png = small / "plots" / "claim_latency_vs_history.png"
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert not (small / "plots" / "throughput_vs_workers.png").exists()
    assert not (small / "plots" / "throughput_vs_batch.png").exists()


def test_a_sweep_of_the_relays_setting_draws_throughput_and_the_measured_round_trip(small):
    """The fixture's history axis rewritten as NET_DELAY_MS 0 / 1 / 2 with a measured round trip per run: the page
    draws throughput and claim latency against it, and no history figure."""
    setting = {"0": 0, "100000": 1, "1000000": 2}
    meta = json.loads((small / "sweep.json").read_text())
    meta["axes"] = {"index": meta["axes"]["index"], "net_delay_ms": [0, 1, 2]}
    for cell in meta["cells"]:
        cell["params"]["net_delay_ms"] = setting[str(cell["params"].pop("history"))]
    (small / "sweep.json").write_text(json.dumps(meta))
    rows = _rows(small)
    for row in rows:
        row["net_delay_ms"] = setting[row.pop("history")]
        row["round_trip_p50_us"] = 150 + 4400 * row["net_delay_ms"]
    _write_rows(small, rows)
    page = _render(small)
    assert (small / "plots" / "throughput_vs_round_trip.png").read_bytes().startswith(PNG_SIGNATURE)
    assert 'id="fig-throughput_vs_round_trip"' in page and "the round trip each run measured" in page
    assert not (small / "plots" / "claim_latency_vs_history.png").exists()


@pytest.mark.parametrize("name", ["sweep_small", "sweep_scaling"])
def test_capacity_sentence_names_the_best_trustworthy_cell(tmp_path, name):
    sweep_dir = Path(shutil.copytree(FIXTURES / name, tmp_path / name))
    cell_id, mean, row = _expected_best(sweep_dir)
    sentence = _answer(_render(sweep_dir))
    assert f"about {mean:,.0f} jobs/s" in sentence, (cell_id, mean, sentence)
    assert f"policy {row['policy']}" in sentence and f"index {row['index']}" in sentence
    assert f"batch {row['batch']}" in sentence and f"using {row['workers']} workers" in sentence
    assert "p99 claim" in sentence and " ms " in sentence


def test_cell_with_invariants_not_ok_is_never_chosen(scaling):
    rows = _rows(scaling)
    broken = {r["cell_id"] for r in rows if r["invariants_ok"] == "false"}
    assert broken, "fixture must hold a run whose invariants are not ok"
    # The broken cell has the highest raw mean throughput: a naive pick would choose it.
    raw = {}
    for r in rows:
        raw.setdefault(r["cell_id"], []).append(float(r["throughput_jobs_per_s"]))
    raw_best = max(raw, key=lambda c: sum(raw[c]) / len(raw[c]))
    assert raw_best in broken
    sentence = _answer(_render(scaling))
    broken_mean = sum(raw[raw_best]) / len(raw[raw_best])
    assert f"{broken_mean:,.0f}" not in sentence

    # Break the chosen cell too: the answer moves to the next trustworthy cell.
    chosen, _, _ = _expected_best(scaling)
    for r in rows:
        if r["cell_id"] == chosen:
            r["invariants_ok"] = "false"
    _write_rows(scaling, rows)
    next_id, next_mean, _ = _expected_best(scaling)
    assert next_id != chosen
    page = _render(scaling)
    assert f"about {next_mean:,.0f} jobs/s" in _answer(page)
    assert re.search(rf'<tr class="bad"><th>{chosen}</th>', page), "the broken cell must be red"


def test_no_trustworthy_cell_says_so_without_a_figure(small):
    rows = _rows(small)
    for r in rows:
        r["suspect"] = "true"
    _write_rows(small, rows)
    sentence = _answer(_render(small))
    assert "No cell of this sweep gives a trustworthy capacity figure" in sentence
    assert "jobs/s" not in sentence


def test_capacity_json_rate_replaces_the_sweep_figure(small):
    (small / "capacity.json").write_text(json.dumps({
        "design": {"engine": "mariadb", "policy": "skip_locked", "workers": 32, "batch": 5, "index": "composite",
                   "layout": "same", "history": 0, "work_ms": 0},
        "steps": [{"rate_jobs_per_s": 2000.0, "run_dir": "runs/x", "oldest_age_slope_s_per_s": 0.0,
                   "saturated": False, "throughput_jobs_per_s": 1999.0, "claim_p99_us": 4100}],
        "sustainable_rate_jobs_per_s": 2345.6, "claim_p99_us_at_rate": 4870, "workers": 32,
        "sentence": "…"}))
    sentence = _answer(_render(small))
    assert sentence == ("With design policy skip_locked, index composite, layout same, batch 5, this MariaDB "
                        "database sustains about 2,346 jobs/s at p99 claim 4.87 ms using 32 workers.")


def test_usl_table_recovers_the_generating_sigma_and_kappa(scaling):
    truth = _generator().USL_TRUTH
    page = _render(scaling)
    for policy, params in truth.items():
        m = re.search(rf'<tr data-series="policy {policy}, batch 1">(.*?)</tr>', page, re.S)
        assert m, f"USL row for {policy} missing"
        row = m.group(1)
        sigma = float(re.search(r'class="num sigma">([0-9.e+-]+)', row).group(1))
        kappa = float(re.search(r'class="num kappa">([0-9.e+-]+)', row).group(1))
        mape = float(re.search(r'class="num mape">([0-9.]+)', row).group(1))
        assert abs(sigma - params["sigma"]) < 0.02, (policy, sigma)
        assert abs(kappa - params["kappa"]) / params["kappa"] < 0.25, (policy, kappa)
        assert mape < 5.0
    # A series measured at one worker count cannot be fitted, and the table says why.
    m = re.search(r'<tr data-series="policy skip_locked, batch 10">(.*?)</tr>', page, re.S)
    assert m and "needs at least 3" in m.group(1)
    assert (scaling / "plots" / "throughput_vs_workers.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (scaling / "plots" / "throughput_vs_batch.png").read_bytes().startswith(PNG_SIGNATURE)


def test_incomplete_sweep_shows_banner_with_missing_cells(small):
    meta = json.loads((small / "sweep.json").read_text())
    meta["complete"], meta["ended_at"] = False, None
    (small / "sweep.json").write_text(json.dumps(meta))
    rows = [r for r in _rows(small) if r["cell_id"] not in ("c005", "c006")]
    _write_rows(small, rows)
    page = _render(small)
    banner = re.search(r'<div class="banner".*?</div>', page, re.S)
    assert banner and "incomplete sweep: 2 of 6 cells are missing" in banner.group(0)


def test_complete_sweep_has_no_incomplete_banner(small):
    assert "incomplete sweep" not in _render(small)


def test_failed_suspect_and_broken_runs_are_red(small, scaling):
    page = _render(small)
    for r in _rows(small):
        if r["status"] != "done" or r["suspect"] == "true":
            assert re.search(rf'<tr class="bad"><th>{r["cell_id"]}</th><td class="num">{r["rep"]}</td>', page), r
    assert "1 run failed" in page
    page = _render(scaling)
    broken = [r for r in _rows(scaling) if r["invariants_ok"] == "false"]
    for r in broken:
        assert re.search(rf'<tr class="bad"><th>{r["cell_id"]}</th><td class="num">{r["rep"]}</td>', page)
    assert "invariants not ok in 1 run" in page


def test_tables_show_means_with_confidence_intervals(small):
    page = _render(small)
    rows = [r for r in _rows(small) if r["cell_id"] == "c004"]
    values = [float(r["throughput_jobs_per_s"]) for r in rows]
    mean = sum(values) / len(values)
    cell = re.search(r'<th>c004</th>.*?</tr>', page, re.S).group(0)
    assert re.search(rf"{mean:,.0f} \([0-9,]+–[0-9,]+\)", cell), cell
    assert "(n = 1)" in page  # the cell with one finished repetition has no interval


def test_plan_summary_highlights_generic_plan_losing_the_index(small):
    page = html.unescape(_render(small))
    warnings = re.findall(r"⚠ (c\d+): the generic plan stops using jobs_pending_claim_order_idx", page)
    partial = sorted({r["cell_id"] for r in _rows(small) if r["index"] == "partial"})
    assert sorted(warnings) == partial
    assert "Index Scan using jobs_pending_claim_order_idx on jobs" in page


def test_run_table_links_each_run_report_relatively(small):
    row = _rows(small)[0]
    render_report(small / row["run_dir"])
    page = _render(small)
    assert f'<a href="{row["run_dir"]}/report.html">{row["run_id"]}</a>' in page
    other = _rows(small)[1]
    assert f"qbench report {other['run_dir']}" in page  # no report.html yet: says how to make one


def test_sizes_table_before_and_after(small):
    page = _render(small)
    sizes = re.search(r'<table id="sizes">.*?</table>', page, re.S)
    assert sizes and "MiB" in sizes.group(0) and "table after" in sizes.group(0)


# --------------------------------------------------------------------------- compare A vs B


def _two_runs(sweep_dir: Path) -> tuple[Path, Path]:
    rows = [r for r in _rows(sweep_dir) if r["status"] == "done"]
    return sweep_dir / rows[0]["run_dir"], sweep_dir / rows[-1]["run_dir"]


def test_qbench_compare_two_runs_prints_table_and_report_path(small):
    a, b = _two_runs(small)
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "compare", str(a), str(b)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    header = next(line for line in lines if line.startswith("metric"))
    for column in ("A", "B", "rel. diff", "p-value", "significant"):
        assert column in header
    assert any(line.startswith("throughput ") for line in lines)
    assert "autocorrelated" in proc.stdout
    assert lines[-1].startswith("report: ")
    page = Path(lines[-1].removeprefix("report: "))
    assert page.is_absolute() and page.is_file()
    assert 'src="data:image/png;base64,' in page.read_text(encoding="utf-8")


def test_compare_run_vs_run_relative_difference_and_welch(small):
    a, b = _two_runs(small)
    text, page = compare(a, b, small / "out" / "pair.html")
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    rel = (sb["throughput_jobs_per_s"] - sa["throughput_jobs_per_s"]) / sa["throughput_jobs_per_s"]
    line = next(line for line in text.splitlines() if line.startswith("throughput "))
    assert f"{rel * 100:+.1f} %" in line
    assert "yes" in line  # none/0 vs partial/1M: ~75 vs ~3,300 jobs/s
    assert page == small / "out" / "pair.html"
    assert (small / "out" / "plots" / "pair_relative_difference.png").read_bytes().startswith(PNG_SIGNATURE)


def test_compare_sweep_vs_sweep_matches_cells_and_falls_back_for_single_reps(small, tmp_path):
    other = Path(shutil.copytree(small, tmp_path / "other"))
    text, _ = compare(small, other)
    assert "index partial, history 1,000,000: throughput" in text
    assert "2/2 reps" in text
    assert "single repetition" in text and "per-second" in text  # c003 has one finished run


@pytest.mark.parametrize("args, arg_name", [
    (("RUN", "SWEEP"), "RUN_OR_SWEEP_B"),
    (("/nonexistent/run", "RUN"), "RUN_OR_SWEEP_A"),
    (("RUN", "/nonexistent/run"), "RUN_OR_SWEEP_B"),
    (("RUN", "EMPTY"), "RUN_OR_SWEEP_B"),
])
def test_qbench_compare_bad_arguments_exit_2_with_one_line(small, tmp_path, capsys, args, arg_name):
    run, _ = _two_runs(small)
    (tmp_path / "empty").mkdir()
    subst = {"RUN": str(run), "SWEEP": str(small), "EMPTY": str(tmp_path / "empty")}
    status = qbench_main(["compare", *(subst.get(a, a) for a in args)])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"qbench: {arg_name}: " in err
    with pytest.raises(CompareError):
        compare(*(subst.get(a, a) for a in args))


def test_qbench_sweep_report_prints_path(small, capsys):
    assert qbench_main(["sweep-report", str(small)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"report: {(small / 'compare.html').resolve()}"


def test_qbench_sweep_report_on_a_run_directory_exits_2(small, capsys):
    run, _ = _two_runs(small)
    assert qbench_main(["sweep-report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qbench: SWEEP_DIR: ") and len(err.strip().splitlines()) == 1


def test_compare_two_sweeps_without_a_common_cell_is_refused(small, scaling, capsys):
    """Nothing to compare is an error naming B, not an empty table."""
    assert qbench_main(["compare", str(small), str(scaling)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qbench: RUN_OR_SWEEP_B: no cell of") and len(err.strip().splitlines()) == 1


def test_saturated_cell_is_never_the_capacity_answer(small):
    """A run whose open-loop arrivals outpaced the workers measured a queue falling behind:
    its cell is flagged and the capacity answer moves to another cell."""
    def chosen() -> str:
        page = render_sweep_report(small).read_text()
        return re.search(r"Cell (c\d+) \(", page).group(1), page

    before, _ = chosen()
    rows = _rows(small)
    for r in rows:
        r["saturated"] = "True" if r["cell_id"] == before else "False"
    _write_rows(small, rows)
    after, page = chosen()
    assert after != before
    assert "saturated run" in page
