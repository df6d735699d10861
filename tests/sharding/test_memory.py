"""Per-rank memory of parameters, gradients and optimizer state, measured, equals the ZeRO
formulas (exactly: divisible_mlp's sizes divide by 1-4); mixed precision; the calculator."""

import pytest

from companion.runtime import launch
from companion.sharding.measure import state_worker
from companion.sharding.memory import fits, formula_bytes

pytestmark = pytest.mark.ch9


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_measured_state_equals_the_formula(measured, world_size):
    for run in measured[world_size]:
        for method, r in run.items():
            if method == "ZeroRedundancyOptimizer":
                continue  # whole tensors per rank: checked below
            assert r["state"] == formula_bytes(method, r["psi"], world_size), method
            assert r["peak"] >= r["state"]["total"]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_the_peak_counts_each_collective_s_own_buffers(measured, world_size):
    """DDP all-reduces a flat copy of the gradients (4 psi bytes on top); ZeRO-1
    reduce-scatters such a copy into a new shard (4 psi + 4 psi / N). ZeRO-3 frees a unit's
    weights before its gradient goes out: on top it holds at most that unit's flat gradient
    and the shard it becomes (had it kept the weights, one unit's weights more)."""
    run = measured[world_size][0]
    psi = run["DDP"]["psi"]
    extra = {m: r["peak"] - r["state"]["total"] for m, r in run.items()}
    assert extra["DDP"] == 4 * psi
    assert extra["ZeRO-1"] == 4 * psi + 4 * psi / world_size
    largest_unit = (28 * 28 + 1) * 24  # divisible_mlp's first Linear holds most parameters
    assert 0 < extra["ZeRO-3"] <= 4 * largest_unit * (1 + 1 / world_size)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_zero_redundancy_optimizer_splits_the_state_by_whole_tensors(measured, world_size):
    runs = measured[world_size]
    psi = runs[0]["DDP"]["psi"]
    per_rank = [run["ZeroRedundancyOptimizer"]["state"]["optimizer"] for run in runs]
    assert sum(per_rank) == 8 * psi  # every moment once, somewhere
    assert max(per_rank) > formula_bytes("ZeRO-1", psi, world_size)["optimizer"]  # uneven


def test_mixed_precision_totals_against_the_mixed_formula():
    """Autocast keeps fp32 parameters as the master: DDP's and ZeRO-3's totals are the mixed
    formula's; ZeRO-2 holds whole fp32 parameters where the formula has whole bf16 ones."""
    runs = launch(
        state_worker,
        2,
        ("DDP", "ZeRO-2", "ZeRO-3", "FSDP2"),
        precision="bf16",
        backend="gloo",
        timeout=240,
    )
    for run in runs:
        for method, r in run.items():
            psi, mixed = r["psi"], formula_bytes(method, r["psi"], 2, "mixed")
            extra = 2 * psi * (2 - 1) / 2 if method == "ZeRO-2" else 0
            assert r["state"]["total"] == mixed["total"] + extra, method
            assert r["state"] == formula_bytes(method, psi, 2, "fp32"), method


def test_the_calculator_agrees_with_the_measurement(measured):
    for world_size, runs in measured.items():
        for method in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2"):
            r = runs[0][method]
            held = r["state"]["total"] / 2**30
            assert fits(r["psi"], world_size, held, method) == (True, pytest.approx(held))
            assert not fits(r["psi"], world_size, held * 0.99, method)[0]
    assert fits(7 * 10**9, 8, 80, "ZeRO-3")[0] and not fits(7 * 10**9, 8, 80, "DDP")[0]
