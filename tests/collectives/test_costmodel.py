"""The alpha-beta model: bus bandwidth, cost terms, the fit (recovers known parameters), measurements."""

import numpy as np
import pytest

from companion.collectives import (
    ALLREDUCES,
    Measurement,
    bus_bandwidth,
    cost_terms,
    fit_alpha_beta,
    fit_link,
    measure_allreduce,
    plot_bandwidth,
    plot_model,
    predict,
)
from companion.runtime import WorkerError

pytestmark = pytest.mark.ch3

ALPHA, BETA = 40e-6, 1 / 2e9  # 40 microseconds per message, 2 GB/s
SIZES = np.logspace(0, 8, 17)  # 1 byte .. 100 MB


def test_bus_bandwidth_follows_the_nccl_tests_convention():
    assert bus_bandwidth(1e9, 1.0, 2) == pytest.approx(1e9)  # 2 (p-1)/p = 1 for two ranks
    assert bus_bandwidth(1e9, 1.0, 4) == pytest.approx(1.5e9)
    assert bus_bandwidth(1e9, 2.0, 8) == pytest.approx(0.5e9 * 14 / 8)
    assert bus_bandwidth(1e9, 1.0, 1) == 0
    assert Measurement("ring", 4, 1000, 1e-6).busbw == pytest.approx(1.5e9)


def test_cost_terms_of_each_algorithm():
    assert cost_terms("naive", 4) == (6, 6)
    assert cost_terms("ring", 4) == (6, 1.5) == cost_terms("dist.all_reduce", 4)
    assert cost_terms("pipelined ring", 4) == cost_terms("ring", 4)
    assert cost_terms("recursive doubling", 8) == (3, 3)
    assert cost_terms("recursive doubling", 6) == (4, 4)  # 4 ranks double; 2 fold in and out
    assert cost_terms("ring", 1) == (0, 0)
    with pytest.raises(ValueError, match="no cost model for 'tree'"):
        cost_terms("tree", 4)


def test_the_fit_recovers_alpha_and_beta_from_exact_data():
    alpha, beta = fit_alpha_beta(SIZES, ALPHA + BETA * SIZES)
    assert alpha == pytest.approx(ALPHA, rel=1e-9) and beta == pytest.approx(BETA, rel=1e-9)


def test_the_fit_recovers_alpha_and_beta_from_noisy_data():
    rng = np.random.default_rng(0)
    noisy = (ALPHA + BETA * SIZES) * rng.uniform(0.95, 1.05, SIZES.size)
    alpha, beta = fit_alpha_beta(SIZES, noisy)
    assert alpha == pytest.approx(ALPHA, rel=0.1) and beta == pytest.approx(BETA, rel=0.1)


def test_the_fit_never_returns_a_negative_parameter():
    rng = np.random.default_rng(1)
    times = BETA * SIZES[8:] * rng.uniform(0.9, 1.1, SIZES[8:].size)  # no latency at all: alpha ~ 0
    alpha, beta = fit_alpha_beta(SIZES[8:], times)
    assert alpha >= 0 and beta == pytest.approx(BETA, rel=0.1)


def test_fit_link_recovers_one_link_from_several_algorithms_and_world_sizes():
    found = [
        Measurement(name, p, n, predict(name, p, n, ALPHA, BETA))
        for name in ("naive", "ring", "recursive doubling")
        for p in (1, 2, 3, 4)
        for n in SIZES.astype(int)
    ]
    alpha, beta = fit_link(found)
    assert alpha == pytest.approx(ALPHA, rel=1e-6) and beta == pytest.approx(BETA, rel=1e-6)
    assert predict("ring", 4, 1e6, alpha, beta) == pytest.approx(6 * ALPHA + 1.5e6 * BETA)


def test_bad_fit_input():
    with pytest.raises(ValueError, match="at least two"):
        fit_alpha_beta([1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([1.0, 2.0], [1.0, 0.0])


def test_measurements_cover_every_algorithm_size_and_world_size():
    found = measure_allreduce([1, 2], [1, 1000], repeats=2, timeout=120)
    keys = {(m.algorithm, m.world_size, m.nbytes) for m in found}
    assert keys == {(a, p, n) for a in ALLREDUCES for p in (1, 2) for n in (4, 4000)}
    assert all(m.seconds > 0 for m in found)
    fig = plot_bandwidth(found)
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) == len(ALLREDUCES)
    fig = plot_model(found, *fit_link(found))
    assert len(fig.axes[0].lines) == 2 * len(ALLREDUCES)  # measured points and prediction each
    with pytest.raises(ValueError, match="2 or more processes"):
        plot_bandwidth([m for m in found if m.world_size == 1])


def test_an_unknown_algorithm_is_refused_before_launching_and_by_the_worker():
    with pytest.raises(ValueError, match="unknown algorithm"):  # no process started
        measure_allreduce([1], [1], algorithms=("tree",), timeout=60)
    from companion.collectives import time_allreduce
    from companion.runtime import launch

    with pytest.raises(WorkerError, match="unknown algorithm"):
        launch(time_allreduce, 1, [1], ("tree",), timeout=60)
