"""Mismatched collectives: a timeout without debugging, a named mismatch with DETAIL."""

import time

import pytest

from companion.troubleshoot.hangs import diagnose_hang

pytestmark = pytest.mark.ch8

TIMEOUT = 2.0


def test_by_default_a_mismatch_is_a_hang_that_the_group_timeout_ends():
    start = time.monotonic()
    ranks = diagnose_hang("op", "OFF", timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT + 60  # bounded, generously
    # Each rank times out, unless its peer's timeout fired first and closed the connection.
    assert any("Timed out waiting" in r["error"] for r in ranks)
    for r in ranks:
        timed_out = "Timed out waiting" in r["error"]
        assert timed_out or "Connection closed by peer" in r["error"]
        assert "ALLREDUCE" not in r["error"] and r["seconds"] < TIMEOUT + 20
        assert r["seconds"] >= TIMEOUT or not timed_out


def test_detail_names_both_collectives_at_once():
    ranks = diagnose_hang("op", "DETAIL", timeout=TIMEOUT)
    for r in ranks:
        assert r["error"].startswith("RuntimeError: Detected mismatch between collectives")
        assert "OpType=ALLREDUCE" in r["error"] and "OpType=BROADCAST" in r["error"]
        assert r["seconds"] < TIMEOUT  # found before any timeout


def test_detail_names_the_differing_shapes():
    ranks = diagnose_hang("shape", "DETAIL", timeout=TIMEOUT)
    for r in ranks:
        assert "TensorShape=[4]" in r["error"] and "TensorShape=[5]" in r["error"]


def test_without_detail_a_shape_mismatch_aborts_a_rank_and_its_message_is_kept():
    report = diagnose_hang("shape", "OFF", timeout=TIMEOUT)
    assert isinstance(report, str) and report.startswith("WorkerDied:")
    assert "SIGABRT" in report and "collective mismatch" in report


def test_a_skipped_collective_times_out_on_the_rank_left_waiting():
    waiting, skipper = diagnose_hang("skip", "OFF", timeout=TIMEOUT)
    assert "Timed out waiting" in waiting["error"] and TIMEOUT <= waiting["seconds"] < TIMEOUT + 20
    assert skipper["error"] is None
    waiting, _ = diagnose_hang("skip", "DETAIL", timeout=TIMEOUT)
    assert "Ranks 1 failed to pass monitoredBarrier" in waiting["error"]
    assert "monitoredBarrier" in waiting["stderr"]  # torch also logs it


def test_bad_arguments_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="kind must be one of"):
        diagnose_hang("order")
    with pytest.raises(ValueError, match="debug must be one of"):
        diagnose_hang("op", "VERBOSE")
    with pytest.raises(ValueError, match="positive number of seconds"):
        diagnose_hang("op", timeout=0)
