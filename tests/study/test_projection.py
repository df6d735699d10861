import pytest

from companion.collectives.costmodel import predict
from companion.study.projection import PUBLISHED, per_doubling, plot_projection, project

pytestmark = pytest.mark.ch7


def test_projection_is_compute_plus_the_cost_model():
    alpha, beta, nbytes, compute = 5e-5, 1e-10, 4e6, 0.01
    for q in project([1, 8, 256], compute, nbytes, alpha, beta):
        assert q.comm == pytest.approx(predict("ring", q.world_size, nbytes, alpha, beta))
        assert q.step == pytest.approx(compute + q.comm)
        assert q.efficiency == pytest.approx(compute / q.step)
    overlapped = project([256], compute, nbytes, alpha, beta, overlap=True)[0]
    assert overlapped.step == pytest.approx(max(compute, overlapped.comm))
    with pytest.raises(ValueError):
        project([2], 0.0, nbytes, alpha, beta)


def test_per_doubling_and_sources():
    drops = per_doubling([8, 16, 32], [100.0, 90.0, 45.0])
    assert [p for p, _ in drops] == [16, 32]
    assert [d for _, d in drops] == pytest.approx([0.1, 0.5])
    for entry in PUBLISHED.values():
        assert entry["url"].startswith("https://") and entry["source"]
    pub = PUBLISHED["ultrascale"]
    assert len(pub["devices"]) == len(pub["per_device"])


def test_plot_labels_projections_as_such():
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_projection({"lenet": project([8, 16, 256], 0.01, 4e5, 1e-4, 1e-9)})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("PROJECTION") and "published" in labels[1]
