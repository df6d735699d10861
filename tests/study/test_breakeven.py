import pytest

from companion.study.breakeven import (
    Parts,
    crossing,
    find_breakeven,
    fit_compute,
    measure,
)

pytestmark = pytest.mark.ch7


def test_crossing_interpolates_and_reports_the_ends():
    assert crossing([1, 2, 4], [1.0, 2.0, 4.0], 3.0) == pytest.approx(3.0)
    assert crossing([1, 2], [5.0, 6.0], 3.0) == 0.0
    assert crossing([1, 2], [1.0, 2.0], 3.0) is None


def test_prediction_on_exact_synthetic_timings():
    """Times made by the model itself: the fit recovers it, prediction equals measurement."""
    alpha, beta, c0, c1, p = 1e-4, 1e-9, 2e-4, 1e-5, 2

    def ring(n):
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta

    batches = [1, 4, 16, 64, 256]
    parts = Parts(
        p,
        batches,
        [c0 + c1 * b for b in batches],
        250_000,
        ring(250_000),
        [4096, 65536, 1 << 20],
        [ring(n) for n in (4096, 65536, 1 << 20)],
    )
    assert fit_compute(batches, parts.compute) == pytest.approx((c0, c1))
    found = find_breakeven(parts)
    assert found["alpha"] == pytest.approx(alpha) and found["beta"] == pytest.approx(beta)
    assert found["predicted_comm"] == pytest.approx(parts.comm)
    assert found["predicted_b"] == pytest.approx((parts.comm - c0) / c1)
    assert found["measured_b"] == pytest.approx(found["predicted_b"], rel=1e-6)


def test_measure_runs_on_two_processes():
    parts = measure(2, "lenet", [1, 8], sweep=(256, 4096), repeats=1)
    assert parts.world_size == 2 and len(parts.compute) == 2 and parts.comm > 0
    assert parts.nbytes == 4 * sum(
        p.numel() for p in __import__("companion").core.models.get_model("lenet").parameters()
    )
    with pytest.raises(ValueError, match="two ranks"):
        measure(1, "lenet", [1])


@pytest.mark.parametrize(
    "measured, predicted, lines",
    [
        (0.0, 0.0, ([1, 1], "below 1", "below 1")),
        (12.0, None, ([12.0, 256], "b = 12", "beyond 256")),
    ],
)
def test_the_breakeven_plot_draws_both_lines_and_says_where_they_are(measured, predicted, lines):
    import matplotlib

    matplotlib.use("Agg")
    from companion.study.breakeven import Parts, plot_breakeven

    batches = [1, 4, 16, 64, 256]
    parts = Parts(2, batches, [1e-3 * b for b in batches], 1000, 2e-3, [10], [1e-3])
    found = {
        "c0": 0.0,
        "c1": 1e-3,
        "predicted_comm": 2e-3,
        "measured_b": measured,
        "predicted_b": predicted,
    }
    ax = plot_breakeven(parts, found).axes[0]
    vertical = [ln for ln in ax.lines if len(set(ln.get_xdata())) == 1]
    assert [ln.get_xdata()[0] for ln in vertical] == lines[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"measured break-even: {lines[1]}" in legend
    assert f"predicted break-even: {lines[2]}" in legend


def test_a_breakeven_outside_the_batches_measured_says_where_it_lies():
    """Issue 36: chapter 7 printed a break-even of 0 where its plot said "below 1"."""
    from companion.study import breakeven_text

    assert breakeven_text(0.3, [1, 2, 4]) == "below 1"
    assert breakeven_text(None, [1, 2, 4]) == "beyond 4"
    assert breakeven_text(2.6, [1, 2, 4]) == "b = 3"
