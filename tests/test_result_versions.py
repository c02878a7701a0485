"""The result files' versions (docs/results.md, "Versions of the result files"): a run of an earlier format is read
through the upgrade steps by every reader, a current one as written, a newer one refused with one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.experiment_figures import RunView
from bench.cli.render_bench import stretch_run
from bench.report.run_data import load_run
from bench.report.run_page import render_report
from bench.results.model import FORMAT_VERSION, UPGRADES, ResultsError, RunResult, read_result, read_table

FIXTURE = Path(__file__).parent / "fixtures" / "run_small"
#: The stall in progress at each of the fixture's ten seconds (ms): two stalls, the second shorter.
STALLS = [0, 0, 300, 1200, 0, 0, 100, 200, 0, 0]


def _run(tmp_path: Path, version: int, stall_column: str) -> Path:
    """The fixture run (its files carry no format_version) as one of format ``version`` (0: as it is), its
    intervals.csv with a migration's ``stall_ms`` and the stall in progress, :data:`STALLS`, named
    ``stall_column``."""
    run_dir = tmp_path / f"v{version}-{stall_column}"
    shutil.copytree(FIXTURE, run_dir)
    if version:
        for name in ("run.json", "summary.json"):
            data = json.loads((run_dir / name).read_text())
            (run_dir / name).write_text(json.dumps({"format_version": version, **data}))
    frame = pd.read_csv(run_dir / "intervals.csv")
    assert len(frame) == len(STALLS)
    frame["stall_ms"] = [min(s, 1000) for s in STALLS]
    frame[stall_column] = STALLS
    frame.to_csv(run_dir / "intervals.csv", index=False)
    return run_dir


@pytest.mark.parametrize("version", [0, 1])
def test_a_run_written_before_the_rename_reads_with_the_new_name_and_its_values(tmp_path, version):
    """Versions 0 and 1 from before 25c2660: ``longest_stall_ms`` read as ``ongoing_stall_ms``, every other
    column as written, through the model and through the report's loader."""
    run_dir = _run(tmp_path, version, "longest_stall_ms")
    written = pd.read_csv(run_dir / "intervals.csv")
    result = RunResult.load(run_dir)
    assert result.summary.get("format_version", 0) == version
    table = result.table("intervals.csv")
    assert "longest_stall_ms" not in table and list(table["ongoing_stall_ms"]) == STALLS
    assert list(table.columns) == [c.replace("longest_stall_ms", "ongoing_stall_ms") for c in written.columns]
    pd.testing.assert_frame_equal(table.drop(columns="ongoing_stall_ms"), written.drop(columns="longest_stall_ms"))
    _, _, intervals = load_run(run_dir)  # the report's reader
    assert list(intervals["ongoing_stall_ms"]) == STALLS and "longest_stall_ms" not in intervals
    assert RunView(run_dir).intervals["ongoing_stall_ms"].max() == 1200  # an experiment's intervals.* figure


@pytest.mark.parametrize("version", [1, FORMAT_VERSION])
def test_a_run_with_the_new_name_is_read_as_written(tmp_path, version):
    """Version 1 written after 25c2660 (the new name already) and the current version: nothing renamed."""
    run_dir = _run(tmp_path, version, "ongoing_stall_ms")
    table = RunResult.load(run_dir).table("intervals.csv")
    pd.testing.assert_frame_equal(table, pd.read_csv(run_dir / "intervals.csv"))
    assert list(table["ongoing_stall_ms"]) == STALLS


def test_a_current_run_goes_through_no_upgrade_step(tmp_path):
    """The steps are keyed on the version too: a current file keeps a column an old one would have renamed."""
    run_dir = _run(tmp_path, FORMAT_VERSION, "longest_stall_ms")
    table = RunResult.load(run_dir).table("intervals.csv")
    assert list(table["longest_stall_ms"]) == STALLS and "ongoing_stall_ms" not in table
    summary = json.loads((run_dir / "summary.json").read_text())
    assert read_result(run_dir / "summary.json") == summary  # no step concerns summary.json


def test_every_version_before_the_current_one_has_its_place_in_the_upgrade_table():
    """Each raise of FORMAT_VERSION adds the step from the version before (0 -> 1 needed none)."""
    assert sorted(UPGRADES) == list(range(1, FORMAT_VERSION)), UPGRADES


