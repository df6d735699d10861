"""The one noise rule (companion.core.noise): paired per-round ratios, the verdict against a
target or against 1, and the busy-machine rule; each branch can be reached."""

import math

import pytest

from companion.core.noise import (
    TARGETS,
    Load,
    LoadWatch,
    Ratio,
    Target,
    cpu_share,
    judge,
    load_average,
    paired_ratio,
    scheduler_times,
)

AT_MOST = Target("a / b", "<=", 1.10, "a test")
AT_LEAST = Target("a / b", ">=", 0.95, "a test")
QUIET = Load(before=0.2, after=2.1, cores=2, own=2)


def test_a_ratio_is_the_median_of_the_rounds_paired_ratios():
    r = paired_ratio([2.0, 3.0, 9.0], [1.0, 2.0, 3.0])  # per round: 2.0, 1.5, 3.0
    assert (r.median, r.low, r.high, r.rounds) == (2.0, 1.5, 3.0, 3)
    assert str(r) == "2.00 (rounds 1.50-3.00)"
    assert str(Ratio.of([0.5])) == "0.50 (1 round)"
    assert f"{r:.3f}" == "2.000 (rounds 1.500-3.000)"  # a cell's format spec shows the range too


def test_met_and_missed_need_every_round_on_one_side_of_the_target():
    assert str(judge(Ratio.of([1.0, 1.02, 1.05]), AT_MOST, QUIET)) == "met"
    assert str(judge(Ratio.of([1.2, 1.3, 1.25]), AT_MOST, QUIET)) == "missed"
    assert str(judge(Ratio.of([0.97, 0.99, 0.98]), AT_LEAST, QUIET)) == "met"
    crossing = judge(Ratio.of([1.0, 1.05, 1.2]), AT_MOST, QUIET)
    assert crossing.noise and str(crossing) == (
        "noise (rounds on both sides of 1.1): re-run on a quiet machine"
    )


def test_against_one_the_verdict_says_which_side_is_faster():
    assert str(judge(Ratio.of([0.6, 0.7, 0.8]), 1.0)) == "below"
    assert str(judge(Ratio.of([1.3, 1.4, 1.5]), 1.0)) == "above"
    assert judge(Ratio.of([0.9, 1.1, 1.0]), 1.0).noise


def test_one_round_or_a_busy_machine_is_noise_whatever_the_ratio():
    assert "one round" in judge(Ratio.of([0.5]), AT_MOST, QUIET).why
    busy_before = Load(before=1.5, after=1.0, cores=2, own=2)
    assert busy_before.busy and "busy" in judge(Ratio.of([0.5, 0.6]), AT_MOST, busy_before).why
    # after a 2-process measurement on 2 cores, a load of 3 is the measurement itself
    assert not Load(before=0.5, after=3.0, cores=2, own=2).busy
    assert Load(before=0.5, after=3.1, cores=2, own=2).busy
    assert str(busy_before) == "load average 1.5 before, 1.0 after (2 cores)"


def test_in_one_process_the_threads_share_decides_not_the_lagging_load_average():
    # the last minute's work still in the load average: the threads got their cores
    after_work = Load(before=1.5, after=1.6, cores=2, own=1, share=0.98)
    assert not after_work.busy and judge(Ratio.of([1.3, 1.4]), 1, after_work).word == "above"
    assert str(after_work).startswith("ready threads ran 98% of the time (load average 1.5")
    queued = Load(before=0.1, after=0.2, cores=2, own=1, share=0.6)  # a load spike
    assert queued.busy and "ready threads ran 60%" in judge(Ratio.of([1.3, 1.4]), 1, queued).why
    watched = LoadWatch(own=1, in_process=True).done()
    assert watched.share is None or 0 <= watched.share <= 1
    assert LoadWatch(own=1).done().share is None  # measured elsewhere: the load average rule


def test_the_targets_table_is_well_formed():
    assert {"allreduce", "loop", "split", "ddp", "internals", "sharding", "baseline"} <= set(
        TARGETS
    )
    for target in TARGETS.values():
        assert target.op in ("<=", ">=") and target.value > 0 and target.where.startswith("bench")
        assert target.met_by(target.value)


def test_the_load_watch_reads_the_os():
    load = LoadWatch(own=2).done()
    assert load.own == 2 and load.cores >= 1
    assert math.isnan(load_average()) or load_average() >= 0


def _tasks(root, threads):
    for tid, (ran, waited) in threads.items():
        (root / tid).mkdir(exist_ok=True)
        (root / tid / "schedstat").write_text(f"{ran} {waited} 7\n")
    return scheduler_times(str(root))


def test_the_cpu_share_is_time_run_over_time_ready(tmp_path):
    S = 10**9  # one second in nanoseconds
    before = _tasks(tmp_path, {"1": (100, 10), "2": (50, 0)})
    assert before == {"1": (100, 10), "2": (50, 0)}
    # thread 1 ran 3 s and queued 1 s; thread 2 slept (neither); thread 3 started: 2 s, 0 s
    after = _tasks(tmp_path, {"1": (100 + 3 * S, 10 + S), "2": (50, 0), "3": (2 * S, 0)})
    assert cpu_share(before, after) == pytest.approx(5 / 6)
    assert cpu_share(before, before) is None  # no thread was ready: nothing to judge
    assert cpu_share(None, after) is None and cpu_share(before, None) is None
    assert scheduler_times(str(tmp_path / "absent")) is None  # macOS, Windows: not measured
    (tmp_path / "4").mkdir()
    (tmp_path / "4" / "schedstat").write_text("garbled\n")
    assert scheduler_times(str(tmp_path)) is None


def test_this_process_reports_its_threads_or_nothing():
    times = scheduler_times()
    assert times is None or all(r >= 0 and w >= 0 for r, w in times.values())


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: Ratio.of([]), "one or more positive, finite"),
        (lambda: Ratio.of([1.0, math.nan]), "one or more positive, finite"),
        (lambda: paired_ratio([1.0], [1.0, 2.0]), "as many times on each side"),
        (lambda: paired_ratio([1.0], [0.0]), "times must be positive"),
    ],
)
def test_bad_measurements_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
