import json

import matplotlib
import pytest

matplotlib.use("Agg")

from companion.core import Record, load_records, plot_scaling, save_records, summarize

pytestmark = pytest.mark.ch1


def rec(method="m", n=1, epoch=1, acc=0.5, sec=2.0):
    return Record(
        method=method,
        n_devices=n,
        epoch=epoch,
        test_acc=acc,
        sec_per_epoch=sec,
        samples_per_sec=100 / sec,
        train_loss=1.0,
        hardware="CPU, 2 cores (x86_64)",
        profile="ci",
    )


def test_save_and_load_round_trip(tmp_path):
    records = [rec(), rec(n=2, epoch=2, acc=0.75)]
    path = tmp_path / "sub" / "r.json"
    save_records(records, path)
    assert load_records(path) == records
    assert [p.name for p in path.parent.iterdir()] == [
        "r.json"
    ]  # no temporary file left


def test_save_is_atomic_on_failure(tmp_path):
    path = tmp_path / "r.json"
    save_records([rec()], path)

    with pytest.raises(TypeError):
        save_records([rec(), object()], path)
    assert load_records(path) == [rec()]  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_summarize_uses_last_epoch_and_mean_time():
    text = summarize([rec(epoch=1, acc=0.5, sec=1.0), rec(epoch=2, acc=0.9, sec=3.0)])
    line = text.splitlines()[1].split()
    assert line[-4:] == ["2", "0.900", "2.000", "50"]
    assert text.endswith("measured on: CPU, 2 cores (x86_64), profile ci")


def test_plot_scaling_draws_two_panels_against_device_count():
    records = [
        rec("a", n, e, acc=0.5 + 0.1 * n, sec=float(n + e))
        for n in (1, 2)
        for e in (1, 2)
    ]
    fig = plot_scaling(records, device_counts=(1, 2, 4))
    acc_ax, time_ax = fig.axes
    assert list(acc_ax.get_xticks()) == [1, 2, 4] and list(time_ax.get_xticks()) == [
        1,
        2,
        4,
    ]
    x, y = acc_ax.lines[0].get_data()
    assert list(x) == [1, 2] and list(y) == pytest.approx([0.6, 0.7])
    assert time_ax.get_ylabel() == "seconds per epoch"
    assert "profile 'ci'" in fig._suptitle.get_text()
    low, high = acc_ax.get_ylim()
    assert high - low >= 0.1 and low <= 0.6 and high >= 0.7


def test_equal_methods_stay_distinguishable_and_accuracy_axis_stays_in_range():
    records = [rec(m, n, acc=0.99) for m in ("a", "b") for n in (1, 2)]
    fig = plot_scaling(records)
    a, b = fig.axes[0].lines
    assert (a.get_marker(), a.get_linestyle()) != (b.get_marker(), b.get_linestyle())
    low, high = fig.axes[0].get_ylim()
    assert 0.99 < high <= 1.01 and high - low >= 0.1


def test_plot_scaling_needs_records():
    with pytest.raises(ValueError, match="at least one record"):
        plot_scaling([])
