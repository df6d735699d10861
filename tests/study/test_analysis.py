import math
from dataclasses import replace

import pytest

from companion.study.analysis import aggregate, one_precision, spread, table
from companion.study.driver import StudyRecord

pytestmark = pytest.mark.ch7


def rec(method, k, seed, epoch, acc, secs, n=1000, precision="fp32"):
    return StudyRecord(
        method,
        k,
        epoch,
        acc,
        secs,
        n / secs,
        1.0,
        "hw",
        "ci",
        precision=precision,
        seed=seed,
        global_batch=64,
    )


def test_spread_known_values():
    assert spread([1.0, 2.0, 3.0]) == (2.0, 1.0, 1.0, 3.0)
    assert spread([0.5]) == (0.5, 0.0, 0.5, 0.5)
    with pytest.raises(ValueError):
        spread([])


def test_mean_over_seeds_of_last_half_and_speedup():
    records = [
        # 1 device: 2 s per epoch; seed 0 ends at (0.8 + 0.9) / 2, seed 1 at (0.6 + 0.7) / 2
        rec("m", 1, 0, 1, 0.1, 2.0),
        rec("m", 1, 0, 2, 0.8, 2.0),
        rec("m", 1, 0, 3, 0.9, 2.0),
        rec("m", 1, 1, 1, 0.1, 2.0),
        rec("m", 1, 1, 2, 0.6, 2.0),
        rec("m", 1, 1, 3, 0.7, 2.0),
        # 4 devices: 1 s per epoch, a speed-up of 2, an efficiency of 50 %
        rec("m", 4, 0, 1, 0.5, 1.0),
        rec("m", 4, 0, 2, 0.5, 1.0),
    ]
    one, four = aggregate(records)
    assert one.seeds == 2 and one.acc_mean == pytest.approx(0.75)
    assert one.acc_std == pytest.approx(math.sqrt(0.02)) and one.acc_min == pytest.approx(0.65)
    assert one.speedup == pytest.approx(1.0) and one.sec_per_epoch == pytest.approx(2.0)
    assert four.speedup == pytest.approx(2.0) and four.efficiency == pytest.approx(0.5)
    assert "50%" in table([one, four])


def test_reference_gets_no_speedup():
    (p,) = aggregate([rec("reference", 2, 0, 1, 0.5, 1.0)])
    assert math.isnan(p.speedup)


def test_a_speedup_carries_the_range_its_slowest_and_fastest_epochs_allow():
    records = [
        rec("m", 1, 0, 1, 0.5, 2.0),
        rec("m", 1, 0, 2, 0.5, 2.2),
        rec("m", 2, 0, 1, 0.5, 1.0),
        rec("m", 2, 0, 2, 0.5, 1.1),
    ]
    one, two = aggregate(records)
    assert (one.sec_min, one.sec_max) == (2.0, 2.2) and (two.sec_min, two.sec_max) == (1.0, 1.1)
    assert two.speedup == pytest.approx(2.1 / 1.05)
    assert two.speedup_min == pytest.approx(2.0 / 1.1) and two.speedup_max == pytest.approx(
        2.2 / 1.0
    )
    assert not two.noisy  # every pairing of epochs, 1.82..2.2, is above 1
    assert not one.noisy  # the base: its speed-up is 1 by definition
    lines = table([one, two]).splitlines()
    assert "[1.00-1.10]" in lines[2] and lines[2].endswith("100%")
    assert lines[3] == "precision: fp32"  # one precision: a line below the rows, not a column
    mixed = table([one, replace(two, precision="bf16")]).splitlines()
    assert mixed[0].endswith("  precision") and mixed[2].endswith("100%  bf16")
    assert max(len(line) for line in table([one, two]).splitlines()) <= 100


def test_a_speedup_made_by_one_slow_epoch_is_marked_noise_not_printed_as_an_efficiency():
    # the case: one 1-device epoch slowed by load (3.8 s against 0.35 s)
    records = [
        rec("internals", 1, 0, 1, 0.5, 0.35),
        rec("internals", 1, 0, 2, 0.5, 3.8),
        rec("internals", 2, 0, 1, 0.5, 0.33),
        rec("internals", 2, 0, 2, 0.5, 0.32),
    ]
    _, two = aggregate(records)
    assert two.speedup > 6 and two.flag == "over N"  # 6x on 2 devices
    text = table([two]).splitlines()
    assert text[1].endswith("over N") and "%" not in text[1]
    assert f"({two.speedup:.2f})" in text[1]  # the discredited value, in parentheses
    assert text[2] == "precision: fp32"
    assert text[3].startswith("over N: faster than N devices can be") and "quiet" in text[4]


@pytest.mark.parametrize("slow, expected", [(1.3, "noise"), (0.65, "")])
def test_noise_is_a_range_that_crosses_1(slow, expected):
    records = [
        rec("m", 1, 0, 1, 0.5, 1.0),
        rec("m", 1, 0, 2, 0.5, 1.0),
        rec("m", 2, 0, 1, 0.5, 0.6),
        rec("m", 2, 0, 2, 0.5, slow),
    ]
    _, two = aggregate(records)
    assert two.flag == expected
    assert table([two]).count("noise:") == (expected == "noise")


def test_a_single_timed_epoch_is_flagged_and_explained():
    """Issue 36: `--epochs 1` printed a speed-up with no range, unflagged."""
    records = [rec("m", 1, 0, 1, 0.5, 1.0), rec("m", 2, 0, 1, 0.5, 0.6)]
    _, two = aggregate(records)
    assert two.epochs == 1 and two.flag == "1 epoch"
    assert "1 epoch: one timed epoch" in table([two])


