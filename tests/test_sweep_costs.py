"""Cost per job in a sweep, against the real PostgreSQL: each cells.csv row carries its run's ``summary.json``
``cost_per_job`` (``cost_<key>``), and the comparison page draws one figure per cost and a table whose means and
95 % CIs are those of the runs' own figures; a sweep whose runs measured no cost shows neither."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import qbench

from bench.report.format import ci_text
from bench.report.sweep_costs import COSTS, FIGURES
from bench.report.sweep_page import render_sweep_report
from bench.results.cell_columns import COST_COLUMNS
from bench.results.sweep import Stat


def _cells(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def cost_sweep(tmp_path_factory, dsn) -> Path:
    """The smallest sweep with confidence intervals: batch 1 and 10, two repetitions of 2 s each."""
    tmp = tmp_path_factory.mktemp("cost_sweep")
    spec = tmp / "cost.toml"
    spec.write_text('description = "test"\nworkload = "default"\nrepetitions = 2\n'
                    '[fixed]\nworkers = 4\nduration = "2s"\nwarmup = "1s"\n[matrix]\nbatch = [1, 10]\n')
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp / "results"), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sweep_dir,) = (tmp / "results" / "sweeps").iterdir()
    return sweep_dir


@pytest.mark.slow
def test_each_cell_row_carries_its_runs_cost_per_job(cost_sweep):
    """Every figure of each run's cost_per_job (not its labels ``source`` and ``log``) is in its cells.csv row as
    ``cost_<key>``, the same number, and every cost column is one of them."""
    rows = _cells(cost_sweep)
    assert len(rows) == 4 and all(r["status"] == "done" for r in rows)
    for row in rows:
        cost = json.loads((cost_sweep / row["run_dir"] / "summary.json").read_text())["cost_per_job"]
        figures = {k: v for k, v in cost.items() if not isinstance(v, str)}  # not its labels: source, log
        assert {f"cost_{k}" for k in figures} == set(COST_COLUMNS), (sorted(figures), COST_COLUMNS)
        for key, value in figures.items():  # a figure the run could not read (None) is an empty cell
            assert (row[f"cost_{key}"] == "" if value is None else float(row[f"cost_{key}"]) == value), (key, value)
        for key in ("wal_bytes", "tuples_updated", "buffers_hit", "server_cpu_us"):  # measured here, the server local
            assert float(row[f"cost_{key}"]) > 0, key
        assert row["fillfactor"] == "100"


@pytest.mark.slow
def test_the_page_draws_each_cost_with_the_runs_own_confidence_intervals(cost_sweep):
    """One figure per cost with its 95 % CI caption, and the cost table's 'mean (low–high)' per cell equal to
    the mean and CI of the sums the test takes from the runs' summary.json files."""
    page = (cost_sweep / "compare.html").read_text(encoding="utf-8")
    by_cell: dict[str, list[dict]] = {}
    for row in _cells(cost_sweep):
        by_cell.setdefault(row["cell_id"], []).append(
            json.loads((cost_sweep / row["run_dir"] / "summary.json").read_text())["cost_per_job"])
    costs = [c for cell in by_cell.values() for c in cell]
    measured = [cost for cost in COSTS if any(None not in (c[k] for k in cost[2]) for c in costs)]
    assert {c["log"] for c in costs} == {"WAL"}
    assert {"wal_bytes", "row_versions", "buffers", "hot_update_share", "server_cpu_us"} <= {n for n, _, _ in measured}
    for name, label, keys in FIGURES:
        figure = re.search(rf'<figure id="fig-cost_{name}">(.*?)</figure>', page, re.S)
        if (name, label, keys) not in measured:
            assert figure is None, name
            continue
        assert figure and "95 % confidence interval" in figure.group(1) and "against batch" in figure.group(1), name
        assert (cost_sweep / "plots" / f"cost_{name}.png").stat().st_size > 1000
    table = re.search(r'<table id="costs">(.*?)</table>', page, re.S).group(1)
    for cell_id, runs in by_cell.items():
        cells_text = re.search(rf"<th>{cell_id}</th>(.*?)</tr>", table, re.S).group(1)
        shown = re.findall(r'<td class="num">([^<]*)</td>', cells_text)
        expected = [ci_text(Stat.of([sum(c[k] for k in keys) for c in runs if None not in (c[k] for k in keys)]))
                    for _, _, keys in measured]
        assert shown == expected, (cell_id, shown, expected)
        assert not any("n = 1" in text for text in shown)  # two repetitions: an interval, not a lone mean


@pytest.mark.slow
def test_a_sweep_whose_runs_measured_no_cost_shows_no_cost_figure(cost_sweep, tmp_path):
    """The same sweep with its cost columns empty (a MariaDB run, or one whose monitor missed a second): no
    cost figure, no cost table, the rest of the page as before."""
    copy = tmp_path / "copy"
    shutil.copytree(cost_sweep, copy)
    rows = _cells(copy)
    with (copy / "cells.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: ("" if k in COST_COLUMNS else v) for k, v in r.items()} for r in rows)
    page = render_sweep_report(copy).read_text(encoding="utf-8")
    assert 'id="fig-cost_' not in page and 'id="costs"' not in page
    assert 'id="fig-throughput_vs_batch"' in page
