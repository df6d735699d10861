import matplotlib
import pytest

matplotlib.use("Agg")

from companion.core import (
    Record,
    final_accuracy,
    load_records,
    plot_scaling,
    save_records,
    summarize,
)

pytestmark = pytest.mark.ch1


def rec(method="m", n=1, epoch=1, acc=0.5, sec=2.0, share=None, virtual=False):
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
        cpu_share=share,
        virtual=virtual,
    )


def test_save_and_load_round_trip(tmp_path):
    records = [rec(), rec(n=2, epoch=2, acc=0.75)]
    path = tmp_path / "sub" / "r.json"
    save_records(records, path)
    assert load_records(path) == records
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left


def test_save_is_atomic_on_failure(tmp_path):
    path = tmp_path / "r.json"
    save_records([rec()], path)

    with pytest.raises(TypeError):
        save_records([rec(), object()], path)
    assert load_records(path) == [rec()]  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_summarize_averages_the_last_half_of_the_epochs_and_the_time_of_all():
    text = summarize([rec(epoch=1, acc=0.5, sec=1.0), rec(epoch=2, acc=0.9, sec=3.0)])
    line = text.splitlines()[1].split()
    # 2 epochs: the accuracy of the last one, which has no range (issue 36: "(0.900-0.900)")
    assert line[-6:] == ["2", "0.900", "(one", "epoch)", "2.000", "50"]
    four = [rec(epoch=e, acc=a) for e, a in zip((4, 1, 3, 2), (0.9, 0.5, 0.8, 0.6))]
    assert final_accuracy(four) == (pytest.approx(0.85), 0.8, 0.9, 2)
    assert summarize(four).splitlines()[1].split()[3:5] == ["0.850", "(0.800-0.900)"]
    assert "mean of the last 2 epoch(s)" in summarize(four)
    assert text.endswith("measured on: CPU, 2 cores (x86_64), profile ci, fp32")


def test_summarize_marks_a_run_that_did_not_get_its_cores():
    quiet = summarize(
        [rec("alone", share=0.99), rec("gpu", n=2), rec("alone", epoch=2, share=0.97)]
    )
    assert "*" not in quiet and "busy" not in quiet
    text = summarize([rec("busy", share=0.6), rec("busy", epoch=2, share=0.7), rec("other", 2)])
    rows = text.splitlines()
    assert rows[1].startswith("busy") and rows[1].endswith(" *")
    assert not rows[2].endswith("*")
    assert "* busy: its threads got a core for only 65% of the time they were ready to run" in text
    assert "re-measure on a quiet machine" in text
    assert max(len(line) for line in text.splitlines()) <= 100  # a book's output box


def test_summarize_columns_line_up_for_long_method_names():
    text = summarize([rec("DataParallel by hand (virtual devices, long name)", 2), rec("m", 1)])
    header, first, second = text.splitlines()[:3]
    assert (
        header.index("devices") + len("devices") == first.index(" 2") + 2 == second.index(" 1") + 2
    )


def test_plot_scaling_draws_two_panels_against_device_count():
    records = [rec("a", n, e, acc=0.5 + 0.1 * n, sec=float(n + e)) for n in (1, 2) for e in (1, 2)]
    fig = plot_scaling(records, device_counts=(1, 2, 4))
    acc_ax, time_ax = fig.axes
    assert list(acc_ax.get_xticks()) == [1, 2, 4] and list(time_ax.get_xticks()) == [
        1,
        2,
        4,
    ]
    x, y = acc_ax.containers[0].lines[0].get_data()  # the errorbar's data line
    assert list(x) == [1, 2] and list(y) == pytest.approx([0.6, 0.7])
    assert time_ax.get_ylabel() == "seconds per epoch"
    assert "profile 'ci'" in fig._suptitle.get_text()
    low, high = acc_ax.get_ylim()
    assert high - low >= 0.1 and low <= 0.6 and high >= 0.7


def test_equal_methods_stay_distinguishable_and_accuracy_axis_stays_in_range():
    records = [rec(m, n, acc=0.99) for m in ("a", "b") for n in (1, 2)]
    fig = plot_scaling(records)
    a, b = (c.lines[0] for c in fig.axes[0].containers)
    assert (a.get_marker(), a.get_linestyle()) != (b.get_marker(), b.get_linestyle())
    assert all(xa != xb for xa, xb in zip(a.get_xdata(), b.get_xdata()))  # drawn side by side
    low, high = fig.axes[0].get_ylim()
    assert 0.99 < high <= 1.01 and high - low >= 0.1


def test_the_slowest_point_is_off_the_frame_and_the_legend_off_the_data():
    """Issue 36: set_ylim(bottom=0) alone left the top at the data's maximum."""
    records = [
        rec(m, n, e, sec=0.7 + 0.047 * e) for m in ("a", "b") for n in (1, 2) for e in (0, 1)
    ]
    fig = plot_scaling(records)
    slowest = 0.747  # the top of the highest error bar
    assert fig.axes[1].get_ylim()[0] == 0 and fig.axes[1].get_ylim()[1] >= 1.05 * slowest
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    legend_top = fig.legends[0].get_window_extent(fig.canvas.get_renderer()).y1
    assert legend_top <= min(ax.get_window_extent().y0 for ax in fig.axes)  # below the axes


def test_virtual_device_counts_are_marked_in_the_table_and_the_plot():
    records = [rec(n=1), rec(n=2, virtual=True), rec(method="other", n=2, virtual=True)]
    table = summarize(records).splitlines()
    assert table[1].split()[:2] == ["m", "1"] and table[2].split()[:2] == ["m", "2v"]
    assert any(line.startswith("v: virtual devices") for line in table)
    assert "v: virtual" not in summarize([rec(n=1), rec(n=2)])
    fig = plot_scaling(records, device_counts=(1, 2, 4))
    for ax in fig.axes[:2]:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2\n(virtual)", "4"]


def test_virtual_means_more_devices_than_the_hardware(monkeypatch):
    from companion.core import devices

    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    assert [devices.is_virtual(n, "cpu") for n in (1, 2)] == [False, True]
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    assert [devices.is_virtual(n, "cuda:0") for n in (1, 2, 3)] == [False, False, True]
    assert devices.is_virtual(2, "cpu")  # CPU processes share the cores


def test_plot_scaling_needs_records():
    with pytest.raises(ValueError, match="at least one record"):
        plot_scaling([])