@pytest.mark.parametrize("share, expected", [(0.6, "busy"), (0.98, ""), (None, "")])
def test_a_1_device_base_that_did_not_get_its_cores_flags_itself_and_its_speedups(share, expected):
    """Issue 36: a busy 1-device base makes every speed-up against it look better."""
    base = [rec("m", 1, 0, e, 0.5, 1.0) for e in (1, 2)]
    for r in base:
        r.cpu_share = share
    one, two = aggregate([*base, rec("m", 2, 0, 1, 0.5, 0.6), rec("m", 2, 0, 2, 0.5, 0.6)])
    assert one.flag == two.flag == expected
    assert (
        "busy: the 1-device run's ready threads waited for a core" in table([one, two])
    ) == bool(expected)


def test_one_seed_prints_no_standard_deviation():
    (p,) = aggregate([rec("m", 1, 0, 1, 0.5, 1.0)])
    assert "(0.000)" not in table([p])
    two_seeds = aggregate([rec("m", 1, 0, 1, 0.5, 1.0), rec("m", 1, 1, 1, 0.7, 1.0)])
    assert "(0.141)" in table(two_seeds)


def test_the_speedup_base_is_the_1_device_run_on_the_same_batch():
    def run(k, batch, secs, scaling="strong"):
        return StudyRecord(
            "m", k, 1, 0.5, secs, 1000 / secs, 1.0, "hw", "ci", global_batch=batch, scaling=scaling
        )

    points = aggregate([run(1, 16, 4.0), run(1, 64, 1.0), run(2, 16, 2.0), run(2, 64, 2.0)])
    speedup = {(p.n_devices, p.global_batch): p.speedup for p in points}
    # batch 16 on 1 device is its own base (1.0), not a slower copy of batch 64's
    assert speedup == pytest.approx({(1, 16): 1.0, (1, 64): 1.0, (2, 16): 2.0, (2, 64): 0.5})


def test_weak_scaling_speedup_is_against_one_device_on_the_per_device_batch():
    def run(k, batch, secs):
        return StudyRecord(
            "m",
            k,
            1,
            0.5,
            secs,
            batch * 10 / secs,
            1.0,
            "hw",
            "ci",
            global_batch=batch,
            scaling="weak",
        )

    one, two, lonely = aggregate([run(1, 64, 1.0), run(2, 128, 1.0), run(4, 512, 1.0)])
    assert two.speedup == pytest.approx(2.0) and two.efficiency == pytest.approx(1.0)
    # 4 devices of 128 each: no 1-device run of batch 128, so no speed-up
    assert one.speedup == pytest.approx(1.0) and math.isnan(lonely.speedup)


def test_a_comparison_in_two_precisions_is_refused_unless_asked_for():
    records = [
        rec("m", 1, 0, 1, 0.5, 2.0),
        rec("m", 2, 0, 1, 0.5, 1.0),
        rec("m", 1, 0, 1, 0.6, 1.0, precision="bf16, channels_last"),
        rec("m", 2, 0, 1, 0.6, 0.8, precision="bf16, channels_last"),
    ]
    with pytest.raises(
        ValueError,
        match=r"mix precisions \['bf16, channels_last', 'fp32'\].*"
        r"mix_precisions=True",
    ):
        aggregate(records)
    assert one_precision(records[:2]) == ["fp32"]
    points = aggregate(records, mix_precisions=True)
    # one point per precision, each with the speed-up over 1 device in its own precision
    speedup = {(p.precision, p.n_devices): p.speedup for p in points}
    assert speedup == pytest.approx(
        {
            ("bf16, channels_last", 1): 1.0,
            ("bf16, channels_last", 2): 1.25,
            ("fp32", 1): 1.0,
            ("fp32", 2): 2.0,
        }
    )
    rows = table(points).splitlines()[: len(points) + 1]  # then what the flags mean
    assert rows[0].endswith("precision")
    assert [row.split("  ")[-1] for row in rows[1:]] == [p.precision for p in points]


def test_virtual_device_counts_are_marked_in_the_study_table():
    """A count that ran on virtual devices (the CPU, or one GPU named twice) says so."""
    one = [rec("ddp", 1, 0, e, 0.9, 1.0) for e in (1, 2)]
    two = [replace(rec("ddp", 2, 0, e, 0.9, 1.5), virtual=True) for e in (1, 2)]
    points = aggregate(one + two)
    assert [p.virtual for p in points] == [False, True]
    rows = table(points).splitlines()
    assert rows[1].split()[:2] == ["ddp", "1"] and rows[2].split()[:2] == ["ddp", "2v"]
    assert any(line.startswith("v: virtual devices") for line in rows)
    assert "v: virtual" not in table(aggregate(one))


def test_a_row_shows_every_flag_and_the_notes_explain_the_parentheses():
    """Issue 56: one flag per row, 'busy' hid 'over N'."""
    base = [rec("m", 1, 0, e, 0.5, 4.0) for e in (1, 2)]
    for r in base:
        r.cpu_share = 0.6
    _, two = aggregate([*base, rec("m", 2, 0, 1, 0.5, 0.6), rec("m", 2, 0, 2, 0.5, 0.7)])
    assert two.flags == ("busy", "over N") and two.flag == "busy"
    text = table([two])
    assert text.splitlines()[1].endswith("busy,over N") and max(map(len, text.splitlines())) <= 100
    assert "busy: " in text and "over N: " in text
    assert "a flagged row's speed-up is in parentheses" in " ".join(text.split())
