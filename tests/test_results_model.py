"""The results model (bench/results/model.py): one rule for "can this run be trusted", read by
every reader, and a format_version in every result file."""

from __future__ import annotations

import json

import pytest

from bench.results.model import FORMAT_VERSION, ResultsError, RunResult, problems, read_result, stamped
from bench.results.sweep import load_sweep

CLEAN = {"run_id": "r1", "complete": True, "database_lost": None, "suspect": False, "suspect_reasons": [],
         "invariants": {"double_claims": 0, "lost_jobs": 0}, "saturated": False, "throughput_jobs_per_s": 10.0}


def test_a_clean_run_has_no_problems():
    assert problems(CLEAN) == []


@pytest.mark.parametrize("change, expected", [
    ({"complete": False}, "did not finish"),
    ({"database_lost": "server closed the connection"}, "database went away"),
    ({"suspect": True, "suspect_reasons": ["harness CPU 97 %"]}, "suspect run: harness CPU 97 %"),
    ({"suspect": True, "suspect_reasons": []}, "no reason recorded"),
    ({"invariants": {"double_claims": 2, "lost_jobs": 0}}, "double_claims = 2"),
    ({"invariants": {"double_claims": None, "lost_jobs": None}}, "not checked"),
    ({"invariants": None}, "not checked"),
])
def test_each_kind_of_problem_makes_a_run_untrustworthy(change, expected):
    found = problems({**CLEAN, **change})
    assert len(found) == 1 and expected in found[0], found


def test_saturation_is_reported_but_is_not_a_measurement_problem():
    result = RunResult(None, {}, {**CLEAN, "saturated": True})
    assert result.problems == [] and result.saturated


def test_result_files_carry_the_format_version_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(stamped(CLEAN)))
    assert read_result(path)["format_version"] == FORMAT_VERSION
    assert list(stamped(CLEAN))[0] == "format_version"
    path.write_text(json.dumps(CLEAN))  # written before the field existed: version 0, still read
    assert read_result(path)["run_id"] == "r1"
    path.write_text(json.dumps({**CLEAN, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ResultsError, match="format_version"):
        read_result(path)
    path.write_text(json.dumps({**CLEAN, "format_version": -1}))
    with pytest.raises(ResultsError, match="format_version -1"):
        read_result(path)
    with pytest.raises(ResultsError, match="missing"):
        read_result(tmp_path / "absent.json")


def _sweep_with_one_run(tmp_path, summary):
    sweep = tmp_path / "sweep"
    (sweep / "runs" / "r1").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps(stamped({"name": "s", "axes": {"workers": [1]}, "repetitions": 1,
                                                          "cells": [{"cell_id": "c001", "params": {"workers": 1}}]})))
    # cells.csv says the run is fine; the run's own summary.json is what the model reads.
    (sweep / "cells.csv").write_text("cell_id,rep,run_id,run_dir,status,workers,suspect,invariants_ok,saturated\n"
                                     "c001,1,r1,runs/r1,done,1,False,True,False\n")
    (sweep / "runs" / "r1" / "summary.json").write_text(json.dumps(stamped(summary)))
    return load_sweep(sweep)


def test_the_sweep_reader_asks_the_model_whether_a_run_is_trusted(tmp_path):
    assert _sweep_with_one_run(tmp_path / "a", CLEAN).cells[0].qualifies
    broken = _sweep_with_one_run(tmp_path / "b", {**CLEAN, "invariants": {"double_claims": 1, "lost_jobs": 0}})
    assert not broken.cells[0].qualifies
    lost = _sweep_with_one_run(tmp_path / "c", {**CLEAN, "database_lost": "gone"})
    assert not lost.cells[0].qualifies