def test_a_run_from_a_newer_queue_bench_is_refused_with_one_line(tmp_path):
    run_dir = _run(tmp_path, FORMAT_VERSION + 1, "ongoing_stall_ms")
    with pytest.raises(ResultsError) as refused:
        RunResult.load(run_dir)
    assert str(refused.value) == (f"{run_dir / 'run.json'} has format_version {FORMAT_VERSION + 1}; this "
                                  f"queue-bench reads up to {FORMAT_VERSION}: use the queue-bench that wrote it")
    summary = json.loads((run_dir / "summary.json").read_text())
    with pytest.raises(ResultsError, match=rf"summary\.json has format_version {FORMAT_VERSION + 1}; "
                                           rf"this queue-bench reads up to {FORMAT_VERSION}:") as refused:
        read_table(run_dir, "intervals.csv", summary)
    assert "\n" not in str(refused.value)


def test_the_report_renders_again_from_a_run_of_version_1(tmp_path):
    run_dir = _run(tmp_path, 1, "longest_stall_ms")
    summary = json.loads((run_dir / "summary.json").read_text())
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert f"{summary['throughput_jobs_per_s']:,.1f} jobs/s" in page
    assert f"{summary['jobs_completed']:,}" in page
    assert page.count('<img src="data:image/png;base64,') == 8


def test_a_stretched_copy_of_a_version_1_run_keeps_the_stall_under_its_new_name(tmp_path):
    """``make report-bench`` writes intervals.csv again in this format: the old column's values survive."""
    run_dir = _run(tmp_path, 1, "longest_stall_ms")
    (run_dir / "claim_plan.txt").write_text("the claim's plan\n")  # the one file it copies the fixture lacks
    assert stretch_run(run_dir, tmp_path / "stretched", 25) == len(STALLS)
    stretched = pd.read_csv(tmp_path / "stretched" / "intervals.csv")
    assert list(stretched["ongoing_stall_ms"]) == (STALLS * 3)[:25] and "longest_stall_ms" not in stretched
    assert list(stretched["t_s"]) == list(range(25))


def _plan_json(tmp_path: Path, version: int, workers: int, confirmed: bool | None) -> Path:
    """A plan.json of format ``version`` whose design's searches found 3 workers and a headroom of ×1.5 there, its
    answer at ``workers`` with ``confirmed`` as given."""
    head = {"rate_jobs_per_s": 150.0, "factor": 1.5, "at_least": False, "why": "162.5 jobs/s failed", "steps": []}
    plan = {"format_version": version, "designs": [{"label": "the design", "workers": {"needed": 3}, "headroom": head}],
            "answer": {"design_index": 0, "workers": workers, "confirmed": confirmed, "headroom": head,
                       "sentence": "as written"}}
    path = tmp_path / f"v{version}-w{workers}-{confirmed}" / "plan.json"
    path.parent.mkdir()
    path.write_text(json.dumps(plan))
    return path


@pytest.mark.parametrize("workers, confirmed", [(4, True), (3, False)])
def test_a_plan_of_version_2_quotes_no_headroom_where_its_answers_workers_did_not_pass(tmp_path, workers, confirmed):
    """2 -> 3: ``answer.headroom`` is the headroom at the answer's workers: an answer confirmed at more workers than
    the headroom search ran at, or not confirmed, reads as quoting none (the design's record kept)."""
    answer = read_result(_plan_json(tmp_path, 2, workers, confirmed))["answer"]
    assert answer["headroom"] is None and "the headroom search ran at 3 workers" in answer["headroom_why_not"]
    assert answer["sentence"] == "as written" and answer["workers"] == workers


@pytest.mark.parametrize("confirmed", [True, None])
def test_a_plan_of_version_2_at_the_searched_workers_keeps_its_headroom_with_the_workers(tmp_path, confirmed):
    path = _plan_json(tmp_path, 2, 3, confirmed)
    written = json.loads(path.read_text())
    read = read_result(path)
    assert read["answer"]["headroom"] == {**written["answer"]["headroom"], "workers": 3}
    assert read["designs"] == written["designs"] and "headroom_why_not" not in read["answer"]
    current = _plan_json(tmp_path, FORMAT_VERSION, 4, True)  # a current plan is read as written
    assert read_result(current) == json.loads(current.read_text())
