"""The rule behind empty_claims_while_work_waited (bench/analysis/empty_claims.py): a lower bound of the
pending rows in each second, which holds only in a run that never adds or returns a pending row."""

from bench.analysis.empty_claims import bound_holds, empty_while_work_waited, pending_lower_bounds

CLOSED = {"rate": 0, "fail_prob": 0, "poison_share": 0, "reaper_interval_s": 0, "faults": []}


def test_the_bound_is_what_was_left_plus_what_was_claimed_later():
    assert pending_lower_bounds([5, 3, None, 2], pending_final=0) == [5, 2, 2, 0]
    assert pending_lower_bounds([5, 3, float("nan"), 2], pending_final=4) == [9, 6, 6, 4]


def test_empty_claims_count_only_in_seconds_with_rows_certainly_pending():
    # The backlog ran dry in the last second: its empty claims are not FR-07's.
    total, waited = empty_while_work_waited(CLOSED, jobs_claimed=[5, 3, 0], empty_claims=[1, 2, 7], pending_final=0)
    assert waited == [True, False, False] and total == 1
    total, waited = empty_while_work_waited(CLOSED, [5, 3, 0], [1, 2, 7], pending_final=10)
    assert waited == [True, True, True] and total == 10


def test_no_figure_where_rows_come_and_go_or_the_audit_did_not_count():
    for change in ({"rate": 400}, {"fail_prob": 0.1}, {"poison_share": 0.01}, {"reaper_interval_s": 1},
                   {"faults": [{"kind": "crash_after_claim", "start_s": 1, "end_s": 2}]}):
        assert not bound_holds(CLOSED | change)
        assert empty_while_work_waited(CLOSED | change, [5], [3], pending_final=100) == (None, [])
    assert empty_while_work_waited(CLOSED, [5], [3], pending_final=None) == (None, [])
