"""The hand-written stages are torch optimizers (issue 37, item 2): torch's schedulers drive
them (warm-up, then StepLR) exactly as they drive one process's optimizer, step(closure)
evaluates the closure, and state_dict() / load_state_dict() resume a run mid-way on the same
world size, in float64, at world sizes 1-4 with uneven local shares."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding import Zero1, Zero2, Zero3
from companion.sharding.verify import OPTIMIZERS, global_batches, one_process

from .workers import optimizer_contract_worker, scheduled_one_process

pytestmark = pytest.mark.ch9


@pytest.fixture(scope="module")
def runs():
    return {
        n: launch(optimizer_contract_worker, n, backend="gloo", timeout=300) for n in (1, 2, 3, 4)
    }


def test_the_stages_are_optimizers():
    assert all(issubclass(cls, torch.optim.Optimizer) for cls in (Zero1, Zero2, Zero3))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_torch_s_schedulers_drive_every_stage_as_one_process(runs, world_size, optimizer):
    expected = scheduled_one_process(optimizer)
    assert not torch.allclose(
        expected, one_process(global_batches(5), optimizer)
    )  # the schedule mattered
    for rank, out in enumerate(runs[world_size]):
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
            torch.testing.assert_close(
                out[method, optimizer, "scheduled"],
                expected,
                rtol=1e-9,
                atol=1e-12,
                msg=lambda m: f"{method}, rank {rank}: {m}",
            )


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_state_dict_resumes_a_run_as_if_it_never_stopped(runs, world_size, optimizer):
    expected = one_process(global_batches(5), optimizer)
    for rank, out in enumerate(runs[world_size]):
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
            torch.testing.assert_close(
                out[method, optimizer, "resumed"],
                expected,
                rtol=1e-9,
                atol=1e-12,
                msg=lambda m: f"{method}, rank {rank}: {m}",
            )
