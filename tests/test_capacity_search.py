"""``qbench capacity`` against the real PostgreSQL: the step ramp and bisection find the
highest arrival rate whose oldest eligible age stays flat.

Two workers whose jobs take 10 ms can complete at most 2 x 1000 / 10 = 200 jobs/s
(Little's law with every worker busy), less the claim and completion time; at
half of that they are idle half the time and must keep up. So the answer must
lie between 100 and 200 jobs/s, whatever the machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import qbench


@pytest.mark.slow
def test_capacity_search_brackets_the_littles_law_ceiling(dsn, tmp_path):
    proc = qbench("capacity", "--dsn", dsn, "--results", str(tmp_path), "--workers", "2", "--work-ms", "10",
                  "--duration", "5s", "--warmup", "1s", "--rate-start", "40", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("capacity: ")
    result = json.loads(Path(lines[-1].removeprefix("capacity: ")).read_text())
    ceiling = 2 * 1000 / 10
    rate = result["sustainable_rate_jobs_per_s"]
    assert 0.5 * ceiling <= rate <= ceiling, result["steps"]
    behind = result["first_rate_behind_jobs_per_s"]
    assert behind is not None and rate < behind <= 1.25 * rate + 1, result["steps"]  # bisected to ~10 %
    steps = {s["rate_jobs_per_s"]: s for s in result["steps"]}
    assert steps[rate]["kept_up"] and not steps[behind]["kept_up"]
    assert [s["rate_jobs_per_s"] for s in result["steps"]][:2] == [40.0, 80.0]  # the ramp doubles
    # The answer carries the claim p99 measured at that rate, and says it in one sentence.
    assert result["claim_p99_us_at_rate"] == steps[rate]["claim_p99_us"] > 0
    assert f"{rate:,.0f} jobs/s" in lines[-2] and "using 2 workers" in lines[-2]
    for s in result["steps"]:
        assert (Path(s["run_dir"]) / "report.html").is_file()
