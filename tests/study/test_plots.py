import pytest

from companion.study.analysis import aggregate
from companion.study.driver import StudyRecord
from companion.study.plots import plot_lr_scaling, plot_speedup, plot_study

pytestmark = pytest.mark.ch7


def legend_of(fig):
    """The figure's one legend, under the axes (no legend box inside an axes: it would
    hide data), and no axes keeps a legend of its own."""
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    return fig.legends[0]


def test_plots_show_every_method_and_the_ideal_line():
    import matplotlib

    matplotlib.use("Agg")
    records = [
        StudyRecord(
            m,
            k,
            1,
            0.5 + 0.1 * k,
            1.0 / k,
            100.0 * k,
            1.0,
            "hw",
            "ci",
            seed=0,
            global_batch=64 * k,
            scaling="weak",  # 64 samples per device
            lr_rule=rule,
        )
        for m in ("a", "b")
        for k in (1, 2, 4)
        for rule in ("none", "linear")
    ]
    points = aggregate(records)
    fig = plot_study(points, "t")
    assert {t.get_text() for t in legend_of(fig).get_texts()} == {"a", "b"}
    fig = plot_speedup(points)
    labels = [t.get_text() for t in legend_of(fig).get_texts()]
    assert labels[0] == "ideal" and fig.axes[0].lines[0].get_ydata().tolist() == [1, 2, 4]
    fig = plot_lr_scaling([p for p in points if p.method == "a"])
    assert len(legend_of(fig).get_texts()) == 2
    assert legend_of(fig).get_title().get_text() == "precision: fp32"


def test_plots_name_the_precision_and_refuse_two_unless_asked():
    import matplotlib

    matplotlib.use("Agg")
    records = [
        StudyRecord(
            "a",
            k,
            1,
            0.5,
            1.0 / k,
            100.0 * k,
            1.0,
            "hw",
            "ci",
            precision=precision,
            global_batch=64,
        )
        for k in (1, 2)
        for precision in ("fp32", "bf16")
    ]
    points = aggregate(records, mix_precisions=True)
    for plot in (plot_study, plot_speedup, plot_lr_scaling):
        with pytest.raises(ValueError, match=r"mix precisions \['bf16', 'fp32'\]"):
            plot(points)
    fig = plot_study(points, mix_precisions=True)
    legend = legend_of(fig)
    assert {t.get_text() for t in legend.get_texts()} == {"a (fp32)", "a (bf16)"}
    assert legend.get_title().get_text() == "precision: bf16 / fp32"
    fig = plot_speedup([p for p in points if p.precision == "bf16"])
    assert legend_of(fig).get_title().get_text() == "precision: bf16"
    flagged = "flagged: not a speed-up (see the table)"  # one timed epoch each
    assert {t.get_text() for t in legend_of(fig).get_texts()} == {"ideal", "a", flagged}
    fig = plot_lr_scaling(points, mix_precisions=True)
    assert {t.get_text() for t in legend_of(fig).get_texts()} == {
        "lr rule: none (fp32)",
        "lr rule: none (bf16)",
    }


def test_the_accuracy_axis_is_not_zoomed_into_a_small_spread():
    import matplotlib

    matplotlib.use("Agg")
    records = [
        StudyRecord("a", k, 1, acc, 1.0, 100.0, 1.0, "hw", "ci", global_batch=64)
        for k, acc in ((1, 0.835), (2, 0.845))
    ]
    low, high = plot_study(aggregate(records)).axes[0].get_ylim()
    assert high - low >= 0.2 - 1e-9 and low <= 0.835 and high >= 0.845
    near_one = [StudyRecord("a", 1, 1, 0.995, 1.0, 100.0, 1.0, "hw", "ci", global_batch=64)]
    low, high = plot_study(aggregate(near_one)).axes[0].get_ylim()
    assert high <= 1.0 and high - low >= 0.2 - 1e-9
    wide = [
        StudyRecord("a", 1, 1, acc, 1.0, 100.0, 1.0, "hw", "ci", global_batch=64, seed=seed)
        for seed, acc in enumerate((0.3, 0.6, 0.9))
    ]
    low, high = plot_study(aggregate(wide)).axes[0].get_ylim()
    assert low < 0.3 and high > 0.9, "the caps of the widest bar sit inside the axes"


def test_an_efficiency_above_1_1_stays_on_the_axis():
    import matplotlib

    matplotlib.use("Agg")
    records = [
        StudyRecord(
            "a",
            k,
            1,
            0.5,
            1.0 / k,
            100.0 * k * (1.3 if k > 1 else 1),
            1.0,
            "hw",
            "ci",
            global_batch=64,
        )
        for k in (1, 2)
    ]
    fig = plot_speedup(aggregate(records))
    assert fig.axes[1].get_ylim()[1] > 1.3  # efficiency 1.3 at 2 devices


def test_the_speedup_plot_circles_and_labels_what_the_table_flags():
    """Issue 56: speedup.png drew a flagged 13.1x speed-up of 2 CPU processes unmarked."""
    import matplotlib

    matplotlib.use("Agg")

    def record(k, epoch, seconds, share):
        return StudyRecord(
            "m",
            k,
            epoch,
            0.5,
            seconds,
            600 / seconds,
            1.0,
            "hw",
            "ci",
            global_batch=64,
            cpu_share=share,
        )

    busy = [record(1, e, 4.0, 0.6) for e in (1, 2)]  # a slowed base: 6x on 2 devices
    points = aggregate([*busy, record(2, 1, 0.6, None), record(2, 2, 0.7, None)])
    assert points[1].flags == ("busy", "over N")
    fig = plot_speedup(points)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "busy, over N" in texts and "busy" in texts  # the base is busy too
    assert "flagged: not a speed-up (see the table)" in [
        t.get_text() for t in legend_of(fig).get_texts()
    ]
    quiet = [record(1, e, 1.0, 0.99) for e in (1, 2)]
    points = aggregate([*quiet, record(2, 1, 0.6, None), record(2, 2, 0.62, None)])
    assert not any(p.flags for p in points)
    assert len(plot_speedup(points).axes[0].texts) == 0
