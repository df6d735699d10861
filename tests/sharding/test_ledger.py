"""The byte ledger: ZeRO-1 and ZeRO-2 send what DDP's all-reduce sends, ZeRO-3 (and FSDP2)
1.5 times as much; the ring costs and the alpha-beta price of a ledger."""

import pytest
import torch

from companion.sharding.ledger import Ledger, expected_bytes, ring_cost

pytestmark = pytest.mark.ch9
TENSORS = 8  # divisible_mlp: 4 Linear layers, a weight and a bias each


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_each_method_sends_what_its_formula_says(measured, world_size):
    for rank, run in enumerate(measured[world_size]):
        psi_bytes = 4 * run["DDP"]["psi"]
        sent = {m: Ledger(world_size, r["calls"]).sent() for m, r in run.items()}
        ddp = expected_bytes("DDP", psi_bytes, world_size)
        flags = 2 * (world_size - 1) / world_size * 4 * TENSORS  # which tensors got a gradient
        assert sent["DDP"] == pytest.approx(ddp)
        for method in ("ZeRO-1", "ZeRO-2"):
            assert sent[method] == pytest.approx(sent["DDP"] + flags), (method, rank)
            assert sent[method] == pytest.approx(
                expected_bytes(method, psi_bytes, world_size, TENSORS)
            )
        for method in ("ZeRO-3", "ZeRO-3 prefetch"):
            assert sent[method] == pytest.approx(1.5 * sent["DDP"] + flags), (method, rank)
            assert sent[method] == pytest.approx(
                expected_bytes("ZeRO-3", psi_bytes, world_size, TENSORS)
            )
        assert sent["FSDP2"] == pytest.approx(1.5 * sent["DDP"])
        assert sent["FSDP2"] == pytest.approx(expected_bytes("ZeRO-3", psi_bytes, world_size))
        kinds = Ledger(world_size, run["ZeRO-3"]["calls"]).counts()
        layers = 4  # divisible_mlp's Linear layers: one gather each way and one reduce-scatter
        assert kinds == {"all-gather": 2 * layers, "reduce-scatter": layers, "all-reduce": 1}


def test_ring_costs_and_the_price_of_a_ledger():
    assert ring_cost("all-reduce", 1000, 4) == (6.0, 1500.0)
    assert ring_cost("reduce-scatter", 1000, 4) == (3.0, 750.0)
    assert ring_cost("all-gather", 1000, 1) == (0.0, 0.0)
    ledger = Ledger(4, [("reduce-scatter", 1000), ("all-gather", 1000)])
    assert ledger.sent() == 2 * 750.0 == Ledger(4, [("all-reduce", 1000)]).sent()
    assert ledger.seconds(alpha=1e-5, beta=1e-9) == pytest.approx(6 * 1e-5 + 1500 * 1e-9)
    assert ledger.counts() == {"reduce-scatter": 1, "all-gather": 1}


def test_the_ledger_counts_the_older_names_where_torch_lacks_the_new_ones(measured):
    """On torch < 2.13 (Colab's 2.11) the stages call reduce_scatter_tensor and
    all_gather_into_tensor (companion.core.compat): the same ledger, call for call."""
    from companion.runtime import launch

    from .workers import old_names_worker

    methods = ("ZeRO-1", "ZeRO-2", "ZeRO-3")
    old = launch(old_names_worker, 2, methods, backend="gloo", timeout=240)
    for rank, run in enumerate(old):
        for method in methods:
            assert run[method]["calls"] == measured[2][rank][method]["calls"], (method, rank)
            assert run[method]["calls"], method


def test_the_ledger_records_the_element_type_of_each_call():
    ledger = Ledger(2)
    ledger._add("all-gather", [torch.zeros(3, dtype=torch.bfloat16)])
    ledger._add("reduce-scatter", [torch.zeros(4, dtype=torch.float32)])
    ledger._add("all-gather", [torch.zeros(2, dtype=torch.float32)])
    assert ledger.calls == [("all-gather", 6), ("reduce-scatter", 16), ("all-gather", 8)]
    assert ledger.dtypes_by_kind() == {
        "all-gather": ["bfloat16", "float32"],
        "reduce-scatter": ["float32"],
    }
